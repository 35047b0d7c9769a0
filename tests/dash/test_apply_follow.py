"""An apply the advisor does not answer within the app's timeout is still running, not failed,
and the page follows it to its end: the Dash app (Flask test client) in front of the real
advisor service, whose resource manager (the fake RM API of the advisor's tests) holds each
action until the test lets it finish.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pytest
from flask.testing import FlaskClient

from tests.advisor.fakes import Answer, FakeResourceManager, FakeServer, Request
from tests.advisor_serve.conftest import (
    API_TOKEN,
    RM_TOKEN,
    SPREAD,
    PromQL,
    advisor_service,
    host_text,
    serving,
    the_pin,
)
from tests.dash.callbacks import (
    UPDATE,
    answered,
    apply_body,
    basic,
    csrf_header,
    follow_body,
    signed_in_app,
)
from tests.procs import poll
from toposcope.advisor.audit import SUCCEEDED
from toposcope.advisor.rmclients import HttpResourceManager
from toposcope.advisor.service import AdvisorService
from toposcope.dashboards.app.action_follow import Following, progress, signatures
from toposcope.dashboards.app.advisorclient import AuditRow
from toposcope.rm import Allocation, ResourceManager

#: the app's advisor timeout: far shorter than the resource manager takes here
APP_TIMEOUT = 0.5
#: how long anything here may take before the test fails
DEADLINE = 20.0
ALICE = basic("alice", "alice-pw")


class HeldActions:
    """The resource manager's API, holding every new action until :attr:`done` is set."""

    def __init__(self, rm: FakeResourceManager) -> None:
        self.rm = rm
        self.asked = threading.Event()
        self.done = threading.Event()

    def __call__(self, request: Request) -> Answer:
        if request.method == "POST" and request.path == "/api/v1/actions":
            self.asked.set()
            self.done.wait(DEADLINE)
        return self.rm(request)


@dataclass(frozen=True)
class Bench:
    """The advisor service (its URL and its pin) and the resource manager it waits on."""

    service: AdvisorService
    url: str
    rec_id: str
    rm: HeldActions


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    promql = PromQL(host_text({"train": SPREAD}))
    rm = HeldActions(
        FakeResourceManager(RM_TOKEN, {"train": Allocation("n1", list(range(16)), [0, 1], [])})
    )
    with FakeServer(promql).run() as prometheus, FakeServer(rm).run() as rm_server:

        def factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
            return HttpResourceManager(rm_server.url, RM_TOKEN, timeout=DEADLINE * 2)

        service = advisor_service(prometheus.url, tmp_path / "audit.sqlite", factory)
        assert service.analyse_once() is not None
        with serving(service) as url:
            try:
                yield Bench(service, url, the_pin(service), rm)
            finally:
                rm.done.set()


@pytest.fixture
def client(bench: Bench, tmp_path: Path) -> FlaskClient:
    return signed_in_app(bench.url, API_TOKEN, tmp_path, timeout=APP_TIMEOUT)


def test_an_apply_slower_than_the_timeout_is_followed_to_applied(
    bench: Bench, client: FlaskClient
) -> None:
    signed = {**ALICE, **csrf_header(client)}
    body = apply_body(client, signed, bench.rec_id)
    sent = answered(client.post(UPDATE, json=body, headers=signed))
    said = json.dumps(sent["recs-outcome"])
    assert "still running" in said and "failed" not in said
    assert bench.rm.asked.is_set()  # the advisor is waiting on the resource manager
    following = sent["recs-follow"]["data"]
    assert sent["recs-follow-tick"]["disabled"] is False
    ticks = iter(range(1, 10_000))

    def followed() -> dict[str, dict[str, Any]]:
        body = follow_body(client, ALICE, following, next(ticks))
        return answered(client.post(UPDATE, json=body, headers=ALICE))

    waiting = followed()
    assert "still running" in json.dumps(waiting["recs-outcome"])
    assert "recs-follow" not in waiting  # the page keeps following
    bench.rm.done.set()
    final = poll(
        lambda: (got := followed()) and "recs-version" in got and got,
        deadline_s=DEADLINE,
        what="the followed apply to end",
    )
    shown = json.dumps(final["recs-outcome"])
    assert f"apply {bench.rec_id}: applied" in shown and "succeeded" in shown
    assert final["recs-follow"]["data"] is None
    assert final["recs-follow-tick"]["disabled"] is True
    rows = bench.service.audit.entries(bench.rec_id)
    assert rows and all(r.state == SUCCEEDED for r in rows)
    assert all(r.actor.startswith("alice via ") for r in rows)


def row(seq: int, result: str | None, reverts: str | None = None, **more: Any) -> AuditRow:
    """An audit row of ``pin-1`` as the audit API lists it."""
    return AuditRow.from_json(
        {
            "seq": seq,
            "request_id": f"pin-1-{seq}" if reverts is None else f"revert-{reverts}",
            "recommendation_id": "pin-1",
            "kind": "pin",
            "workload": "train",
            "node": "n1",
            "result": result,
            "result_at": "2024-01-01T00:00:00+00:00" if result else None,
            "reverts": reverts,
            **more,
        }
    )


EXPECTED = ("pin-1-1", "pin-1-2")


@pytest.mark.parametrize(
    ("action", "before", "now", "done", "shown"),
    [
        # the first action answered, the second not written yet: not over
        ("apply", [], [row(1, "succeeded")], False, "still running"),
        ("apply", [], [row(1, "succeeded"), row(2, None)], False, "still running"),
        ("apply", [], [row(1, "succeeded"), row(2, "succeeded")], True, "apply pin-1: applied"),
        # a failure stops the apply; its undo is waited for
        (
            "apply",
            [],
            [row(1, "succeeded", reverted_by="revert-pin-1-1"), row(2, "failed"),
             row(3, None, reverts="pin-1-1")],
            False,
            "still running",
        ),
        (
            "apply",
            [],
            [row(1, "succeeded", reverted_by="revert-pin-1-1"), row(2, "failed"),
             row(3, "succeeded", reverts="pin-1-1")],
            True,
            "apply pin-1: failed",
        ),
        # a retried action reuses its row: the change counts, the old result does not
        ("apply", [row(1, "retry-later")], [row(1, "retry-later")], False, "not recorded it"),
        ("apply", [row(1, "retry-later")], [row(1, None)], False, "still running"),
        (
            "revert",
            [row(1, "succeeded"), row(2, "succeeded")],
            [row(1, "succeeded", reverted_by="revert-pin-1-2"), row(2, "succeeded"),
             row(3, "succeeded", reverts="pin-1-2")],
            False,
            "still running",
        ),
        (
            "revert",
            [row(1, "succeeded"), row(2, "succeeded")],
            [row(1, "succeeded", reverted_by="revert-pin-1-1"),
             row(2, "succeeded", reverted_by="revert-pin-1-2"),
             row(3, "succeeded", reverts="pin-1-2"), row(4, "succeeded", reverts="pin-1-1")],
            True,
            "revert pin-1: reverted",
        ),
    ],
)  # fmt: skip
def test_a_followed_action_ends_when_the_advisor_went_as_far_as_it_will(
    action: str, before: list[AuditRow], now: list[AuditRow], done: bool, shown: str
) -> None:
    following = Following(action, "pin-1", 1000.0, signatures(before))
    state = progress(following, now, 1001.0, EXPECTED)
    assert (state.done, shown in state.text) == (done, True), state.text


def test_following_gives_up_at_its_deadline() -> None:
    following = Following("apply", "pin-1", 1000.0)
    assert not progress(following, [row(1, None)], 1100.0, EXPECTED, deadline_s=300).done
    late = progress(following, [row(1, None)], 1301.0, EXPECTED, deadline_s=300)
    assert late.done and "see the audit log" in late.text
    assert progress(following, [], 1301.0, EXPECTED, deadline_s=300).done
