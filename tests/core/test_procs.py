"""The process toolkit shared by tests, benchmarks and the local stack: ports, waiting,
child processes and the command lines of Prometheus-like servers.
"""

from __future__ import annotations

import http.server
import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from toposcope.devtools.procs import (
    ALERTMANAGER,
    PROMETHEUS,
    VICTORIA_METRICS,
    MissingBinaryError,
    find_binary,
    free_port,
    pick_port,
    port_is_free,
    prometheus_config,
    running,
    wait_http,
)
from toposcope.waiting import NotReadyError, wait_until


@contextmanager
def answering(status: int) -> Iterator[str]:
    """A loopback HTTP server answering every GET with ``status``; yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_free_port_can_be_bound_and_a_busy_preferred_port_is_replaced() -> None:
    port = free_port()
    assert port_is_free(port)
    assert pick_port(port) == port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        assert not port_is_free(port)
        other = pick_port(port)
    assert other != port and other > 0


def test_wait_until_returns_the_first_truthy_answer_and_retries_errors() -> None:
    answers = iter([ConnectionRefusedError("not yet"), None, 0, "ready"])

    def check() -> object:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_until(check, 5.0, interval_s=0.001) == "ready"


def test_wait_until_names_what_and_the_last_error_at_the_deadline() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(NotReadyError, match=r"the sim answering not met within 0.05s") as info:
        wait_until(refused, 0.05, interval_s=0.01, what="the sim answering")
    assert "connection refused" in str(info.value)


def test_wait_until_lets_unexpected_errors_through() -> None:
    def broken() -> bool:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        wait_until(broken, 5.0)


def test_wait_http_counts_only_the_ready_statuses() -> None:
    with answering(401) as url:
        assert wait_http(url, 5.0, ready=(200, 401))
        assert not wait_http(url, 0.2, ready=(200,))
    assert not wait_http(f"http://127.0.0.1:{free_port()}/", 0.2)


def test_running_stops_the_child_after_the_block(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
    log = tmp_path / "child.log"
    with running(argv, log) as child:
        wait_until(lambda: log.read_text() == "up\n", 30.0, interval_s=0.02)
        assert child.poll() is None
    assert child.returncode is not None


def test_a_missing_program_is_named_with_how_to_install_it() -> None:
    with pytest.raises(MissingBinaryError, match="no-such-program-x is not installed; apt it"):
        find_binary("no-such-program-x", "apt it")


def test_server_command_lines(tmp_path: Path) -> None:
    config = tmp_path / "p.yml"
    assert PROMETHEUS.argv("prom", 9090, tmp_path / "d", config, ["--x"]) == [
        "prom",
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'd'}",
        "--web.listen-address=127.0.0.1:9090",
        "--x",
    ]
    assert ALERTMANAGER.argv("am", 9093, tmp_path, config)[-1] == "--cluster.listen-address="
    vm = VICTORIA_METRICS.argv("vm", 8428, tmp_path)
    assert vm[1:3] == [f"-storageDataPath={tmp_path}", "-httpListenAddr=127.0.0.1:8428"]
    assert not any(arg.startswith("--config.file") for arg in vm)
    with pytest.raises(ValueError, match="prometheus needs a config file"):
        PROMETHEUS.argv("prom", 9090, tmp_path)


def test_prometheus_config_holds_rules_alerting_and_remote_write() -> None:
    scrape = [{"job_name": "j", "static_configs": [{"targets": ["127.0.0.1:1"]}]}]
    config = prometheus_config(
        scrape,
        interval="5s",
        scrape_timeout="4s",
        rule_files=["a.rules.yml"],
        alertmanagers=["127.0.0.1:9093"],
        remote_write=[{"url": "http://127.0.0.1:8428/api/v1/write"}],
    )
    assert config["global"] == {
        "scrape_interval": "5s",
        "evaluation_interval": "5s",
        "scrape_timeout": "4s",
    }
    assert config["scrape_configs"] == scrape and config["rule_files"] == ["a.rules.yml"]
    targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["127.0.0.1:9093"]
    assert config["remote_write"] == [{"url": "http://127.0.0.1:8428/api/v1/write"}]
    assert set(prometheus_config(scrape)) == {"global", "scrape_configs"}


def test_a_child_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    log = tmp_path / "stubborn.log"
    with running([sys.executable, "-c", script], log, stop_timeout_s=0.5) as child:
        wait_until(lambda: log.read_text() == "up\n", 30.0, interval_s=0.02)
    assert child.returncode == -9


def test_a_parent_stopped_with_sigterm_stops_its_children(tmp_path: Path) -> None:
    """The benchmarks' entry points call exit_on_sigterm: ``kill`` on one of them unwinds
    its blocks, so the servers it started do not outlive it."""
    child_log, parent_log = tmp_path / "child.log", tmp_path / "parent.log"
    parent = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from toposcope.devtools.procs import exit_on_sigterm, running\n"
        "exit_on_sigterm()\n"
        "argv = [sys.executable, '-c', 'import time; print(\"up\", flush=True); time.sleep(60)']\n"
        f"with running(argv, Path({str(child_log)!r})) as child:\n"
        "    print(child.pid, flush=True)\n"
        "    time.sleep(60)\n"
    )
    with running([sys.executable, "-c", parent], parent_log) as process:
        wait_until(lambda: child_log.exists() and child_log.read_text() == "up\n", 30.0)
        child_pid = int(parent_log.read_text().split()[0])
        process.terminate()
        assert process.wait(timeout=30) == 143
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)
