"""The action state machine: forward only, final states final, enforced wherever a state moves."""

from __future__ import annotations

import itertools

import pytest

from toposcope.rm import (
    FINAL_STATUSES,
    ActionBook,
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    IllegalTransitionError,
    can_move,
)
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.templates import builtin_template

PENDING, RUNNING, SUCCEEDED, FAILED = (
    ActionStatus.PENDING,
    ActionStatus.RUNNING,
    ActionStatus.SUCCEEDED,
    ActionStatus.FAILED,
)
ALLOWED = {
    (PENDING, RUNNING),
    (PENDING, SUCCEEDED),
    (PENDING, FAILED),
    (RUNNING, SUCCEEDED),
    (RUNNING, FAILED),
}
REQUEST = ActionRequest("r-1", ActionKind.PIN, "w", "n1", [0])


@pytest.mark.parametrize(("old", "new"), list(itertools.product(ActionStatus, repeat=2)))
def test_only_the_forward_moves_are_allowed(old: ActionStatus, new: ActionStatus) -> None:
    state = ActionState("a-1", REQUEST, old)
    assert can_move(old, new) == ((old, new) in ALLOWED)
    if (old, new) in ALLOWED:
        assert state.advance(new, error="note") == ActionState("a-1", REQUEST, new, error="note")
        return
    with pytest.raises(IllegalTransitionError) as refused:
        state.advance(new)
    assert (refused.value.status, refused.value.field) == (409, "status")
    assert f"from {old.value} to {new.value}" in str(refused.value)


def test_succeeded_and_failed_are_final() -> None:
    assert {SUCCEEDED, FAILED} == FINAL_STATUSES


def test_the_book_refuses_an_illegal_move_and_keeps_the_old_state() -> None:
    book = ActionBook()
    done = ActionState("a-1", REQUEST, SUCCEEDED)
    book.record(done)
    with pytest.raises(IllegalTransitionError):
        book.update(ActionState("a-1", REQUEST, RUNNING))
    assert book.find("a-1") == done
    assert book.find("r-1") == done  # by request id too
    with pytest.raises(ValueError, match="recorded twice"):
        book.record(done)


def test_a_simulated_migration_runs_then_succeeds_once_its_cost_has_passed() -> None:
    template = builtin_template("pcie-8gpu-2sw")
    sim = SimCluster(SimClock(seed=1), scheduler="none")
    sim.add_node("gpu-01", template)
    sim.add_node("gpu-02", template)
    job = make_job("pair", JobKind.GPU_TRAIN, gpus=2, duration=36_000)
    sim.submit(job, Allocation("gpu-01", [], [], [0, 1]))
    request = ActionRequest("m-1", ActionKind.MIGRATE, "pair", "gpu-02", gpus=[2, 3])
    state = sim.apply(request)
    assert state.status is RUNNING
    sim.advance(checkpoint_restore_seconds(job) / 2)
    assert sim.action("m-1").status is RUNNING
    sim.advance(checkpoint_restore_seconds(job))
    assert sim.action(state.id).status is SUCCEEDED
    assert sim.apply(request).status is SUCCEEDED  # a repeat answers the action as it is now
    assert sim.recorded()[0].status is SUCCEEDED
