"""The numa_cpu collector: /proc/stat summed per NUMA node, monotonic across CPU hotplug."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.exporters.text_registry import text_registry
from toposcope.config import ExporterConfig, HostPaths
from toposcope.errors import NoDataError
from toposcope.exporters.collectors.numa_cpu import ENTRY, NumaCpuCollector
from toposcope.exporters.context import CollectorContext
from toposcope.host.procfs import CPU_MODES, Procfs

METRIC = "toposcope_numa_cpu_seconds_total"


def context_for(root: Path) -> CollectorContext:
    return CollectorContext(ExporterConfig(paths=HostPaths.under(root)))


def registry_for(root: Path) -> tuple[CollectorRegistry, NumaCpuCollector]:
    ctx = context_for(root)
    collector = NumaCpuCollector(Procfs(ctx.config.paths.procfs, hz=100), ctx.topology)
    return text_registry(collector), collector


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build_host(root: Path, nodes: Mapping[int, Sequence[int]]) -> None:
    """A minimal sysfs: CPUs (package = node) under their nodes, all online."""
    cpus = sorted(c for members in nodes.values() for c in members)
    system = root / "sys" / "devices" / "system"
    for node, members in nodes.items():
        write(system / "node" / f"node{node}" / "cpulist", ",".join(map(str, members)) + "\n")
        for cpu in members:
            write(system / "cpu" / f"cpu{cpu}" / "topology" / "physical_package_id", f"{node}\n")
    set_online(root, cpus)


def set_online(root: Path, cpus: Sequence[int]) -> None:
    write(root / "sys" / "devices" / "system" / "cpu" / "online", ",".join(map(str, cpus)) + "\n")


def write_stat(root: Path, lines: Mapping[int, str]) -> None:
    body = "".join(f"cpu{cpu} {fields}\n" for cpu, fields in sorted(lines.items()))
    write(root / "proc" / "stat", "cpu  0 0 0 0 0 0 0 0 0 0\n" + body + "intr 1\nctxt 2\n")


def test_entry_builds_from_the_context(hwloc_root: Callable[[str], Path]) -> None:
    registry = text_registry(ENTRY.factory(context_for(hwloc_root("64amd64-4s2n4ca2co"))))
    assert registry.get_sample_value(METRIC, {"numa_node": "1", "mode": "idle"}) is not None


def test_4_socket_8_node_opteron(hwloc_root: Callable[[str], Path]) -> None:
    registry, _ = registry_for(hwloc_root("64amd64-4s2n4ca2co"))
    value = registry.get_sample_value
    # node0 = cpu0-7; their /proc/stat columns summed: 395 0 999 147363 2305 0 32 0 ticks
    expected = dict(zip(CPU_MODES, (3.95, 0.0, 9.99, 1473.63, 23.05, 0.0, 0.32, 0.0), strict=True))
    for mode, seconds in expected.items():
        assert value(METRIC, {"numa_node": "0", "mode": mode}) == pytest.approx(seconds), mode
    # node7 = cpu56-63: 24 0 85 147017 147 0 0 0 ticks
    assert value(METRIC, {"numa_node": "7", "mode": "user"}) == pytest.approx(0.24)
    assert value(METRIC, {"numa_node": "7", "mode": "idle"}) == pytest.approx(1470.17)
    assert value(METRIC, {"numa_node": "7", "mode": "iowait"}) == pytest.approx(1.47)
    families = list(registry.collect())
    assert len(families[0].samples) == 8 * len(CPU_MODES)


def test_offline_cpus_are_not_counted(hwloc_root: Callable[[str], Path]) -> None:
    # CPUs 2, 5, 13 and 14 are offline (cpuN/online = 0) but still listed in this proc/stat
    registry, _ = registry_for(hwloc_root("16em64t-4s2c2t-offlines"))
    value = registry.get_sample_value
    expected = (2123466, 15810, 1685964, 9628602348, 31879, 3245242, 55724, 0)
    for mode, ticks in zip(CPU_MODES, expected, strict=True):
        assert value(METRIC, {"numa_node": "0", "mode": mode}) == pytest.approx(ticks / 100)


def test_no_proc_stat_is_no_data(hwloc_root: Callable[[str], Path]) -> None:
    _, collector = registry_for(hwloc_root("16ia64-8n2s"))
    with pytest.raises(NoDataError):
        list(collector.collect())


def test_counters_never_go_backwards_when_a_cpu_goes_offline(tmp_path: Path) -> None:
    build_host(tmp_path, {0: [0, 1], 1: [2, 3]})
    write_stat(
        tmp_path,
        {
            0: "100 0 10 1000 0 0 0 0",
            1: "100 0 10 1000 0 0 0 0",
            2: "200 0 20 2000 5 0 0 0",
            3: "300 0 30 3000 5 0 0 0",
        },
    )
    registry, _ = registry_for(tmp_path)
    node1 = {"numa_node": "1", "mode": "user"}
    assert registry.get_sample_value(METRIC, node1) == pytest.approx(5.0)

    # CPU 3 goes offline: the kernel stops listing it; CPU 2 keeps running
    set_online(tmp_path, [0, 1, 2])
    write_stat(
        tmp_path,
        {
            0: "110 0 10 1100 0 0 0 0",
            1: "110 0 10 1100 0 0 0 0",
            2: "210 0 20 2100 5 0 0 0",
        },
    )
    assert registry.get_sample_value(METRIC, node1) == pytest.approx(5.1)  # 2.10 + 3.00 kept
    assert registry.get_sample_value(METRIC, {"numa_node": "1", "mode": "idle"}) == pytest.approx(
        51.0
    )
    assert registry.get_sample_value(METRIC, {"numa_node": "0", "mode": "user"}) == pytest.approx(
        2.2
    )

    # it comes back and continues from where it was
    set_online(tmp_path, [0, 1, 2, 3])
    write_stat(
        tmp_path,
        {
            0: "110 0 10 1100 0 0 0 0",
            1: "110 0 10 1100 0 0 0 0",
            2: "210 0 20 2100 5 0 0 0",
            3: "350 0 30 3000 5 0 0 0",
        },
    )
    assert registry.get_sample_value(METRIC, node1) == pytest.approx(5.6)


def test_a_mode_stepping_back_is_held(tmp_path: Path) -> None:
    build_host(tmp_path, {0: [0]})
    write_stat(tmp_path, {0: "100 0 0 1000 500 0 0 0"})
    registry, _ = registry_for(tmp_path)
    iowait = {"numa_node": "0", "mode": "iowait"}
    assert registry.get_sample_value(METRIC, iowait) == pytest.approx(5.0)
    write_stat(tmp_path, {0: "100 0 0 1010 498 0 0 0"})  # tickless iowait went back
    assert registry.get_sample_value(METRIC, iowait) == pytest.approx(5.0)
    write_stat(tmp_path, {0: "100 0 0 1010 520 0 0 0"})
    assert registry.get_sample_value(METRIC, iowait) == pytest.approx(5.2)


def test_a_garbled_cpu_line_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    build_host(tmp_path, {0: [0, 1]})
    write_stat(tmp_path, {0: "100 0 0 1000 0 0 0 0", 1: "1O0 0 0 1000 0 0 0 0"})
    registry, _ = registry_for(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert registry.get_sample_value(
            METRIC, {"numa_node": "0", "mode": "user"}
        ) == pytest.approx(1.0)
    assert any("cpu1 1O0" in r.getMessage() for r in caplog.records)


def test_short_lines_publish_only_the_modes_they_have(tmp_path: Path) -> None:
    build_host(tmp_path, {0: [0]})
    write_stat(tmp_path, {0: "100 0 0 1000 0 0 0"})  # no steal column
    registry, _ = registry_for(tmp_path)
    assert registry.get_sample_value(METRIC, {"numa_node": "0", "mode": "softirq"}) == 0.0
    assert registry.get_sample_value(METRIC, {"numa_node": "0", "mode": "steal"}) is None
