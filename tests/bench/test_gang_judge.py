"""The closed loop's judge with gang jobs: a move of one part stops every rank."""

from __future__ import annotations

from round_truth import applied_costs
from scenario_judging import move_costs

from toposcope.rm import ActionKind, ActionRequest, ActionStatus
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import checkpoint_restore_seconds
from toposcope.sim.scenarios import build_cluster, load_scenario

PART, SIBLING = "bert-dp-b.service", "bert-dp-a.service"


def test_moving_one_part_of_a_gang_pauses_every_part_in_the_judges_costs() -> None:
    cluster = build_cluster(load_scenario("builtin:fabric-nic-far"), SimClock(seed=0, speed=0))
    specs = {s.name: s.spec for s in cluster.job_states()}
    start = {s.name: s.allocation for s in cluster.job_states()}
    request = ActionRequest(
        request_id="m1", kind=ActionKind.MIGRATE, workload=PART, node="nf-02", gpus=[0, 1, 2, 3]
    )
    state = cluster.apply(request)
    cluster.advance(state.cost_seconds + 1.0)
    assert cluster.action(state.id).status is ActionStatus.SUCCEEDED  # read, as the loop does
    cost = state.cost_seconds
    assert applied_costs(cluster) == {SIBLING: cost, PART: cost}
    moved = {**start, PART: {s.name: s.allocation for s in cluster.job_states()}[PART]}
    pause = checkpoint_restore_seconds(specs[PART])
    assert move_costs(moved, start, specs, cluster.gangs) == {SIBLING: pause, PART: pause}
    assert move_costs(moved, start, specs) == {PART: pause}  # the same move without gangs
