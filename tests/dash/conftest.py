"""The Dash app's test bench.

* ``--headless`` for dash's pytest plugin (its ``dash_duo`` fixture cannot start Chromium
  without a display otherwise); runs that never use ``dash_duo`` are unaffected.
* :class:`FakeApi`: a loopback HTTP server answering canned JSON per path and query, standing
  in for Prometheus or the advisor in unit tests (an external system, never our own code).
* ``stack``: one real stack for the browser tests (session scope): the simulator
  (``builtin:demo``) with its resource-manager API, a real Prometheus scraping every
  simulated node and the simulator's own series (its queue and its fabric's multi-node
  jobs), and the advisor service applying to the simulator.
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.procs import Prometheus, free_port, http_get, poll, running

ADVISOR_TOKEN = "dash-advisor-t0ken"
SIM_TOKEN = "dash-sim-t0ken"


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "headless"):
        config.option.headless = True


#: (status, JSON body) for a request: method, path, decoded form/query parameters
Handler = Callable[[str, str, dict[str, str]], tuple[int, Any]]


@dataclass
class FakeApi:
    """A loopback HTTP server whose answers come from ``handler``; it records requests
    (method, path, parameters, headers) and, in ``bodies``, each request's raw body.
    """

    handler: Handler
    requests: list[tuple[str, str, dict[str, str], dict[str, str]]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        api = self

        class RequestHandler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                parsed = urllib.parse.urlparse(self.path)
                params = dict(urllib.parse.parse_qsl(parsed.query))
                length = int(self.headers.get("Content-Length", "0") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.headers.get("Content-Type") != "application/json":
                    params.update(urllib.parse.parse_qsl(raw.decode()))
                api.bodies.append(raw)
                api.requests.append((method, parsed.path, params, dict(self.headers)))
                status, body = api.handler(method, parsed.path, params)
                answer = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeApi:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def vector(*samples: tuple[dict[str, str], float | str]) -> dict[str, Any]:
    """A Prometheus instant-query answer."""
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1700000000.0, str(v)]} for m, v in samples],
        },
    }


def matrix(*series: tuple[dict[str, str], list[tuple[float, float | str]]]) -> dict[str, Any]:
    """A Prometheus range-query answer."""
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": m, "values": [[t, str(v)] for t, v in points]} for m, points in series
            ],
        },
    }


@dataclass(frozen=True)
class Stack:
    """URLs of the running stack and where its tokens and logs are."""

    sim: str
    prometheus: str
    advisor: str
    workdir: Path


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("dash-stack")
    sim_token = workdir / "sim.token"
    sim_token.write_text(SIM_TOKEN)
    sim_token.chmod(0o600)
    advisor_token = workdir / "advisor.token"
    advisor_token.write_text(ADVISOR_TOKEN)
    advisor_token.chmod(0o600)
    targets = workdir / "targets.json"
    sim_port, advisor_port = free_port(), free_port()
    sim_url, advisor_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{advisor_port}"
    toposcope = [sys.executable, "-m", "toposcope.cli"]
    sim = [
        *toposcope, "sim", "--scenario", "builtin:demo", "--listen", f"127.0.0.1:{sim_port}",
        "--file-sd", str(targets), "--speed", "4", "--state-dir", str(workdir / "state"),
        "--token-file", str(sim_token),
    ]  # fmt: skip
    with running(sim, workdir / "sim.log"):
        poll(lambda: http_get(f"{sim_url}/-/ready"))
        poll(targets.exists)
        nodes = len(json.loads(targets.read_text()))
        prometheus = Prometheus(
            workdir,
            [
                {
                    "job_name": "toposcope-sim",
                    "file_sd_configs": [{"files": [str(targets)]}],
                    "relabel_configs": [{"source_labels": ["node"], "target_label": "instance"}],
                },
                {
                    # the simulator's own /metrics: its queue and its fabric's per-job series
                    "job_name": "toposcope-sim-queue",
                    "static_configs": [{"targets": [f"127.0.0.1:{sim_port}"]}],
                },
            ],
            # a scrape of every node takes over a second on a busy machine: with 1 s (as long
            # as the interval) one slow scrape marks a node's series stale and the pages drop it
            interval="2s",
        )
        with prometheus.run() as prom:
            poll(lambda: len(prom.query('up{job="toposcope-sim"} == 1')) == nodes, deadline_s=40)
            advisor = [
                *toposcope, "advisor", "serve", "--prometheus", prom.url, "--window", "1m",
                "--interval", "2s", "--listen", f"127.0.0.1:{advisor_port}",
                "--api-token-file", str(advisor_token), "--resource-manager", "sim",
                "--rm-url", sim_url, "--rm-token-file", str(sim_token),
                "--audit-db", str(workdir / "audit.sqlite"),
            ]  # fmt: skip
            with running(advisor, workdir / "advisor.log"):
                poll(lambda: http_get(f"{advisor_url}/-/ready"), deadline_s=40)
                poll(
                    lambda: any(
                        r["kind"] == "pin"
                        for r in json.loads(http_get(f"{advisor_url}/api/v1/recommendations"))[
                            "recommendations"
                        ]
                    ),
                    deadline_s=40,
                )
                yield Stack(sim_url, prom.url, advisor_url, workdir)
