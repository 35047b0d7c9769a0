"""The built-in scenarios over machines imported from hwloc XML: they load, their machines
are what the files describe (not a built-in template), and the oracle solves them.
"""

from __future__ import annotations

import re

import pytest

from toposcope.sim.clock import SimClock
from toposcope.sim.oracle import solve
from toposcope.sim.scenarios import SCENARIO_DIR, build_cluster, builtin_scenarios, load_scenario
from toposcope.sim.templates import BUILTIN_TEMPLATES, NodeTemplate

MACHINES = SCENARIO_DIR / "machines"
IMPORTED = ["imported-pci-gpu", "imported-cpu-numa", "mixed-imported"]


def templates(name: str) -> dict[str, NodeTemplate]:
    return {n.template.name: n.template for n in load_scenario(f"builtin:{name}").nodes}


def test_the_imported_scenarios_are_built_in() -> None:
    assert set(IMPORTED) <= set(builtin_scenarios())


def test_every_machine_file_is_used_and_credited() -> None:
    notice = (MACHINES / "NOTICE.md").read_text()
    used = set()
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        used |= set(re.findall(r"machines/([\w.+-]+\.xml)", path.read_text()))
    files = {p.name for p in MACHINES.glob("*.xml")}
    assert files == used
    for name in files:
        assert f"`{name}`" in notice, name
    assert (MACHINES / "COPYING").is_file()


def test_pci_gpu_machine_is_the_file_not_a_builtin() -> None:
    [(name, box)] = templates("imported-pci-gpu").items()
    assert name not in BUILTIN_TEMPLATES
    assert box.numa_ids == (0, 1) and len(box.cpus) == 32
    assert [g.numa_node for g in box.gpus] == [0, 1, 1]
    assert box.gpu_model == "Tesla M2075" and box.gpu_memory_bytes == 6 * 2**30
    # GPU1 and GPU2 share socket 1's host bridge; GPU0 is across the sockets from both
    assert box.link_class(1, 2) == "cross-switch"
    assert box.link_class(0, 1) == box.link_class(0, 2) == "cross-socket"


def test_cpu_machines_are_the_files_not_builtins() -> None:
    found = templates("imported-cpu-numa")
    assert not set(found) & set(BUILTIN_TEMPLATES)
    big, snc = found["e5-24n"], found["gold-snc2"]
    assert len(big.numa_ids) == 24 and len(big.cpus) == 384 and not big.gpus
    assert {big.distance(0, 1), big.distance(0, 2), big.distance(0, 10)} == {50, 65, 79}
    assert snc.numa_ids == (0, 1, 2, 3) and len(snc.cpus) == 80
    # sub-NUMA clustering: CPUs numbered round-robin over the four nodes
    assert list(snc.node_cpus(1))[:3] == [1, 5, 9]
    assert (snc.distance(0, 2), snc.distance(0, 1)) == (11, 21)


@pytest.mark.parametrize("name", ["imported-pci-gpu", "imported-cpu-numa"])
def test_the_oracle_solves_them_to_their_bound(name: str) -> None:
    cluster = build_cluster(load_scenario(f"builtin:{name}"), SimClock(seed=0, speed=0))
    cluster.advance(40.0)  # the queued job has been placed
    result = solve(cluster)
    assert result.exact and result.total == pytest.approx(result.upper_bound)
    assert result.gain > 0.3  # the defects cost something, and the oracle undoes them
