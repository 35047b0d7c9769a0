"""Memory bandwidth per workload from resctrl MON groups (hand-written trees after the
kernel's ``Documentation/filesystems/resctrl.rst``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toposcope.host.resctrl import MbmDomain
from toposcope.host.resctrl_groups import (
    MonGroup,
    attribute,
    domain_numa,
    read_mon_groups,
    workload_traffic,
)


def group(root: Path, name: str, tasks: list[int], domains: dict[str, tuple[str, str]]) -> None:
    """A MON group ``name`` under ``root`` with its tasks and (local, total) per domain dir."""
    base = root / name
    base.mkdir(parents=True)
    (base / "tasks").write_text("".join(f"{t}\n" for t in tasks))
    for domain, (local, total) in domains.items():
        d = base / "mon_data" / domain
        d.mkdir(parents=True)
        (d / "mbm_local_bytes").write_text(local + "\n")
        (d / "mbm_total_bytes").write_text(total + "\n")


@pytest.fixture
def resctrl(tmp_path: Path) -> Path:
    root = tmp_path / "resctrl"
    (root / "mon_data").mkdir(parents=True)
    (root / "info").mkdir()
    group(root / "mon_groups", "a", [100, 101], {"mon_L3_00": ("600", "1000")})
    group(root / "mon_groups", "mixed", [101, 200], {"mon_L3_00": ("5", "5")})
    group(
        root / "gold" / "mon_groups",
        "b",
        [200],
        {"mon_L3_01": ("70", "Unavailable"), "mon_L3_00": ("30", "40")},
    )
    return root


def test_mon_groups_of_the_root_and_of_control_groups_are_read(resctrl: Path) -> None:
    groups = {g.name: g for g in read_mon_groups(resctrl)}
    assert set(groups) == {"a", "mixed", "b"}
    assert groups["a"].tasks == {100, 101}
    assert groups["a"].traffic == {MbmDomain(0): (600, 1000)}
    # a file that does not read as a number leaves its domain out
    assert groups["b"].traffic == {MbmDomain(0): (30, 40)}


def test_a_group_goes_to_the_workload_holding_all_its_threads(resctrl: Path) -> None:
    owner = {100: "job-a", 101: "job-a", 200: "job-b"}
    found = attribute(read_mon_groups(resctrl), owner)
    assert {k: [g.name for g in v] for k, v in found.items()} == {"job-a": ["a"], "job-b": ["b"]}
    # no workload kept holds the threads: nobody's
    assert attribute(read_mon_groups(resctrl), {}) == {}


def test_traffic_is_keyed_by_numa_node_and_locality() -> None:
    l3 = {0: (0, 1), 1: (2, 3)}
    cpu_node = {0: 0, 1: 0, 2: 1, 3: 1}
    assert domain_numa(MbmDomain(1), l3, cpu_node) == 1
    assert domain_numa(MbmDomain(0, node=2), l3, cpu_node) == 2  # SNC: the kernel names it
    assert domain_numa(MbmDomain(0), {0: (0, 2)}, cpu_node) is None  # spans two nodes
    groups = [
        MonGroup("g", frozenset({1}), {MbmDomain(0): (600, 1000), MbmDomain(1): (5, 5)}),
        MonGroup("h", frozenset({2}), {MbmDomain(0): (100, 100)}),
    ]
    assert workload_traffic(groups, l3, cpu_node) == {
        ("0", "local"): 700.0,
        ("0", "remote"): 400.0,
        ("1", "local"): 5.0,
        ("1", "remote"): 0.0,
    }
