"""Applying and reverting through the advisor service's HTTP API against the simulator's real
resource manager, whose actions stay ``running`` for their cost in simulated seconds.

The simulator's clock is manual: a pin that moves pages stays ``running`` until the test
moves the clock, so every "still running" below is certain, not a race.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from wsgiref.util import setup_testing_defaults

import pytest

from tests.advisor.fakes import FakeServer
from tests.advisor_serve.conftest import (
    API_TOKEN,
    RM_TOKEN,
    SPREAD,
    PromQL,
    advisor_service,
    call,
    host_text,
    serving,
    the_pin,
)
from toposcope.advisor.acting import ManagerFactory
from toposcope.advisor.api import MAX_BODY_BYTES, advisor_app
from toposcope.advisor.rmclients import HttpResourceManager
from toposcope.advisor.service import AdvisorService
from toposcope.rm import (
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    NodeView,
    ResourceManager,
    WorkloadView,
)
from toposcope.rm.api import make_api_app
from toposcope.serving.httpserver import HttpServer, WsgiApp
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.templates import builtin_template

XEON = builtin_template("xeon-2s")
#: "train" before any change: every CPU, memory on both NUMA nodes
BEFORE = Allocation("n1", list(XEON.cpus), [0, 1], [])
#: what the pin recommendation asks for (the fake exporter's NUMA node 0 is CPUs 0-7)
PINNED_CPUS = list(range(8))
#: simulated seconds the pin (and its revert) spends moving half of 128 GiB of pages
PIN_COST = 16.0


@dataclass
class Stack:
    """The simulated cluster (manual clock), its resource-manager API, the fake PromQL API."""

    sim: SimCluster
    clock: SimClock
    rm_url: str
    prometheus_url: str
    db: Path

    def factory(self) -> ManagerFactory:
        def factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
            return HttpResourceManager(self.rm_url, RM_TOKEN, timeout=5)

        return factory

    def service(
        self, wait_seconds: float = 0.3, factory: ManagerFactory | None = None
    ) -> AdvisorService:
        service = advisor_service(
            self.prometheus_url, self.db, factory or self.factory(), wait_seconds=wait_seconds
        )
        assert service.analyse_once() is not None
        return service

    def train(self) -> Allocation | None:
        [view] = [w for w in self.sim.workloads() if w.name == "train.service"]
        return view.allocation

    def status(self, request_id: str) -> ActionStatus:
        return self.sim.action(request_id).status


@contextmanager
def resource_manager_api(sim: SimCluster) -> Iterator[str]:
    """The simulator's resource-manager API on 127.0.0.1, port 0; yields its base URL."""
    server = HttpServer(make_api_app(sim, token=RM_TOKEN), "127.0.0.1:0", thread_name="rm-api")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    clock = SimClock(seed=1)
    sim = SimCluster(clock, scheduler="none")
    sim.add_node("n1", XEON)
    sim.submit(make_job("train", JobKind.CPU_TRAIN, threads=8, memory_gb=128), BEFORE)
    with (
        FakeServer(PromQL(host_text({"train": SPREAD}))).run() as prometheus,
        resource_manager_api(sim) as rm_url,
    ):
        yield Stack(sim, clock, rm_url, prometheus.url, tmp_path / "audit.sqlite")


def post(url: str, rec_id: str, action: str, body: Any = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    status, headers, answer = call(
        f"{url}/api/v1/recommendations/{rec_id}/{action}", "POST", API_TOKEN, data
    )
    assert headers["Content-Type"] == "application/json", (status, answer)
    return status, answer


def results(answer: dict[str, Any]) -> list[tuple[str, str]]:
    """(request id, result) of each action in a revert's answer, newest action first."""
    return [(o["detail"].split(" ", 1)[0].rstrip(":"), o["result"]) for o in answer["outcomes"]]


def test_revert_of_a_running_pin_is_partial_until_the_pin_and_its_revert_finished(
    stack: Stack,
) -> None:
    service = stack.service()
    rec_id = the_pin(service)
    pin_id, memory_id = (a.request_id for a in service.recommendation(rec_id).actions)
    with serving(service) as url:
        status, applied = post(url, rec_id, "apply")
        assert (status, applied["result"]) == (200, "applied"), applied
        assert f"still running: {pin_id}" in applied["detail"]
        assert stack.sim.action(pin_id).cost_seconds == PIN_COST
        assert stack.status(pin_id) == ActionStatus.RUNNING

        status, answer = post(url, rec_id, "revert")
        assert status == 202, answer
        assert answer["state"] == "partial"
        assert results(answer) == [(memory_id, "reverted"), (pin_id, "running")], answer
        assert "still running" in answer["outcomes"][1]["detail"]
        train = stack.train()
        assert train is not None and train.cpus == PINNED_CPUS  # the pin is still in place
        rows = {r.request_id: r for r in service.audit.entries(rec_id)}
        assert rows[pin_id].state == "running" and rows[pin_id].reverted_by is None
        assert rows[memory_id].state == "reverted"

        stack.clock.advance(PIN_COST)
        status, answer = post(url, rec_id, "revert")
        assert (status, answer["state"]) == (202, "partial"), answer
        assert results(answer) == [(pin_id, "running")], answer
        assert f"its revert revert-{pin_id} is still running" in answer["outcomes"][0]["detail"]
        assert service.audit.entry(pin_id).state == "succeeded"  # type: ignore[union-attr]

        stack.clock.advance(PIN_COST)
        status, answer = post(url, rec_id, "revert")
        assert (status, answer["state"]) == (200, "reverted"), answer
        assert results(answer) == [(pin_id, "reverted")]
        assert stack.train() == BEFORE
        assert {r.state for r in service.audit.entries(rec_id) if r.reverts is None} == {"reverted"}

        status, again = post(url, rec_id, "apply")
        assert (status, again["result"]) == (200, "skipped")
        assert again["detail"] == "reverted earlier; not applied again"
        status, _, one = call(f"{url}/api/v1/recommendations/{rec_id}")
    assert (status, one["state"]) == (200, "reverted")
    assert stack.train() == BEFORE


def test_revert_waits_for_a_running_pin_and_then_undoes_it(stack: Stack) -> None:
    service = stack.service(wait_seconds=30)
    rec_id = the_pin(service)
    pin_id = service.recommendation(rec_id).actions[0].request_id
    done = threading.Event()

    def run_the_clock() -> None:
        while not done.wait(0.05):
            stack.clock.advance(PIN_COST)

    with serving(service) as url:
        assert post(url, rec_id, "apply")[0] == 200
        assert stack.status(pin_id) == ActionStatus.RUNNING
        mover = threading.Thread(target=run_the_clock, daemon=True)
        mover.start()
        try:
            status, answer = post(url, rec_id, "revert")
        finally:
            done.set()
            mover.join(timeout=10)
    assert (status, answer["state"]) == (200, "reverted"), answer
    assert [o["result"] for o in answer["outcomes"]] == ["reverted", "reverted"]
    # each outcome shows its revert as it finished, not as first answered (running)
    assert [s["status"] for o in answer["outcomes"] for s in o["states"]] == [
        "succeeded",
        "succeeded",
    ], answer
    assert stack.train() == BEFORE


def test_apply_while_an_action_runs_is_a_409_in_progress_with_the_running_rows(
    stack: Stack,
) -> None:
    service = stack.service()
    rec_id = the_pin(service)
    pin_id = service.recommendation(rec_id).actions[0].request_id
    with serving(service) as url:
        assert post(url, rec_id, "apply")[0] == 200
        status, answer = post(url, rec_id, "apply")
        assert status == 409, answer
        assert answer["state"] == "in_progress"
        assert pin_id in answer["error"] and "running" in answer["error"]
        [entry] = answer["entries"]
        assert (entry["request_id"], entry["result"], entry["state"]) == (
            pin_id,
            "running",
            "running",
        )
        assert len(service.audit.entries(rec_id)) == 2  # nothing new was recorded or sent

        stack.clock.advance(PIN_COST)
        status, again = post(url, rec_id, "apply")
    assert (status, again["result"], again["detail"]) == (200, "skipped", "already applied")


def test_the_user_in_the_body_is_recorded_as_the_actor(stack: Stack) -> None:
    service = stack.service(wait_seconds=0)
    rec_id = the_pin(service)
    with serving(service) as url:
        status, answer = post(url, rec_id, "apply", {"user": "alice@example.org"})
        assert status == 200, answer
        stack.clock.advance(PIN_COST)
        assert post(url, rec_id, "revert", {"user": "bob.ops+1"})[0] in (200, 202)
    rows = service.audit.entries(rec_id)
    forward = {r.actor for r in rows if r.reverts is None}
    reverts = {r.actor for r in rows if r.reverts is not None}
    assert forward == {"alice@example.org via tester@host"}
    assert reverts == {"bob.ops+1 via tester@host"}


BAD_BODIES = [
    pytest.param({"user": ""}, 400, "user '' is not 1-128 letters", id="empty-user"),
    pytest.param({"user": "alice smith"}, 400, "is not 1-128", id="space"),
    pytest.param({"user": "a" * 129}, 400, "is not 1-128", id="too-long"),
    pytest.param({"user": "rm -rf /;"}, 400, "is not 1-128", id="shell"),
    pytest.param({"user": "élise"}, 400, "is not 1-128", id="non-ascii"),
    pytest.param({"user": 42}, 400, "user 42 is not", id="number"),
    pytest.param({"user": None}, 400, "user None is not", id="null"),
    pytest.param(
        {"user": "alice", "admin": True},
        400,
        "unknown field(s) in the request body: 'admin'",
        id="extra-field",
    ),
    pytest.param(["alice"], 400, "must be a JSON object", id="array"),
    pytest.param(b"null", 400, "must be a JSON object", id="json-null"),
    pytest.param(b"user=alice", 400, "not valid JSON", id="form"),
    pytest.param(b'{"user": NaN}', 400, "not valid JSON", id="nan"),
    pytest.param(b"\xff\xfe", 400, "not UTF-8", id="binary"),
    pytest.param(b"[" * 50 + b"]" * 50, 400, "deeper than 32 levels", id="deep"),
    pytest.param(
        json.dumps({"user": "a" * (MAX_BODY_BYTES + 1)}).encode(),
        413,
        f"limit of {MAX_BODY_BYTES}",
        id="oversize",
    ),
]


@pytest.mark.parametrize(("body", "status", "message"), BAD_BODIES)
def test_a_bad_body_is_refused_before_anything_is_done(
    stack: Stack, body: Any, status: int, message: str
) -> None:
    service = stack.service()
    rec_id = the_pin(service)
    with serving(service) as url:
        for action in ("apply", "revert"):
            got, answer = post(url, rec_id, action, body)
            assert got == status, answer
            assert message in answer["error"]
    assert service.audit.entries() == []
    assert stack.train() == BEFORE


class Broken:
    """A resource manager whose client breaks in a way nobody planned for."""

    def nodes(self) -> list[NodeView]:
        raise RuntimeError("secret internals")

    def workloads(self) -> list[WorkloadView]:
        raise RuntimeError("secret internals")

    def apply(self, request: ActionRequest) -> ActionState:
        raise RuntimeError("secret internals")

    def action(self, action_id: str) -> ActionState:
        raise RuntimeError("secret internals")


def test_an_unexpected_error_answers_json_500_without_internals(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    service = stack.service(factory=lambda nodes, out: Broken())
    rec_id = the_pin(service)
    with serving(service) as url, caplog.at_level(logging.ERROR, "toposcope.advisor.serve"):
        status, answer = post(url, rec_id, "apply")
    assert status == 500
    assert answer == {"error": "internal error; the advisor service's log has the details"}
    assert "secret internals" in caplog.text and "Traceback" in caplog.text


def test_the_service_refuses_an_oversize_body_under_any_server(stack: Stack) -> None:
    service = stack.service()
    rec_id = the_pin(service)
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(
        REQUEST_METHOD="POST",
        PATH_INFO=f"/api/v1/recommendations/{rec_id}/apply",
        HTTP_AUTHORIZATION=f"Bearer {API_TOKEN}",
        CONTENT_LENGTH=str(MAX_BODY_BYTES + 1),
    )
    environ["wsgi.input"] = io.BytesIO(b" " * (MAX_BODY_BYTES + 1))
    answered: list[str] = []
    app: WsgiApp = advisor_app(service, API_TOKEN)
    body = b"".join(app(environ, lambda status, headers: answered.append(status)))
    assert answered == ["413 Content Too Large"]
    assert json.loads(body) == {
        "error": f"the request body has {MAX_BODY_BYTES + 1} bytes; at most 4096 are accepted"
    }
    assert service.audit.entries() == []
