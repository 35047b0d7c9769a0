"""A multi-node job moved whole in the simulator: every part at once, one action, the
gang's checkpoint-restore once; refusals change nothing; the advisor's ``sim`` backend plans
and sends a fabric-placement move over the simulator's API."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.test_gang import part, rows, scenario
from toposcope.advisor.applying.fabric import steers
from toposcope.advisor.recommendations import make_recommendation
from toposcope.advisor.rmclients.http import HttpResourceManager
from toposcope.report.recommendation import Recommendation, RecommendationKind, Risk, Target
from toposcope.rm import ActionKind, ActionStatus, ResourceManagerError
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds
from toposcope.sim.gang_api import make_sim_api_app
from toposcope.sim.gang_moves import GangMove, move_gang
from toposcope.sim.server import SimServer

DP = "    - {name: dp, jobs: [a, b], pattern: data-parallel, comm_share: 0.2}\n"


def spread(tmp_path: Path) -> SimCluster:
    """Gang ``dp`` over both leaves (a on g-01, b on g-03), a 4-GPU job on g-04."""
    jobs = part("a", "g-01") + part("b", "g-03") + part("c", "g-04", "[0, 1, 2, 3]")
    return scenario(tmp_path, jobs, DP)


def placed(cluster: SimCluster) -> dict[str, tuple[str, list[int], list[int]]]:
    """Each workload's node, GPUs and CPUs."""
    return {
        w.name: (w.allocation.node, w.allocation.gpus, w.allocation.cpus)
        for w in cluster.workloads()
        if w.allocation is not None
    }


def test_a_spread_gang_moves_whole_onto_one_leaf_paying_one_restart(tmp_path: Path) -> None:
    cluster = spread(tmp_path)
    slow = rows(cluster)["a"][1]
    was = placed(cluster)
    state = move_gang(cluster, GangMove("g1", "dp", ["g-01", "g-02"]))
    now = placed(cluster)
    assert now["a.service"] == was["a.service"]  # already on the leaf: stays
    assert now["b.service"] == ("g-02", *was["b.service"][1:])  # same GPUs and pins
    assert state.request.kind is ActionKind.MIGRATE and state.request.workload == "b.service"
    parts = [w for w in cluster._workloads.values() if w.spec.name in ("a.service", "b.service")]
    assert state.cost_seconds == max(checkpoint_restore_seconds(w.spec) for w in parts)
    assert state.status is ActionStatus.RUNNING
    seen = rows(cluster)
    assert seen["a"][1] == 0.0 and seen["b"][1] == 0.0  # every rank waits for the restart
    cluster.advance(state.cost_seconds + 1.0)
    seen = rows(cluster)
    assert seen["a"][1] == pytest.approx(8000.0)
    assert seen["a"][1] > slow
    assert cluster.action("g1").status is ActionStatus.SUCCEEDED
    again = move_gang(cluster, GangMove("g1", "dp", ["g-01", "g-02"]))
    assert again.id == state.id and placed(cluster) == now  # a repeat does nothing
    with pytest.raises(ResourceManagerError) as exc:
        move_gang(cluster, GangMove("g1", "dp", ["g-03", "g-04"]))
    assert exc.value.status == 409


def test_parts_trade_nodes_in_one_move(tmp_path: Path) -> None:
    cluster = spread(tmp_path)
    move_gang(cluster, GangMove("swap", "a.service", ["g-02", "g-01"]))
    now = placed(cluster)
    assert {now["a.service"][0], now["b.service"][0]} == {"g-01", "g-02"}


@pytest.mark.parametrize(
    ("nodes", "job", "status"),
    [
        (["g-03", "g-04"], "dp", 409),  # c holds GPUs 0-3 of g-04, b's own GPUs
        (["g-02"], "dp", 400),  # one node for two parts
        (["g-02", "g-02"], "dp", 400),
        (["g-01", "g-09"], "dp", 404),
        (["g-01", "g-02"], "c.service", 404),  # not a multi-node job
    ],
)
def test_a_refused_move_changes_nothing(
    tmp_path: Path, nodes: list[str], job: str, status: int
) -> None:
    cluster = spread(tmp_path)
    was = placed(cluster)
    with pytest.raises(ResourceManagerError) as exc:
        move_gang(cluster, GangMove("r", job, nodes))
    assert exc.value.status == status
    assert placed(cluster) == was and cluster.recorded() == []


def move_rec(
    job: str, nodes: list[str], kind: RecommendationKind = RecommendationKind.MIGRATE_JOB
) -> Recommendation:
    """A fabric-placement move as the policy writes it (no action: it names two nodes)."""
    return make_recommendation(
        kind=kind,
        policy="fabric-placement",
        target=Target("leaf-1", job),
        summary=f"move {job} onto leaf-1",
        current={"nodes": ["g-01", "g-03"]},
        proposed={"nodes": nodes, "level": "leaf", "cell": "leaf-1"},
        evidence=[],
        estimated_gain=0.1,
        gain_model="test",
        confidence=0.4,
        risk=Risk.HIGH,
    )


def test_the_sim_backend_plans_and_sends_the_move_over_the_api(tmp_path: Path) -> None:
    cluster = spread(tmp_path)
    server = SimServer(make_sim_api_app(cluster, "secret"), "127.0.0.1:0")
    server.start()
    try:
        rm = HttpResourceManager(f"http://{server.address}", "secret")
        rec = move_rec("dp", ["g-01", "g-02"])
        assert steers(rm, rec)
        assert not steers(rm, move_rec("dp", ["g-01", "g-02"], RecommendationKind.PLACE))
        plan = rm.plan_fabric(rec)
        assert not plan.refused and len(plan.steps) == 1
        assert plan.request.request_id == f"{rec.id}-0"
        state = rm.steer_fabric(rec)
        assert state.request.request_id == f"{rec.id}-0"
        assert placed(cluster)["b.service"][0] == "g-02"
        assert rm.action(f"{rec.id}-0").id == state.id
        assert rm.steer_fabric(rec).id == state.id  # a repeat answers the first move
        bad = rm.plan_fabric(move_rec("dp", ["g-01", "g 02;rm"]))
        assert "no valid nodes" in bad.refused and not bad.steps
        refused = HttpResourceManager(f"http://{server.address}", "wrong")
        with pytest.raises(ResourceManagerError) as exc:
            refused.steer_fabric(move_rec("dp", ["g-03", "g-04"]))
        assert exc.value.status in (401, 403)
    finally:
        server.shutdown()
