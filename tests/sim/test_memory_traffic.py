"""A simulated job's memory traffic: what resctrl MBM counts, from the truth's NUMA
sensitivity, and what the exporter publishes of it per workload.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.memory_traffic import bytes_per_cpu_second, split_traffic
from toposcope.sim.model import Performance
from toposcope.sim.nodefs import SimExporters

FAMILY = "toposcope_workload_memory_bandwidth_bytes_total"


def test_a_more_memory_bound_job_moves_more_bytes_per_cpu_second() -> None:
    light = make_job("light", JobKind.CPU_TRAIN, numa_sensitivity=0.2)
    heavy = make_job("heavy", JobKind.CPU_TRAIN, numa_sensitivity=0.8)
    local = Performance(1.0, 1.0, factors={"numa": 1.0})
    assert bytes_per_cpu_second(heavy, local) == pytest.approx(
        4 * bytes_per_cpu_second(light, local)
    )
    # remote memory slows the memory-bound part: fewer bytes per CPU second
    slowed = Performance(1.0, 1.5, factors={"numa": 1.5})
    assert bytes_per_cpu_second(heavy, slowed) == pytest.approx(
        bytes_per_cpu_second(heavy, local) / 1.5
    )
    idle = make_job("idle", JobKind.NOTEBOOK)
    assert bytes_per_cpu_second(idle, local) == 0.0


def test_traffic_splits_by_thread_shares_times_page_shares() -> None:
    # pages first touched evenly from both nodes: every thread still reads all of them
    spread = split_traffic(100.0, {(0, 0): 0.5, (1, 1): 0.5})
    assert spread == {
        (0, "local"): pytest.approx(25.0),
        (0, "remote"): pytest.approx(25.0),
        (1, "local"): pytest.approx(25.0),
        (1, "remote"): pytest.approx(25.0),
    }
    assert split_traffic(100.0, {(1, 0): 1.0}) == {(1, "remote"): 100.0}
    assert split_traffic(0.0, {(0, 0): 1.0}) == {}


def traffic(text: bytes | str) -> dict[str, dict[str, float]]:
    """workload -> locality -> bytes, summed over NUMA nodes."""
    raw = text.decode() if isinstance(text, bytes) else text
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(raw):
        for sample in family.samples:
            if sample.name == FAMILY:
                mine = found.setdefault(sample.labels["workload"], {})
                where = sample.labels["locality"]
                mine[where] = mine.get(where, 0.0) + sample.value
    return found


def test_the_exporter_publishes_each_workloads_local_and_remote_traffic(
    demo: tuple[SimCluster, SimExporters],
) -> None:
    cluster, exporters = demo
    before = traffic(exporters.scrape("cpu-01"))
    cluster.advance(60.0)
    after = traffic(exporters.scrape("cpu-01"))
    # its threads on one node, its memory on the other: all of it remote
    wrong = after["cnn-wrong-memory.service"]
    assert wrong["remote"] > before["cnn-wrong-memory.service"].get("remote", 0.0)
    assert wrong.get("local", 0.0) == 0.0
    placed = after["cnn-well-placed.service"]
    assert placed["local"] > 0 and placed.get("remote", 0.0) == 0.0
    # the same class, slowed by remote memory: fewer bytes than the well-placed one
    assert wrong["remote"] < placed["local"]
    spread = traffic(exporters.scrape("cpu-02"))["cnn-unpinned-1.service"]
    assert spread["remote"] == pytest.approx(spread["local"], rel=0.05)


def test_resctrl_tree_holds_one_group_per_workload_and_the_root_sum(
    demo: tuple[SimCluster, SimExporters],
) -> None:
    cluster, exporters = demo
    exporters.scrape("cpu-02")
    cluster.advance(30.0)
    exporters.scrape("cpu-02")
    root = Path(exporters.state_dir) / "nodes" / "cpu-02" / "sys/fs/resctrl"
    groups = sorted(p.name for p in (root / "mon_groups").iterdir())
    assert len(groups) == 2

    def total(base: Path) -> int:
        return sum(int(f.read_text()) for f in base.glob("mon_data/mon_L3_*/mbm_total_bytes"))

    assert total(root) == sum(total(root / "mon_groups" / g) for g in groups) > 0
