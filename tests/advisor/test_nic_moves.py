"""nic-affinity's moves: a multi-node job whose parts sit on NIC-far GPUs moves whole onto
the NIC-near GPUs of its own nodes, single-node jobs without RDMA moved out of the way a round
before; nothing moves when it does not pay or a job is about to end; the simulator backend
plans, prints and applies the move as one gang move.

The nodes are the builders' two-socket, eight-GPU PCIe node with one RDMA NIC cabled under
each PCIe switch of socket 0 (GPUs 0-3 PIX to theirs) and the HCAs of socket 1 uncabled, as
in the simulator's fabric-nic-far scenario: GPUs 4-7 reach the fabric across the socket link.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, pcie8
from tests.advisor.test_dry_run import bash_n
from tests.sim.test_gang_remap import nic_far
from toposcope.advisor.applying.fabric import steers
from toposcope.advisor.dry_run import planner_for, render_dry_run
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.nic_state import NicState, NicUse, NodeNics
from toposcope.advisor.policies.nic_affinity import NicAffinity, NicAffinitySettings
from toposcope.advisor.rmclients.http import HttpResourceManager
from toposcope.advisor.rmclients.plans import ApiPlanner
from toposcope.report.recommendation import Recommendation, RecommendationKind, Report, RunInfo
from toposcope.rm import ActionKind, ActionState
from toposcope.rm.plan import HttpStep, Plan, PlanHints
from toposcope.sim.gang_api import make_sim_api_app
from toposcope.sim.server import SimServer

NODES = ("g-01", "g-02", "g-03")
LEFT = 6 * 3600.0


def nics() -> NodeNics:
    """nic0 under GPUs 0-1's switch, nic1 under 2-3's (both cabled); nic2, nic3 on socket 1
    under 4-5's and 6-7's switches, uncabled.
    """
    links: dict[tuple[int, str], str] = {}
    for nic, switch in (("nic0", 0), ("nic1", 1), ("nic2", 2), ("nic3", 3)):
        for gpu in range(8):
            same_socket = gpu // 4 == switch // 2
            links[(gpu, nic)] = "PIX" if gpu // 2 == switch else "NODE" if same_socket else "SYS"
    return NodeNics(links, cabled=frozenset({"nic0", "nic1"}))


def part(name: str, node: str, gpus: tuple[int, ...], left: float | None = LEFT) -> WorkloadModel:
    """A workload holding ``gpus`` of ``node`` with ``left`` seconds to run."""
    return WorkloadModel(name, node, gpus=gpus, time_left_seconds=left)


FAR = (4, 5, 6, 7)


def model(
    *others: WorkloadModel,
    left: float | None = LEFT,
    uses: dict[str, tuple[NicUse, ...]] | None = None,
) -> ClusterModel:
    """Job ``dp`` as ``dp-a`` on g-01 and ``dp-b`` on g-02, both on GPUs 4-7."""
    parts = [part("dp-a", "g-01", FAR, left), part("dp-b", "g-02", FAR, left)]
    base = cluster([pcie8(n) for n in NODES], [*parts, *others])
    state = NicState({n: nics() for n in NODES}, uses or {})
    return replace(base, nics=state, fabric_jobs={"dp": {"g-01": 4, "g-02": 4}})


def evaluate(m: ClusterModel, **settings: object) -> tuple[list[Recommendation], list[str]]:
    """nic-affinity's recommendations and notes on ``m``."""
    policy = NicAffinity(replace(NicAffinitySettings(), **settings))  # type: ignore[arg-type]
    found = policy.evaluate(m)
    return list(found.recommendations), [n.reason for n in found.undecided]


def test_a_nic_far_job_moves_whole_onto_the_near_gpus_of_its_own_nodes() -> None:
    [rec], _ = evaluate(model())
    assert rec.kind is RecommendationKind.MIGRATE_JOB and rec.policy == "nic-affinity"
    assert rec.target.workload == "dp" and not rec.actions
    assert rec.proposed["nodes"] == ["g-01", "g-02"]
    places = rec.proposed["places"]
    assert [p["node"] for p in places] == ["g-01", "g-02"]
    assert all(p["gpus"] == [0, 1, 2, 3] for p in places)
    assert all(p["cpus"] == "0-7" and p["mems"] == [0] for p in places)  # pinned next to them
    assert rec.current["link"] == "SYS" and rec.proposed["link"] == "PIX"
    # share 0.3 across the socket against 1: 0.25 x 0.7 of the run saved, less one restart
    assert rec.estimated_gain == pytest.approx(0.25 * 0.7 - 600.0 / LEFT, abs=1e-6)
    assert {"workload:g-01/dp-a", "workload:g-02/dp-b", "gpu:g-01/0"} <= set(rec.claims)


def test_a_part_already_near_its_nic_stays_where_it_is() -> None:
    m = model()
    near_b = tuple(w if w.name != "dp-b" else replace(w, gpus=(0, 1, 2, 3)) for w in m.workloads)
    [rec], _ = evaluate(replace(m, workloads=near_b))
    assert rec.proposed["places"][1] is None
    assert rec.proposed["places"][0]["gpus"] == [0, 1, 2, 3]


def test_a_job_in_the_way_moves_first_onto_far_gpus_and_the_gang_waits() -> None:
    vision = part("vision", "g-01", (0, 1, 2, 3), None)
    [rec], _ = evaluate(model(vision))
    # targeted at the job it makes room for (its own job gains nothing to verify)
    assert rec.kind is RecommendationKind.MIGRATE_JOB and rec.target.workload == "dp"
    assert "workload:g-01/vision" in rec.claims
    [action] = rec.actions
    assert action.kind == ActionKind.MIGRATE and action.workload == "vision"
    assert (action.node, action.gpus) == ("g-03", [4, 5, 6, 7])  # g-03's far GPUs, as linked
    assert action.mems == [1] and action.cpus == list(range(8, 16))
    assert rec.proposed["for"] == "dp" and rec.estimated_gain > 0.05
    run = RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("nic-affinity",), 0.05)
    script = render_dry_run(Report(run, (rec,)), "sim", planner_for("sim", None, {}), PlanHints())
    assert "/api/v1/actions" in script and '"gpus":[4,5,6,7]' in script  # the migrate
    # next round, the metrics show vision on g-03: now the job moves
    moved = replace(vision, node="g-03", gpus=(4, 5, 6, 7))
    [after], _ = evaluate(model(moved))
    assert after.target.workload == "dp"


def test_two_jobs_in_the_way_get_one_move_each_onto_as_well_linked_gpus() -> None:
    jobs = [part("rnn", "g-01", (0, 1), None), part("cnn", "g-01", (2, 3), None)]
    recs, _ = evaluate(model(*jobs))
    moved = {r.actions[0].workload: r.actions for r in recs}
    assert set(moved) == {"rnn", "cnn"}
    assert all(len(actions) == 1 for actions in moved.values())
    # each pair sits under one PCIe switch (PIX): its new pair does too, none taken twice
    pairs = [tuple(a.gpus) for actions in moved.values() for a in actions]
    assert sorted(pairs) == [(4, 5), (6, 7)]
    assert all(r.proposed["for"] == "dp" for r in recs)


@pytest.mark.parametrize(
    ("vision", "why"),
    [
        (part("vision", "g-01", (0, 1, 2, 3), 600.0), "end soon"),
        (part("vision", "g-01", (0, 1, 2, 3), None), "use a NIC"),
    ],
)
def test_a_job_that_ends_soon_or_uses_rdma_is_not_moved_out_of_the_way(
    vision: WorkloadModel, why: str
) -> None:
    use = (NicUse("nic0", "rdma_cgroup", "PIX", True),)
    uses: dict[str, tuple[NicUse, ...]] = {"g-01/vision": use} if why == "use a NIC" else {}
    recs, notes = evaluate(model(vision, uses=uses))
    assert [r for r in recs if r.kind is RecommendationKind.MIGRATE_JOB] == []
    assert any("held by jobs that use a NIC" in n for n in notes)


def test_no_room_anywhere_for_the_job_in_the_way_is_a_note() -> None:
    vision = part("vision", "g-01", (0, 1, 2, 3), None)
    fill = [part(f"x{n}", n, FAR, None) for n in ("g-03",)]
    fill.append(part("y", "g-03", (0, 1, 2, 3), None))
    recs, notes = evaluate(model(vision, *fill))
    assert recs == [] and any("vision" in n and "no free GPUs" in n for n in notes)


def test_a_part_larger_than_the_near_gpus_of_its_node_gets_a_note() -> None:
    m = model()
    whole = tuple(replace(w, gpus=tuple(range(8))) for w in m.workloads)
    recs, notes = evaluate(replace(m, workloads=whole, fabric_jobs={"dp": {"g-01": 8, "g-02": 8}}))
    assert recs == [] and any("more than the 4 near a NIC" in n for n in notes)


def test_nothing_moves_when_it_does_not_pay_or_cannot_be_priced() -> None:
    recs, notes = evaluate(model(left=1800.0), min_time_left_s=0.0)  # 1800 x 0.175 < 600
    assert recs == [] and any("not worth the restarts" in n for n in notes)
    recs, notes = evaluate(model(left=1200.0))
    assert recs == [] and any("min_time_left_s" in n for n in notes)
    recs, notes = evaluate(model(left=None))
    assert recs == [] and any("cannot be priced" in n for n in notes)
    [rec], _ = evaluate(model(left=None), unknown_time_left_s=LEFT)
    assert rec.target.workload == "dp"
    assert evaluate(model(), move_far_ranks=False)[0] == []


@pytest.mark.parametrize(
    "bad",
    [
        [None],  # one place for two nodes
        [{"node": "g-02", "gpus": [0]}, None],  # the place names another node
        [{"node": "g-01", "gpus": [0], "cpus": "0-;rm"}, None],  # not a CPU list
        [{"node": "g-01", "gpus": ["0"]}, None],  # not indexes
        [{"node": "g-01", "gpus": []}, None],  # no GPU
    ],
)
def test_a_malformed_place_is_a_refusal_not_a_body(bad: list[object]) -> None:
    [rec] = evaluate(model())[0]
    broken = replace(rec, proposed={**rec.proposed, "places": bad})
    planner = planner_for("sim", None, {})
    assert isinstance(planner, ApiPlanner)
    plan = planner.plan_fabric(broken)
    assert plan.refused and not plan.steps


class RequeueingBackend:
    """A backend that steers fabric-placement's moves by requeueing (Slurm's kinds): it has
    no way to name GPUs, so nic-affinity's moves are not its to apply.
    """

    fabric_kinds = (RecommendationKind.PLACE, RecommendationKind.MIGRATE_JOB)

    def plan_fabric(self, recommendation: Recommendation) -> Plan:
        """Never asked for in this test."""
        raise AssertionError(recommendation.id)

    def steer_fabric(self, recommendation: Recommendation) -> ActionState:
        """Never asked for in this test."""
        raise AssertionError(recommendation.id)


def test_only_a_backend_that_takes_places_applies_the_move() -> None:
    [rec] = evaluate(model())[0]
    assert not steers(RequeueingBackend(), rec)
    assert steers(RequeueingBackend(), replace(rec, policy="fabric-placement"))
    agent = planner_for("agent", "http://{node}:9848", {})
    assert isinstance(agent, ApiPlanner) and agent.gang_policies == ("fabric-placement",)
    run = RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("nic-affinity",), 0.05)
    script = render_dry_run(Report(run, (rec,)), "agent", agent, PlanHints())
    assert "advice for a person" in script and "gang-moves" not in script


def test_the_simulator_backend_prints_and_applies_the_same_gang_move(tmp_path: Path) -> None:
    cluster_ = nic_far(tmp_path)
    [rec], _ = evaluate(model())
    report = Report(
        RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("nic-affinity",), 0.05), (rec,)
    )
    script = render_dry_run(report, "sim", planner_for("sim", None, {}), PlanHints())
    bash_n(script)
    assert "/gang-moves" in script and '"places"' in script and "g-01 GPUs [0, 1, 2, 3]" in script
    server = SimServer(make_sim_api_app(cluster_, "secret"), "127.0.0.1:0")
    server.start()
    try:
        rm = HttpResourceManager(f"http://{server.address}", "secret")
        assert steers(rm, rec)
        [sent] = rm.plan_fabric(rec).steps
        planner = planner_for("sim", None, {})
        assert isinstance(planner, ApiPlanner)
        [printed] = planner.plan_fabric(rec).steps
        assert isinstance(sent, HttpStep) and isinstance(printed, HttpStep)
        assert sent.body == printed.body  # the dry run printed what is sent
        assert isinstance(sent.body, dict) and sent.body["places"][0]["cpus"] == list(range(8))
        state = rm.steer_fabric(rec)
        assert state.request.request_id == f"{rec.id}-0"
        for name in ("a.service", "b.service"):
            alloc = cluster_.workload(name).allocation
            assert alloc is not None and alloc.gpus == [0, 1, 2, 3] and alloc.cpus == list(range(8))
    finally:
        server.shutdown()
