"""sim.fsgen: generated host trees are deterministic and read back by the collector."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from tests.workloads.helpers import build, scrape, workload_names, workload_value
from toposcope.config import WorkloadSettings
from toposcope.sim.fsgen import write_workload_tree


def _snapshot(root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            files[key] = "-> " + os.readlink(path)
        elif path.is_file():
            files[key] = path.read_text()
    return files


@pytest.mark.parametrize("version", [1, 2])
def test_generated_tree_is_read_back(tmp_path: Path, version: Literal[1, 2]) -> None:
    tree = write_workload_tree(
        tmp_path, workloads=12, threads_per_workload=3, cgroup_version=version, seed=7
    )
    assert len(tree.workloads) == 12
    reg = scrape(build(tmp_path))
    assert workload_names(reg) == {w.name for w in tree.workloads}
    threads = sum(
        sample.value
        for family in reg.collect()
        for sample in family.samples
        if sample.name == "toposcope_workload_threads"
    )
    assert threads == 12 * 3
    for workload in tree.workloads:
        if workload.gpu_minor is not None:
            assert (
                workload_value(
                    reg,
                    "toposcope_workload_gpu_info",
                    workload=workload.name,
                    gpu=str(workload.gpu_minor),
                )
                == 1.0
            )
    kinds = {w.kind for w in tree.workloads}
    assert "kubernetes" in kinds


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_workload_tree(tmp_path / name, workloads=5, threads_per_workload=2, seed=3)
    write_workload_tree(tmp_path / "c", workloads=5, threads_per_workload=2, seed=4)
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")
    assert _snapshot(tmp_path / "a") != _snapshot(tmp_path / "c")


def test_topology_from_an_hwloc_snapshot(tmp_path: Path, hwloc_root: Callable[[str], Path]) -> None:
    source = hwloc_root("16amd64-8n2c")
    tree = write_workload_tree(
        tmp_path, topology_root=source, workloads=20, threads_per_workload=4, seed=1
    )
    reg = scrape(build(tmp_path, WorkloadSettings(max_workloads=15)))
    assert len(workload_names(reg)) == 15
    assert reg.get_sample_value("toposcope_workloads_dropped_total") == 5
    nodes = {
        sample.labels["numa_node"]
        for family in reg.collect()
        for sample in family.samples
        if sample.name == "toposcope_workload_cpu_seconds_total"
    }
    assert nodes <= {str(n) for n in range(8)}
    assert len(nodes) > 2
    assert len(tree.workloads) == 20


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_workload_tree(tmp_path, cgroup_version=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        write_workload_tree(tmp_path, threads_per_workload=0)
