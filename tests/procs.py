"""Start and stop real services (Prometheus, exporters) on loopback for integration tests.

Ports are chosen by binding port 0; readiness is polled with a deadline, never slept for.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_binary(name: str) -> str:
    """Path of an OS binary the test needs; fail (not skip) when `make test` did not install it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; `make test` installs it (deploy/bootstrap.sh)")
    return path


def http_get(url: str, timeout: float = 5.0) -> bytes:
    """GET ``url`` and return the body (raises on HTTP errors)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


def instant_query(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """The result vector of ``expr`` from the PromQL API at ``base`` (at Unix time ``at``)."""
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    answer = json.loads(http_get(f"{base}/api/v1/query?" + urllib.parse.urlencode(params)))
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def poll(check: Callable[[], Any], deadline_s: float = 30.0, interval_s: float = 0.2) -> Any:
    """Call ``check`` until it returns a truthy value or the deadline passes (then fail)."""
    end = time.monotonic() + deadline_s
    last_error: Exception | None = None
    while time.monotonic() < end:
        try:
            value = check()
        except (urllib.error.URLError, ConnectionError, OSError, ValueError) as exc:
            last_error = exc
            value = None
        if value:
            return value
        time.sleep(interval_s)
    pytest.fail(f"condition not met within {deadline_s}s (last error: {last_error})")


@contextmanager
def running(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run a process for the duration of the block; terminate, then kill, afterwards."""
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class Prometheus:
    """A real Prometheus on loopback with a temporary config and TSDB."""

    def __init__(
        self,
        workdir: Path,
        scrape_configs: list[dict[str, Any]],
        rule_files: list[str] | None = None,
        alertmanagers: list[str] | None = None,
        remote_write: list[dict[str, Any]] | None = None,
    ) -> None:
        self.binary = require_binary("prometheus")
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": scrape_configs,
        }
        if rule_files:
            config["rule_files"] = rule_files
        if alertmanagers:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": alertmanagers}]}]
            }
        if remote_write:
            config["remote_write"] = remote_write
        self.config_file = workdir / "prometheus.yml"
        self.config_file.write_text(json.dumps(config))

    @contextmanager
    def run(self) -> Iterator[Prometheus]:
        """Start Prometheus and wait until it is ready."""
        argv = [
            self.binary,
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--rules.alert.resend-delay=1s",
        ]
        with running(argv, self.workdir / "prometheus.log"):
            poll(lambda: http_get(f"{self.url}/-/ready"))
            yield self

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query through the HTTP API (at Unix time ``at``); the result vector."""
        return instant_query(self.url, expr, at)


class Alertmanager:
    """A real Alertmanager on loopback (gossip off) with a temporary config and data dir."""

    def __init__(self, workdir: Path, config_text: str) -> None:
        self.binary = require_binary("prometheus-alertmanager")
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_file = workdir / "alertmanager.yml"
        self.config_file.write_text(config_text)

    @contextmanager
    def run(self) -> Iterator[Alertmanager]:
        """Start Alertmanager and wait until it is ready."""
        argv = [
            self.binary,
            f"--config.file={self.config_file}",
            f"--storage.path={self.workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
        ]
        with running(argv, self.workdir / "alertmanager.log"):
            poll(lambda: http_get(f"{self.url}/-/ready"))
            yield self


class WebhookReceiver:
    """Collects the JSON bodies Alertmanager posts to it, on 127.0.0.1 (a thread)."""

    def __init__(self) -> None:
        import http.server
        import threading

        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @contextmanager
    def run(self) -> Iterator[WebhookReceiver]:
        """Serve until the block ends."""
        self.thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


class VictoriaMetrics:
    """A real single-node VictoriaMetrics on loopback with a temporary data directory.

    Prometheus writes to it through ``remote_write_url`` (``/api/v1/write``); it answers the
    PromQL HTTP API (``/api/v1/query``, ``/api/v1/query_range``) at ``url``, as Prometheus does.
    ``-search.latencyOffset=1s`` makes points written a second ago searchable (the default
    hides the last 30 s).
    """

    def __init__(self, workdir: Path) -> None:
        self.binary = require_binary("victoria-metrics")
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.remote_write_url = f"{self.url}/api/v1/write"

    @contextmanager
    def run(self) -> Iterator[VictoriaMetrics]:
        """Start VictoriaMetrics and wait until ``/health`` answers."""
        argv = [
            self.binary,
            f"-storageDataPath={self.workdir / 'vm-data'}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            "-search.latencyOffset=1s",
        ]
        with running(argv, self.workdir / "victoria-metrics.log"):
            poll(lambda: http_get(f"{self.url}/health"))
            yield self

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query through the PromQL API (at Unix time ``at``); the result vector."""
        return instant_query(self.url, expr, at)
