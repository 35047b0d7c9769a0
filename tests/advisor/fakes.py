"""Fakes of the external systems the advisor talks to: a PromQL HTTP API and a resource
manager, each an ``http.server`` on 127.0.0.1 port 0 in a thread, stopped by the test.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    BaseResourceManager,
    NodeView,
    ResourceManagerError,
    WorkloadState,
    WorkloadView,
    parse_request,
    to_json,
)


@dataclass
class Request:
    """One request the fake saw."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""


#: what a route answers: (status, body) or one of the strings "hang" / "close"
Answer = tuple[int, bytes] | str
Route = Callable[[Request], Answer]


@dataclass
class FakeServer:
    """A loopback HTTP server whose answers come from ``route``; records every request."""

    route: Route
    requests: list[Request] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    @contextmanager
    def run(self) -> Iterator[FakeServer]:
        """Serve until the block ends; hanging handlers are released first."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _handle(self, method: str) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                params = dict(urllib.parse.parse_qsl(parsed.query))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Request(method, parsed.path, params, dict(self.headers.items()), body)
                fake.requests.append(request)
                answer = fake.route(request)
                if answer == "hang":
                    fake.release.wait(10)
                    return
                if answer == "close":
                    self.close_connection = True
                    return
                assert isinstance(answer, tuple)
                status, payload = answer
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.release.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


def ok(data: dict[str, Any], **extra: Any) -> tuple[int, bytes]:
    """A Prometheus success answer."""
    return 200, json.dumps({"status": "success", "data": data, **extra}).encode()


def vector(*items: tuple[dict[str, str], str]) -> dict[str, Any]:
    """An instant vector of ``(labels, value text)`` pairs."""
    return {
        "resultType": "vector",
        "result": [{"metric": m, "value": [1700000000.0, v]} for m, v in items],
    }


#: the metric a query names: toposcope's, or dcgm-exporter's (``--gpu-metrics-source dcgm``)
_METRIC_RE = re.compile(r"toposcope_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+")


class ExpositionPrometheus:
    """A PromQL API fake that answers each query with the samples of the metric it names,
    taken from Prometheus text (as if the exporter had been scraped once, with ``extra``
    labels); ``count_over_time`` answers ``samples`` and a rate the counter's value divided
    by ``rate_divisor`` (as if it had grown from zero over that many seconds). Range queries
    give one point per step over the requested range.
    """

    def __init__(
        self, text: str, extra: dict[str, str], samples: int = 60, rate_divisor: float = 3600.0
    ) -> None:
        self.samples = [
            (s.name, {**s.labels, **extra}, s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
        self.count = samples
        self.rate_divisor = rate_divisor

    def __call__(self, request: Request) -> Answer:
        query = request.params.get("query", "")
        match = _METRIC_RE.search(query)
        name = match.group(0) if match else ""
        chosen = [(labels, value) for n, labels, value in self.samples if n == name]
        counting = query.startswith("count_over_time")
        if request.path.endswith("/query_range"):
            start, end = float(request.params["start"]), float(request.params["end"])
            step = float(request.params["step"])
            times = [start + i * step for i in range(int((end - start) / step) + 1)]
            return ok(
                {
                    "resultType": "matrix",
                    "result": [
                        {
                            "metric": {"__name__": name, **labels},
                            "values": [[t, str(v)] for t in times],
                        }
                        for labels, v in chosen
                    ],
                }
            )
        if counting:
            chosen = [(labels, float(self.count)) for labels, _ in chosen]
        elif query.startswith(("rate(", "increase(")):
            chosen = [(labels, value / self.rate_divisor) for labels, value in chosen]
        return ok(vector(*((labels, str(value)) for labels, value in chosen)))


@dataclass
class Gate:
    """Holds the actions a :class:`FakeResourceManager` carries out until the test opens it.

    ``reached`` is set once an action waits at the gate (the resource manager's action lock
    is held meanwhile, so that questions about actions wait too, as with a backend that
    works one request at a time); after :meth:`open` the action is carried out, or, when
    ``drop``, refused with 503 as by a resource manager that restarted and lost it.
    """

    drop: bool = False
    reached: threading.Event = field(default_factory=threading.Event)
    opened: threading.Event = field(default_factory=threading.Event)

    def open(self) -> None:
        """Let the held action (and every later one) through."""
        self.opened.set()

    def pass_through(self, request_id: str) -> None:
        """Wait at the gate (bounded); raise when the action is to be dropped."""
        self.reached.set()
        if not self.opened.wait(30) or self.drop:
            raise ResourceManagerError(f"{request_id}: lost (the resource manager restarted)", 503)


class FakeResourceManager(BaseResourceManager):
    """The resource-manager HTTP API (``/api/v1``) over in-memory workloads, token-checked.

    A backend like the real ones (checks, repeat rule and action book from the shared base):
    action ids are the request ids, every request is applied once, and before/after
    allocations are recorded. Bodies are read and answers written with the core models, in
    the API's shapes (202 for a new action, 200 for a repeat, ``{"error", "field"}``).
    ``fail_kinds`` are action kinds that answer ``failed``; ``posts`` counts POSTs received;
    ``carried`` counts how often each request id was carried out (a repeat is not); a
    ``gate`` holds new actions (:class:`Gate`).
    """

    def __init__(self, token: str, workloads: dict[str, Allocation]) -> None:
        super().__init__()
        self.token = token
        self.allocations = dict(workloads)
        self.posts = 0
        self.fail_kinds: set[str] = set()
        self.carried: Counter[str] = Counter()
        self.gate: Gate | None = None

    def hold(self, drop: bool = False) -> Gate:
        """Hold the next actions at a new :class:`Gate` (see there)."""
        self.gate = Gate(drop)
        return self.gate

    @property
    def actions(self) -> dict[str, ActionState]:
        """Every action by its request id."""
        return {state.request.request_id: state for state in self.recorded()}

    def nodes(self) -> list[NodeView]:
        return []

    def workloads(self) -> list[WorkloadView]:
        return [
            WorkloadView(name, "job", WorkloadState.RUNNING, a, len(a.gpus))
            for name, a in sorted(self.allocations.items())
        ]

    def __call__(self, request: Request) -> Answer:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _json(401, {"error": "bad token", "field": None})
        path = request.path.removeprefix("/api/v1")
        try:
            if request.method == "GET" and path == "/workloads":
                return _json(200, to_json(self.workloads(), list[WorkloadView]))
            if request.method == "GET" and path == "/nodes":
                return _json(200, to_json(self.nodes(), list[NodeView]))
            if request.method == "GET" and path.startswith("/actions/"):
                action_id = urllib.parse.unquote(path.removeprefix("/actions/"))
                return _json(200, to_json(self.action(action_id)))
            if request.method == "POST" and path == "/actions":
                self.posts += 1
                applied = self.apply_once(parse_request(json.loads(request.body)))
                return _json(200 if applied.repeat else 202, to_json(applied.state))
        except ResourceManagerError as exc:
            return _json(exc.status, {"error": str(exc), "field": exc.field})
        return _json(404, {"error": f"no route {path}", "field": None})

    def _carry_out(self, request: ActionRequest) -> ActionState:
        before = self.allocations.get(request.workload)
        if before is None:
            raise ResourceManagerError(f"unknown workload {request.workload}", 404)
        rid = request.request_id
        if self.gate is not None:
            self.gate.pass_through(rid)
        self.carried[rid] += 1
        if request.kind in self.fail_kinds:
            return ActionState(rid, request, ActionStatus.FAILED, before, before, "refused")
        after = before
        if request.kind == ActionKind.PIN:
            after = Allocation(before.node, request.cpus, request.mems, before.gpus)
        elif request.kind == ActionKind.MIGRATE_MEMORY:
            after = Allocation(before.node, before.cpus, request.mems, before.gpus)
        elif request.kind == ActionKind.MIGRATE:
            after = Allocation(request.node or before.node, before.cpus, before.mems, request.gpus)
        elif request.kind == ActionKind.RELEASE:
            after = Allocation(before.node, before.cpus, before.mems, [])
        self.allocations[request.workload] = after
        return ActionState(rid, request, ActionStatus.SUCCEEDED, before, after)


def _json(status: int, data: object) -> tuple[int, bytes]:
    return status, json.dumps(data).encode()
