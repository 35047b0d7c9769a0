"""Fakes of the external systems the advisor talks to: a PromQL HTTP API and a resource
manager, each an ``http.server`` on 127.0.0.1 port 0 in a thread, stopped by the test.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from toposcope.resources import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    ResourceManagerError,
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


_METRIC_RE = re.compile(r"toposcope_[a-z0-9_]+")


class ExpositionPrometheus:
    """A PromQL API fake that answers each query with the samples of the metric it names,
    taken from Prometheus text (as if the exporter had been scraped once, with ``extra``
    labels); ``count_over_time`` answers ``samples`` and ``rate`` the counter's value divided
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
        elif query.startswith("rate("):
            chosen = [(labels, value / self.rate_divisor) for labels, value in chosen]
        return ok(vector(*((labels, str(value)) for labels, value in chosen)))


class FakeResourceManager:
    """The resource-manager HTTP API (``/api/v1``) over in-memory workloads, token-checked.

    It keeps actions by id (= ``request_id``), applies each request once (idempotent) and
    records before/after allocations, like the simulator's server.
    """

    def __init__(self, token: str, workloads: dict[str, Allocation]) -> None:
        self.token = token
        self.allocations = dict(workloads)
        self.actions: dict[str, ActionState] = {}
        self.posts = 0
        self.fail_kinds: set[str] = set()

    def __call__(self, request: Request) -> Answer:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return 401, json.dumps({"error": "bad token"}).encode()
        path = request.path.removeprefix("/api/v1")
        if request.method == "GET" and path == "/workloads":
            return 200, json.dumps(
                [
                    {
                        "name": name,
                        "kind": "job",
                        "state": "running",
                        "allocation": _alloc(a),
                        "gpus_requested": len(a.gpus),
                        "pinned": False,
                    }
                    for name, a in sorted(self.allocations.items())
                ]
            ).encode()
        if request.method == "GET" and path == "/nodes":
            return 200, b"[]"
        if request.method == "GET" and path.startswith("/actions/"):
            action = self.actions.get(path.removeprefix("/actions/"))
            if action is None:
                return 404, json.dumps({"error": "unknown action"}).encode()
            return 200, json.dumps(_state(action)).encode()
        if request.method == "POST" and path == "/actions":
            self.posts += 1
            try:
                state = self.apply(json.loads(request.body))
            except ResourceManagerError as exc:
                return exc.status, json.dumps({"error": str(exc)}).encode()
            return 200, json.dumps(_state(state)).encode()
        return 404, json.dumps({"error": f"no route {path}"}).encode()

    def apply(self, body: dict[str, Any]) -> ActionState:
        """Carry out one request (or return the earlier result for its request_id)."""
        request = ActionRequest(
            request_id=body["request_id"],
            kind=ActionKind(body["kind"]),
            workload=body["workload"],
            node=body.get("node"),
            cpus=body.get("cpus", []),
            mems=body.get("mems", []),
            gpus=body.get("gpus", []),
            reason=body.get("reason", ""),
        )
        if request.request_id in self.actions:
            return self.actions[request.request_id]
        before = self.allocations.get(request.workload)
        if before is None:
            raise ResourceManagerError(f"unknown workload {request.workload}", 404)
        if request.kind in self.fail_kinds:
            state = ActionState(
                request.request_id, request, ActionStatus.FAILED, before, before, "refused"
            )
            self.actions[request.request_id] = state
            return state
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
        state = ActionState(request.request_id, request, ActionStatus.SUCCEEDED, before, after)
        self.actions[request.request_id] = state
        return state


def _alloc(a: Allocation | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {"node": a.node, "cpus": a.cpus, "mems": a.mems, "gpus": a.gpus}


def _state(s: ActionState) -> dict[str, Any]:
    r = s.request
    return {
        "id": s.id,
        "request": {
            "request_id": r.request_id,
            "kind": str(r.kind),
            "workload": r.workload,
            "node": r.node,
            "cpus": r.cpus,
            "mems": r.mems,
            "gpus": r.gpus,
            "reason": r.reason,
        },
        "status": str(s.status),
        "before": _alloc(s.before),
        "after": _alloc(s.after),
        "error": s.error,
        "cost_seconds": s.cost_seconds,
    }
