"""Real services (Prometheus, exporters, webhooks) on loopback for integration tests.

Ports, readiness and the Prometheus-like servers come from the core's toolkit
(:mod:`toposcope.devtools.procs`), shared with the benchmarks and the local stack; this module adds
what only tests need: a missing program fails the test (``make test`` installs it), a
condition not met in time fails it, and a webhook receiver collects Alertmanager's posts.
"""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from toposcope.devtools.procs import (
    Alertmanager,
    MissingBinaryError,
    Prometheus,
    VictoriaMetrics,
    find_binary,
    free_port,
    http_get,
    instant_query,
    running,
)
from toposcope.waiting import NotReadyError, wait_until

__all__ = [
    "Alertmanager",
    "Prometheus",
    "VictoriaMetrics",
    "WebhookReceiver",
    "free_port",
    "http_get",
    "instant_query",
    "poll",
    "require_binary",
    "running",
    "terminate_cleanly",
]


def require_binary(name: str) -> str:
    """Path of an OS binary the test needs; fail (not skip) when `make test` did not install it."""
    try:
        return find_binary(name, "`make test` installs it (deploy/bootstrap.sh)")
    except MissingBinaryError as exc:
        pytest.fail(str(exc))


def terminate_cleanly(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Send SIGTERM and require exit status 0 within ``timeout_s``; a process still running
    then is killed, so that a failing test leaves nothing behind.
    """
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=timeout_s) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def poll(
    check: Callable[[], Any],
    deadline_s: float = 30.0,
    interval_s: float = 0.2,
    *,
    what: str = "condition",
    errors: tuple[type[BaseException], ...] = (OSError, ValueError),
) -> Any:
    """Call ``check`` until it returns a truthy value or the deadline passes (then fail).

    ``errors`` raised by ``check`` count as "not yet" (see :func:`toposcope.waiting.wait_until`).
    """
    try:
        return wait_until(check, deadline_s, interval_s=interval_s, what=what, errors=errors)
    except NotReadyError as exc:
        pytest.fail(str(exc))


class WebhookReceiver:
    """Collects the JSON bodies Alertmanager posts to it, on 127.0.0.1 (a thread)."""

    def __init__(self) -> None:
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
