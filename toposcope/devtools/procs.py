"""Local processes on loopback: free ports, waiting until ready, Prometheus-like servers.

The one toolkit of the test suite, the benchmarks and the local stack (``make up``), so that
they choose ports, wait for readiness and start Prometheus, Alertmanager or VictoriaMetrics
the same way:

* ports: :func:`free_port` binds port 0 and returns what the kernel chose;
  :func:`pick_port` prefers a well-known port and falls back to a free one;
* waiting: :func:`wait_until` calls a check until it answers something truthy and raises
  :class:`NotReadyError` at its deadline (never a bare sleep on timing luck);
  :func:`wait_http` waits until a URL answers one of the statuses that mean "up";
* processes: :func:`running` runs a child for the length of a block and stops it
  (SIGTERM, then SIGKILL after a timeout); :func:`exit_on_sigterm` makes a SIGTERM to the
  parent unwind its blocks, so that a benchmark stopped that way stops its children too;
* servers: :class:`ServerKind` holds one server's flags (how to name its config, data
  directory and listen address, and which path answers when it is ready), so that the
  detached servers of the local stack and the block-scoped :class:`LocalServer` of tests
  and benchmarks build the same command line.

This package is the development toolkit: it is not in the distribution (the wheel), and no
shipped module imports it (tests/core/test_layering.py). Shipped code that waits for a process
uses :mod:`toposcope.waiting`, which this module builds on.
"""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from toposcope.waiting import NotReadyError, wait_until

#: the address every toolkit server listens on
LOOPBACK = "127.0.0.1"


class MissingBinaryError(RuntimeError):
    """A server's program is not installed; the message names it and how to install it."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that was free a moment ago (the kernel's choice for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when nothing listens on ``host:port`` (a socket in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(preferred: int, host: str = LOOPBACK) -> int:
    """``preferred`` when it is free, else a free port chosen by the kernel."""
    return preferred if port_is_free(preferred, host) else free_port(host)


def find_binary(name: str, hint: str = "") -> str:
    """The path of the program ``name`` on ``PATH``; :class:`MissingBinaryError` otherwise.

    ``hint`` says how to install it and is appended to the message.
    """
    path = shutil.which(name)
    if path is None:
        raise MissingBinaryError(f"{name} is not installed" + (f"; {hint}" if hint else ""))
    return path


def http_get(url: str, timeout: float = 5.0) -> bytes:
    """GET ``url`` and return the body (``urllib.error.HTTPError`` on an error status)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


def http_json(url: str, timeout: float = 10.0) -> Any:
    """GET ``url`` and decode its JSON body (``ValueError`` when it is not JSON)."""
    return json.loads(http_get(url, timeout))


def instant_query(base: str, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    """The raw result list of ``expr`` from the PromQL API at ``base`` (at Unix time ``at``).

    ``ValueError`` when the API answers anything but ``status: success``.
    """
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    answer = http_json(f"{base}/api/v1/query?" + urllib.parse.urlencode(params))
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise ValueError(f"query {expr!r} at {base} failed: {answer!r}")
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def answers(url: str, ready: Sequence[int] = (200,), timeout: float = 2.0) -> bool:
    """True when one GET of ``url`` answers one of the ``ready`` statuses."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status) in ready
    except urllib.error.HTTPError as exc:
        return exc.code in ready
    except (OSError, http.client.HTTPException):
        return False


def wait_http(url: str, deadline_s: float = 30.0, ready: Sequence[int] = (200,)) -> bool:
    """Poll ``url`` until it answers one of the ``ready`` statuses; False at the deadline.

    A page behind a login answers 401 until one signs in: pass ``ready=(200, 401)``.
    """
    try:
        wait_until(lambda: answers(url, ready), deadline_s, what=f"{url} answering")
    except NotReadyError:
        return False
    return True


def stop(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """Terminate ``process``; kill it when it has not exited after ``timeout_s``."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into :class:`SystemExit` (status 143, as the shell reports it).

    Python's default SIGTERM ends the process at once, skipping ``finally`` blocks, so a
    benchmark stopped with ``kill`` left the servers of its :func:`running` blocks behind;
    raised as an exception, it unwinds them and they stop their children. For the main
    thread of a command-line entry point.
    """

    def _exit(_signum: int, _frame: object) -> None:
        raise SystemExit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, _exit)


@contextmanager
def running(
    argv: Sequence[str], log: Path, stop_timeout_s: float = 10.0
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` for the duration of the block, its output in ``log``; stop it after."""
    with open(log, "wb") as out:
        process = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        stop(process, stop_timeout_s)


@dataclass(frozen=True)
class ServerKind:
    """How to start one Prometheus-like server: its program and the flags it spells.

    ``config_flag`` is ``None`` for a server without a config file; ``fixed_args`` are
    given on every start (Alertmanager's gossip turned off: one instance, no cluster port).
    """

    name: str
    binary: str
    listen_flag: str
    data_flag: str
    ready_path: str
    config_flag: str | None = "--config.file"
    fixed_args: tuple[str, ...] = ()
    #: how to get the program, said when it is missing
    install_hint: str = "`make test` and `make up` install it (deploy/bootstrap.sh)"

    def argv(
        self,
        binary: str,
        port: int,
        data_dir: Path,
        config_file: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> list[str]:
        """The command line that serves on loopback ``port`` with data in ``data_dir``."""
        argv = [binary]
        if self.config_flag is not None:
            if config_file is None:
                raise ValueError(f"{self.name} needs a config file")
            argv.append(f"{self.config_flag}={config_file}")
        argv += [
            f"{self.data_flag}={data_dir}",
            f"{self.listen_flag}={LOOPBACK}:{port}",
            *self.fixed_args,
            *extra_args,
        ]
        return argv

    def find(self) -> str:
        """The path of the program (:class:`MissingBinaryError` naming how to install it)."""
        return find_binary(self.binary, self.install_hint)


PROMETHEUS = ServerKind(
    "prometheus", "prometheus", "--web.listen-address", "--storage.tsdb.path", "/-/ready"
)
ALERTMANAGER = ServerKind(
    "alertmanager", "prometheus-alertmanager", "--web.listen-address", "--storage.path",
    "/-/ready", fixed_args=("--cluster.listen-address=",),
)  # fmt: skip
#: single-node VictoriaMetrics; ``-search.latencyOffset=1s`` makes points written a second
#: ago searchable (the default hides the last 30 s)
VICTORIA_METRICS = ServerKind(
    "victoria-metrics", "victoria-metrics", "-httpListenAddr", "-storageDataPath", "/health",
    config_flag=None, fixed_args=("-search.latencyOffset=1s",),
)  # fmt: skip


def prometheus_config(
    scrape_configs: Sequence[Mapping[str, Any]],
    *,
    interval: str = "1s",
    scrape_timeout: str | None = None,
    rule_files: Sequence[str] = (),
    alertmanagers: Sequence[str] = (),
    remote_write: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A Prometheus configuration: scrape and rule evaluation every ``interval``, the rule
    files, the Alertmanagers (``host:port``) to alert and the remote-write targets given.
    """
    global_settings = {"scrape_interval": interval, "evaluation_interval": interval}
    if scrape_timeout is not None:
        global_settings["scrape_timeout"] = scrape_timeout
    config: dict[str, Any] = {"global": global_settings, "scrape_configs": list(scrape_configs)}
    if rule_files:
        config["rule_files"] = list(rule_files)
    if alertmanagers:
        config["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]
        }
    if remote_write:
        config["remote_write"] = list(remote_write)
    return config


class LocalServer:
    """A Prometheus-like server on a free loopback port for the length of a block.

    Its config file, data directory and log live in ``workdir`` under the kind's name, so a
    Prometheus and an Alertmanager can share one directory. ``binary`` overrides the program
    found on ``PATH``.
    """

    def __init__(
        self,
        kind: ServerKind,
        workdir: Path,
        config_text: str | None = None,
        extra_args: Sequence[str] = (),
        binary: str | None = None,
    ) -> None:
        self.kind = kind
        self.binary = binary or kind.find()
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.extra_args = tuple(extra_args)
        self.config_file: Path | None = None
        if config_text is not None:
            self.config_file = workdir / f"{kind.name}.yml"
            self.config_file.write_text(config_text, encoding="utf-8")

    @contextmanager
    def run(self, ready_deadline_s: float = 30.0, stop_timeout_s: float = 10.0) -> Iterator[Self]:
        """Start the server, wait until its ready path answers 200, stop it afterwards
        (SIGKILL when it has not exited ``stop_timeout_s`` after SIGTERM).
        """
        argv = self.kind.argv(
            self.binary,
            self.port,
            self.workdir / f"{self.kind.name}-data",
            self.config_file,
            self.extra_args,
        )
        log = self.workdir / f"{self.kind.name}.log"
        with running(argv, log, stop_timeout_s):
            if not wait_http(f"{self.url}{self.kind.ready_path}", ready_deadline_s):
                raise NotReadyError(
                    f"{self.kind.name} at {self.url} not ready within {ready_deadline_s}s; "
                    f"see {log}"
                )
            yield self

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query through the PromQL API (at Unix time ``at``); the raw result list."""
        return instant_query(self.url, expr, at)


class Prometheus(LocalServer):
    """A real Prometheus scraping ``scrape_configs`` (see :func:`prometheus_config`).

    Firing alerts are resent every ``interval`` rather than every minute, so that an alert
    path under test does not wait on Prometheus' default.
    """

    def __init__(
        self,
        workdir: Path,
        scrape_configs: Sequence[Mapping[str, Any]],
        rule_files: Sequence[str] | None = None,
        alertmanagers: Sequence[str] | None = None,
        remote_write: Sequence[Mapping[str, Any]] | None = None,
        *,
        interval: str = "1s",
        scrape_timeout: str | None = None,
        binary: str | None = None,
    ) -> None:
        config = prometheus_config(
            scrape_configs,
            interval=interval,
            scrape_timeout=scrape_timeout,
            rule_files=rule_files or (),
            alertmanagers=alertmanagers or (),
            remote_write=remote_write or (),
        )
        resend = f"--rules.alert.resend-delay={interval}"
        super().__init__(PROMETHEUS, workdir, json.dumps(config), (resend,), binary)


class Alertmanager(LocalServer):
    """A real Alertmanager (gossip off) with the configuration ``config_text``."""

    def __init__(self, workdir: Path, config_text: str) -> None:
        super().__init__(ALERTMANAGER, workdir, config_text)


class VictoriaMetrics(LocalServer):
    """A real single-node VictoriaMetrics: written to at ``remote_write_url``
    (``/api/v1/write``), read through the PromQL API at ``url`` as Prometheus is.
    """

    def __init__(self, workdir: Path) -> None:
        super().__init__(VICTORIA_METRICS, workdir)
        self.remote_write_url = f"{self.url}/api/v1/write"
