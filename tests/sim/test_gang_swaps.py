"""Several jobs moved at once in the simulator: two spread gangs trade nodes so that each ends
under one leaf, a small job moves aside in the same request, each moved job pays its own
restart; a refused request changes nothing; a repeat does nothing again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.test_gang import part, rows, scenario
from toposcope.rm import ActionStatus, ResourceManagerError
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds
from toposcope.sim.gang_oracle import gang_move_costs
from toposcope.sim.gang_swaps import JobPlace, JointMove, PartPlace, move_jobs
from toposcope.sim.oracle import solve
from toposcope.sim.scenarios import build_cluster, load_scenario

GANGS = (
    "    - {name: dp, jobs: [a, b], pattern: data-parallel, comm_share: 0.2}\n"
    "    - {name: tp, jobs: [c, d], pattern: tensor-parallel, comm_share: 0.3}\n"
)
ALL = list(range(8))
LOW, HIGH = [0, 1, 2, 3], [4, 5, 6, 7]


def crossed(tmp_path: Path) -> SimCluster:
    """dp on g-01 and g-03, tp on g-02 and g-04: both cross the spine, sharing its uplinks."""
    jobs = part("a", "g-01") + part("b", "g-03") + part("c", "g-02") + part("d", "g-04")
    return scenario(tmp_path, jobs, GANGS)


def placed(cluster: SimCluster) -> dict[str, tuple[str, list[int], list[int]]]:
    """Each workload's node, GPUs and CPUs."""
    return {
        w.name.removesuffix(".service"): (w.allocation.node, w.allocation.gpus, w.allocation.cpus)
        for w in cluster.workloads()
        if w.allocation is not None
    }


def swap(request_id: str = "s1") -> JointMove:
    """dp onto leaf-1 (b to g-02), tp onto leaf-2 (c to g-03): each needs the other's node."""
    return JointMove(
        request_id,
        [
            JobPlace("dp", [PartPlace("a", "g-01", ALL), PartPlace("b", "g-02", ALL)]),
            JobPlace("tp", [PartPlace("c", "g-03", ALL), PartPlace("d", "g-04", ALL)]),
        ],
        "both gangs under one leaf",
    )


def test_two_gangs_trade_nodes_at_once_and_each_pays_its_restart(tmp_path: Path) -> None:
    cluster = crossed(tmp_path)
    slow = {n: rows(cluster)[n][1] for n in "abcd"}
    was = placed(cluster)
    state = move_jobs(cluster, swap())
    now = placed(cluster)
    assert now["a"] == was["a"] and now["d"] == was["d"]  # already under their leaf
    assert now["b"] == ("g-02", *was["b"][1:]) and now["c"] == ("g-03", *was["c"][1:])
    assert all(rows(cluster)[n][1] == 0.0 for n in "abcd")  # every rank waits
    books = {s.request.request_id: s for s in cluster.recorded()}
    assert set(books) == {"s1", "s1#1"}
    specs = {w.spec.name: w.spec for w in cluster._workloads.values()}
    costs = {
        g: max(checkpoint_restore_seconds(specs[f"{p}.service"]) for p in parts)
        for g, parts in (("dp", "ab"), ("tp", "cd"))
    }
    assert state is books["s1"] and state.cost_seconds == max(costs.values())
    assert sorted(s.cost_seconds for s in books.values()) == sorted(costs.values())
    cluster.advance(state.cost_seconds + 1.0)
    assert all(rows(cluster)[n][1] > slow[n] for n in "abcd")
    assert cluster.action("s1").status is ActionStatus.SUCCEEDED
    again = move_jobs(cluster, swap())
    assert again.id == state.id and placed(cluster) == now  # a repeat does nothing
    other = JointMove("s1", [JobPlace("dp", [PartPlace("a", "g-03", ALL)])])
    with pytest.raises(ResourceManagerError) as exc:
        move_jobs(cluster, other)
    assert exc.value.status == 409


def test_a_small_job_moves_aside_in_the_same_request(tmp_path: Path) -> None:
    """tp's 4-GPU parts: c beside small job s on g-02, d on g-04; dp's b on g-03. dp takes
    leaf-1 only when c and s leave g-02: c to g-04 beside d, s to g-03 beside nothing."""
    jobs = part("a", "g-01") + part("b", "g-03") + part("c", "g-02", "[0, 1, 2, 3]")
    jobs += part("s", "g-02", "[4, 5, 6, 7]") + part("d", "g-04", "[0, 1, 2, 3]")
    cluster = scenario(tmp_path, jobs, GANGS)
    move = JointMove(
        "r1",
        [
            JobPlace("dp", [PartPlace("a", "g-01", ALL), PartPlace("b", "g-02", ALL)]),
            JobPlace("tp", [PartPlace("c", "g-03", LOW), PartPlace("d", "g-04", LOW)]),
            JobPlace("s", [PartPlace("s", "g-03", HIGH)]),
        ],
    )
    move_jobs(cluster, move)
    now = placed(cluster)
    assert (now["b"][0], now["c"][0], now["s"][0]) == ("g-02", "g-03", "g-03")
    assert now["s"][1] == HIGH and now["c"][1] == LOW
    assert len(cluster.recorded()) == 3  # dp, tp and s each restart once


def refused_moves() -> list[tuple[JointMove, int]]:
    """Requests the simulator refuses whole, with the status each gets."""
    dp_ok = JobPlace("dp", [PartPlace("a", "g-01", ALL), PartPlace("b", "g-02", ALL)])
    return [
        (JointMove("x", [dp_ok]), 409),  # c still holds g-02 and is not in the request
        (JointMove("x", [JobPlace("dp", [PartPlace("b", "g-02", ALL)])]), 400),  # a missing
        (JointMove("x", [JobPlace("a", [PartPlace("a", "g-02", ALL)])]), 400),  # a gang part
        (
            JointMove(
                "x",
                [
                    dp_ok,
                    JobPlace("tp", [PartPlace("c", "g-02", ALL), PartPlace("d", "g-04", ALL)]),
                ],
            ),
            409,  # b and c both given g-02's GPUs
        ),
        (
            JointMove(
                "x",
                [JobPlace("dp", [PartPlace("a", "g-01", ALL), PartPlace("b", "g-09", ALL)])],
            ),
            404,
        ),
        (
            JointMove(
                "x",
                [JobPlace("dp", [PartPlace("a", "g-01", ALL), PartPlace("b", "g-03", ALL)])],
            ),
            409,  # nothing moves
        ),
        (
            JointMove(
                "x",
                [JobPlace("dp", [PartPlace("a", "g-01", ALL), PartPlace("b", "g-03", LOW)])],
            ),
            400,  # four GPUs for an eight-GPU part
        ),
    ]


@pytest.mark.parametrize(("move", "status"), refused_moves())
def test_a_refused_joint_move_changes_nothing(tmp_path: Path, move: JointMove, status: int) -> None:
    cluster = crossed(tmp_path)
    was = placed(cluster)
    with pytest.raises(ResourceManagerError) as exc:
        move_jobs(cluster, move)
    assert exc.value.status == status
    assert placed(cluster) == was and cluster.recorded() == []


def test_the_oracle_finds_the_swap_of_the_fabric_spread_scenario_and_charges_every_gang() -> None:
    """Three gangs over three leaves of two nodes, each across two: the oracle's best puts
    each under one leaf (every gang moves, a small job with them), and its move costs charge
    every rank of every moved gang its gang's restart."""
    cluster = build_cluster(load_scenario("builtin:fabric-spread"), SimClock(seed=0, speed=0))
    cluster.advance(1.0)
    cluster.scheduler = "none"
    found = solve(cluster, budget_s=30.0)
    book = cluster.gangs
    assert book is not None
    leaf = {"fs-01": 1, "fs-02": 1, "fs-03": 2, "fs-04": 2, "fs-05": 3, "fs-06": 3}
    for gang in book.gangs.values():
        nodes = {a.node for p in gang.parts if (a := found.allocations.get(p)) is not None}
        assert len(nodes) == 2 and len({leaf[n] for n in nodes}) == 1, gang.name
    start = {s.name: s.allocation for s in cluster.job_states()}
    specs = {s.name: s.spec for s in cluster.job_states()}
    costs = gang_move_costs(found.allocations, start, specs, book)
    for gang in book.gangs.values():
        pause = max(checkpoint_restore_seconds(specs[p]) for p in gang.parts)
        assert all(costs[p] == pause for p in gang.parts)


def test_two_jobs_of_one_node_swap_gpus_and_the_named_cpus_pin_them() -> None:
    """contention-links' pcie8-01: allreduce-e on GPUs 0, 2 and allreduce-f on 1, 4 trade so
    that e gets the switch pair 0, 1, pinned to socket 0 as the request says; f, named
    without CPUs, runs unpinned on its new GPUs."""
    cluster = build_cluster(load_scenario("builtin:contention-links"), SimClock(seed=0, speed=0))
    template = cluster.template_of("pcie8-01")
    socket0 = sorted(c.id for c in template.topology.cpus if c.numa_node == 0)
    move = JointMove(
        "e1",
        [
            JobPlace("allreduce-e", [PartPlace("allreduce-e", "pcie8-01", [0, 1], socket0, [0])]),
            JobPlace("allreduce-f", [PartPlace("allreduce-f", "pcie8-01", [2, 4])]),
        ],
    )
    move_jobs(cluster, move)
    now = placed(cluster)
    assert now["allreduce-e"] == ("pcie8-01", [0, 1], socket0)
    assert now["allreduce-f"][1] == [2, 4]
    moved = {w.spec.name: w for w in cluster._workloads.values()}
    assert moved["allreduce-e.service"].pinned and not moved["allreduce-f.service"].pinned
    allocation = moved["allreduce-e.service"].allocation
    assert allocation is not None and allocation.mems == [0]
