"""Our topology builders agree with hwloc on hwloc's own regression corpus.

Two families of cases:

* ``linux/NAME``: every ``tests/fixtures/hwloc/linux/*.test`` run with hwloc's default
  options (no ``options:`` line) and no ``env:`` line. The sysfs/procfs snapshot is
  unpacked once (only the files the builder reads, see ``conftest.py``) and built with
  :func:`build_from_sysfs`; hwloc's expected output (the ``.console`` ``lstopo -v`` text or
  the ``.xml`` the test names) is the reference.
* ``xml/NAME`` and ``linux-xml/NAME``: every hwloc XML file of the corpus, built with
  :func:`build_from_hwloc_xml` and compared with an independent reading of the same file
  (:mod:`tests.hwloc_expected`).

Each case is checked separately for: the set of NUMA node OS indexes; each node's CPUs
(every PU hwloc shows belongs, in our model, to a node hwloc attaches nearest to it, and
no other CPU appears); each node's local memory (exact from XML, within the printed unit's
rounding from ``lstopo -v``); each package's CPUs; the NUMA node of each PCI function that
hwloc places under exactly one node; and the NUMA latency matrix.

Where the model differs from hwloc on purpose, :data:`DISAGREEMENTS` names the case and
check with the reason, and that check is a strict xfail (it must keep failing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import HWLOC_LINUX, HWLOC_XML
from tests.hwloc_expected import Expected, load_expected, read_test_file
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import Topology
from toposcope.topology.sysfs import build_from_sysfs

CHECKS = ("nodes", "node_cpus", "node_memory", "packages", "pci", "distances")

_CGROUP = (
    "hwloc restricts the topology to the cpuset/mems of the cgroup it ran in; we describe "
    "the whole machine"
)
#: (case, check) -> why our model differs from hwloc on purpose.
DISAGREEMENTS: dict[tuple[str, str], str] = {
    ("linux/16amd64-8n2c-cpusets", "nodes"): _CGROUP,
    ("linux/16amd64-8n2c-cpusets", "node_cpus"): _CGROUP,
    ("linux/16amd64-8n2c-cpusets", "packages"): _CGROUP,
    ("linux/16em64t-4s2ca2c-cpusetreorder", "node_cpus"): _CGROUP,
    ("linux/16em64t-4s2ca2c-cpusetreorder", "packages"): _CGROUP,
    ("linux/4fake-4gr1nu1pu", "nodes"): _CGROUP,
    ("linux/4fake-4gr1nu1pu", "node_cpus"): _CGROUP,
    ("linux/4fake-4gr1nu1pu", "packages"): _CGROUP,
    ("linux/16ia64-8n2s", "packages"): (
        "the kernel gives two packages the same physical_package_id; hwloc splits them by "
        "core_siblings, we key packages by that id"
    ),
    ("linux/fakememinitiators-1np2c+1npp+gi", "nodes"): (
        "hwloc hides the kernel's CPU-only nodes 0-4 and hands their CPUs to memory nodes "
        "found through access initiators; we keep the kernel's nodes (metrics use its ids)"
    ),
    ("linux/fakememinitiators-1np2c+1npp+gi", "node_cpus"): (
        "the kernel lists CPUs under memoryless nodes 0-3; hwloc moves them to their "
        "initiator memory nodes 5-10"
    ),
}


@dataclass(frozen=True)
class Case:
    """One comparison: how to build our model and where hwloc's answer is."""

    id: str
    expected: Path
    tarball: str | None = None  # stem of linux/<tarball>.tar.bz2 for sysfs cases
    xml: Path | None = None  # input of build_from_hwloc_xml for XML cases


def _sysfs_cases() -> list[Case]:
    cases = []
    for test in sorted(HWLOC_LINUX.glob("*.test")):
        spec = read_test_file(test)
        if "options" in spec or "env" in spec:
            continue
        source = spec["source"][0]
        assert source.endswith(".tar.bz2"), test
        cases.append(
            Case(
                id=f"linux/{test.stem}",
                expected=HWLOC_LINUX / spec["target"][0],
                tarball=source.removesuffix(".tar.bz2"),
            )
        )
    return cases


def _xml_cases() -> list[Case]:
    return [
        Case(id=f"xml/{p.stem}", expected=p, xml=p) for p in sorted(HWLOC_XML.glob("*.xml"))
    ] + [
        Case(id=f"linux-xml/{p.stem}", expected=p, xml=p) for p in sorted(HWLOC_LINUX.glob("*.xml"))
    ]


CASES = _sysfs_cases() + _xml_cases()


def _params() -> list[object]:
    params: list[object] = []
    for case in CASES:
        for check in CHECKS:
            reason = DISAGREEMENTS.get((case.id, check))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(case, check, id=f"{case.id}:{check}", marks=marks))
    return params


def test_corpus_is_covered() -> None:
    """The selection rule keeps the cases it should (guards against a glob silently failing)."""
    ids = {c.id for c in CASES}
    assert len([c for c in CASES if c.tarball]) >= 25
    assert "linux/offline-cpu0-node0" in ids
    assert "linux/nvidia-dgx-gb10" in ids  # an .xml target with default options
    assert "linux/16em64t-4s2c2t-xml" not in ids  # has options
    assert "linux/fakeheterocpunuma" not in ids  # has env
    assert len([c for c in CASES if c.xml]) == len(list(HWLOC_XML.glob("*.xml"))) + len(
        list(HWLOC_LINUX.glob("*.xml"))
    )
    for key in DISAGREEMENTS:
        assert key[0] in ids and key[1] in CHECKS, key


Built = Callable[[Case], tuple[Topology, Expected]]


@pytest.fixture(scope="module")
def built(snapshot: Callable[[str], Path]) -> Built:
    """Build each case's model and read hwloc's answer once per module."""
    cache: dict[str, tuple[Topology, Expected]] = {}

    def get(case: Case) -> tuple[Topology, Expected]:
        if case.id not in cache:
            if case.tarball is not None:
                root = snapshot(case.tarball)
                topology = build_from_sysfs(root / "sys", root / "proc")
            else:
                assert case.xml is not None
                topology = build_from_hwloc_xml(case.xml)
            cache[case.id] = (topology, load_expected(case.expected))
        return cache[case.id]

    return get


def _problems(check: str, topology: Topology, expected: Expected) -> list[str]:
    ours = {n.id: n for n in topology.numa_nodes}
    problems: list[str] = []
    if check == "nodes":
        if set(ours) != set(expected.nodes):
            problems.append(f"NUMA nodes: ours {sorted(ours)}, hwloc {sorted(expected.nodes)}")
    elif check == "node_cpus":
        where = topology.cpu_to_node()
        for pu, candidates in sorted(expected.pu_nodes.items()):
            if where.get(pu) not in candidates:
                problems.append(f"CPU {pu}: ours node {where.get(pu)}, hwloc {sorted(candidates)}")
        extra = sorted(set(where) - set(expected.pu_nodes))
        if extra:
            problems.append(f"CPUs hwloc does not show: {extra}")
        for node_id, node in ours.items():
            hwloc = expected.nodes.get(node_id)
            if hwloc is not None and not set(node.cpus) <= hwloc.cpuset:
                problems.append(f"node {node_id}: CPUs outside hwloc's cpuset")
    elif check == "node_memory":
        for node_id, hwloc in sorted(expected.nodes.items()):
            if node_id not in ours or hwloc.memory is None:
                continue
            mine = ours[node_id].memory_bytes
            # lstopo -v rounds to the unit it prints (local=95GiB): allow half a unit.
            if abs(mine - hwloc.memory) * 2 > hwloc.memory_tolerance:
                problems.append(
                    f"node {node_id}: ours {mine} bytes, hwloc {hwloc.memory} "
                    f"(printed unit {hwloc.memory_tolerance})"
                )
    elif check == "packages":
        packages = {p.id: frozenset(p.cpus) for p in topology.packages}
        if packages != expected.packages:
            problems.append(
                f"packages: ours { {k: sorted(v) for k, v in sorted(packages.items())} }, "
                f"hwloc { {k: sorted(v) for k, v in sorted(expected.packages.items())} }"
            )
    elif check == "pci":
        devices = {d.bus_id: d for d in topology.pci_devices}
        if not expected.pci_nodes:
            pytest.skip("hwloc places no PCI function under a single NUMA node here")
        for bus_id, node_id in sorted(expected.pci_nodes.items()):
            device = devices.get(bus_id)
            if device is None:
                problems.append(f"PCI {bus_id}: missing")
            elif device.numa_node != node_id:
                problems.append(f"PCI {bus_id}: ours node {device.numa_node}, hwloc {node_id}")
    elif check == "distances":
        if not expected.distances:
            pytest.skip("hwloc shows no NUMA latency matrix here")
        for (a, b), value in sorted(expected.distances.items()):
            if a in ours and b in ours and ours[a].distances.get(b) != value:
                problems.append(
                    f"distance {a}->{b}: ours {ours[a].distances.get(b)}, hwloc {value}"
                )
    return problems


@pytest.mark.parametrize(("case", "check"), _params())
def test_agrees_with_hwloc(case: Case, check: str, built: Built) -> None:
    """One check of one corpus case (see the module docstring)."""
    topology, expected = built(case)
    problems = _problems(check, topology, expected)
    assert not problems, f"{case.id} vs {case.expected.name}:\n" + "\n".join(problems[:12])


def test_whole_machine_view_matches_hwloc_disallowed(snapshot: Callable[[str], Path]) -> None:
    """With ``--disallowed`` hwloc shows the whole machine too, and then we agree.

    This is the non-default ``16amd64-8n2c-cpusets-disallowed`` test of the corpus: it
    supports the cgroup entries of :data:`DISAGREEMENTS` (the only difference there is the
    restriction to the cgroup).
    """
    root = snapshot("16amd64-8n2c-cpusets")
    topology = build_from_sysfs(root / "sys", root / "proc")
    expected = load_expected(HWLOC_LINUX / "16amd64-8n2c-cpusets-disallowed.console")
    for check in ("nodes", "node_cpus", "node_memory", "packages", "distances"):
        assert not _problems(check, topology, expected), check
