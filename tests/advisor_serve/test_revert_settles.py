"""A revert that the resource manager is still carrying out when the advisor's revert call
returns (moving a large job's pages back outlasts the call's wait) is settled by the
service's next analysis: the action is marked reverted, and the recommendation with it,
without a second revert.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pytest

from tests.advisor.fakes import FakeResourceManager, FakeServer
from tests.advisor_serve.conftest import (
    RM_TOKEN,
    SPREAD,
    PromQL,
    advisor_service,
    host_text,
    the_pin,
)
from toposcope.advisor.acting import ServiceError
from toposcope.advisor.audit import REVERTED, RUNNING, recommendation_state
from toposcope.advisor.rmclients import HttpResourceManager
from toposcope.advisor.service import AdvisorService
from toposcope.report.advisor_api import Verdict
from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    ResourceManager,
)


class SlowPinRevert(FakeResourceManager):
    """The fake resource manager, except that reverting a pin runs until :attr:`finished`
    is set: its pages move back for longer than the advisor's revert waits.
    """

    def __init__(self, token: str, workloads: dict[str, Allocation]) -> None:
        super().__init__(token, workloads)
        self.finished = False

    def _carry_out(self, request: ActionRequest) -> ActionState:
        state = super()._carry_out(request)
        slow = request.kind == ActionKind.PIN and request.request_id.startswith("revert-")
        if slow and state.status is ActionStatus.SUCCEEDED:
            return ActionState(state.id, request, ActionStatus.RUNNING, state.before, state.after)
        return state

    def _current(self, state: ActionState) -> ActionState:
        if state.status is ActionStatus.RUNNING and self.finished:
            return state.advance(ActionStatus.SUCCEEDED)
        return state


@dataclass
class Stand:
    """The service under test and the resource manager it acts through."""

    service: AdvisorService
    rm: SlowPinRevert


@contextmanager
def slow_revert_stand(directory: Path) -> Iterator[Stand]:
    """The advisor service (audit log in ``directory``, reverts waited on 0.2 s) in front of
    a :class:`SlowPinRevert` holding one job, ``train``, spread over both NUMA nodes.
    """
    promql = PromQL(host_text({"train": SPREAD}))
    rm = SlowPinRevert(RM_TOKEN, {"train": Allocation("n1", list(range(16)), [0, 1], [])})
    with FakeServer(promql).run() as prometheus, FakeServer(rm).run() as rm_server:

        def factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
            return HttpResourceManager(rm_server.url, RM_TOKEN, timeout=5)

        service = advisor_service(
            prometheus.url, directory / "audit.sqlite", factory, wait_seconds=0.2
        )
        yield Stand(service, rm)


@pytest.fixture
def stand(tmp_path: Path) -> Iterator[Stand]:
    with slow_revert_stand(tmp_path) as found:
        yield found


def test_a_revert_that_finishes_after_the_call_is_settled_by_the_next_analysis(
    stand: Stand,
) -> None:
    service, rm = stand.service, stand.rm
    assert service.analyse_once() is not None
    rec_id = the_pin(service)
    outcome, _ = service.apply(rec_id)
    assert outcome.result == "applied", outcome.detail
    # newest first: the memory migration's revert finishes, the pin's is still running
    outcomes = service.revert(rec_id)
    assert [o.result for o in outcomes] == ["reverted", "running"], outcomes
    pin = next(e for e in service.audit.entries(rec_id) if e.kind == "pin" and not e.reverts)
    assert pin.reverted_by is None
    # still running at the next analysis: nothing is marked
    assert service.analyse_once() is not None
    revert_row = service.audit.entry(f"revert-{pin.request_id}")
    assert revert_row is not None and revert_row.result == RUNNING
    assert service.audit.entry(pin.request_id).reverted_by is None  # type: ignore[union-attr]

    rm.finished = True
    assert service.analyse_once() is not None
    settled = service.audit.entry(pin.request_id)
    assert settled is not None and settled.reverted_by == f"revert-{pin.request_id}"
    assert recommendation_state(service.audit.entries(rec_id)) == REVERTED
    assert rm.allocations["train"] == Allocation("n1", list(range(16)), [0, 1], [])
    assert service.acting.counts[("pin", "reverted")] == 1
    verification = service.outcomes.get(rec_id)
    assert verification is not None and verification.verdict == Verdict.REVERTED
    # nothing is left to undo, and settling again changes nothing
    with pytest.raises(ServiceError, match="nothing applied"):
        service.revert(rec_id)
    assert service.acting.settle_running() == []
    assert service.acting.counts[("pin", "reverted")] == 1
