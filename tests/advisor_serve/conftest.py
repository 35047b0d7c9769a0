"""The advisor service's test bench: a fake PromQL API answering from Prometheus text that
the test writes (and rewrites between analyses), the fake resource-manager API of the
applier's tests, a controllable clock, and the service's own HTTP server on port 0.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pytest

from tests.advisor.fakes import (
    Answer,
    ExpositionPrometheus,
    FakeResourceManager,
    FakeServer,
    Request,
)
from toposcope.advisor.acting import ManagerFactory, dry_run_factory
from toposcope.advisor.api import advisor_app, service_server
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.loaders import PrometheusLoader, Window
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule
from toposcope.advisor.policies import build
from toposcope.advisor.rmclients import HttpResourceManager
from toposcope.advisor.service import AdvisorService, AnalysisSettings
from toposcope.rm import Allocation, ResourceManager

API_TOKEN = "advisor-t0ken"
RM_TOKEN = "rm-t0ken"
LABELS = {"job": "toposcope", "instance": "10.0.0.1:9847"}
#: seconds a counter value stands for (the fake answers rate() as value / this)
RATE_DIVISOR = 3600.0
GIB = 1024**3


@dataclass(frozen=True)
class Placement:
    """One workload as the fake exporter reports it: cores used and GiB per NUMA node."""

    cores: Mapping[int, float]
    memory_gib: Mapping[int, float]
    pid: int = 4242


def host_text(
    workloads: Mapping[str, Placement],
    node_cpus: Sequence[str] = ("0-7", "8-15"),
    hostname: str = "n1",
) -> str:
    """Prometheus text of a 2-NUMA-node host (SLIT 21) running ``workloads``."""
    lines = [
        "# TYPE toposcope_exporter_build_info gauge",
        f'toposcope_exporter_build_info{{version="0",hostname="{hostname}"}} 1',
        "# TYPE toposcope_numa_node_info gauge",
    ]
    nodes = range(len(node_cpus))
    for n in nodes:
        lines.append(
            f'toposcope_numa_node_info{{numa_node="{n}",package="{n}",cpus="{node_cpus[n]}"}} 1'
        )
    lines.append("# TYPE toposcope_numa_distance gauge")
    for a in nodes:
        for b in nodes:
            lines.append(
                f'toposcope_numa_distance{{numa_node="{a}",peer_node="{b}"}} {10 if a == b else 21}'
            )
    lines.append("# TYPE toposcope_cpus_online gauge")
    lines += [f'toposcope_cpus_online{{numa_node="{n}"}} 8' for n in nodes]
    lines.append("# TYPE toposcope_numa_memory_total_bytes gauge")
    lines += [f'toposcope_numa_memory_total_bytes{{numa_node="{n}"}} {64 * GIB}' for n in nodes]
    lines.append("# TYPE toposcope_numa_memory_free_bytes gauge")
    lines += [f'toposcope_numa_memory_free_bytes{{numa_node="{n}"}} {48 * GIB}' for n in nodes]
    info, cpu, threads, memory = [], [], [], []
    for name, w in sorted(workloads.items()):
        info.append(
            f'toposcope_workload_info{{workload="{name}",pid="{w.pid}",comm="python",'
            'cgroup="/",pod="",namespace="",container=""} 1'
        )
        for n in nodes:
            cores = w.cores.get(n, 0.0)
            cpu.append(
                f'toposcope_workload_cpu_seconds_total{{workload="{name}",numa_node="{n}"}} '
                f"{cores * RATE_DIVISOR}"
            )
            threads.append(
                f'toposcope_workload_threads{{workload="{name}",numa_node="{n}"}} '
                f"{4 if cores else 0}"
            )
            memory.append(
                f'toposcope_workload_memory_bytes{{workload="{name}",numa_node="{n}"}} '
                f"{w.memory_gib.get(n, 0.0) * GIB}"
            )
    lines += ["# TYPE toposcope_workload_info gauge", *info]
    lines += ["# TYPE toposcope_workload_cpu_seconds_total counter", *cpu]
    lines += ["# TYPE toposcope_workload_threads gauge", *threads]
    lines += ["# TYPE toposcope_workload_memory_bytes gauge", *memory]
    return "\n".join(lines) + "\n"


#: "train" runs 70/30 and keeps 60/40 of its memory over NUMA nodes 0/1: pin it to node 0
SPREAD = Placement({0: 2.8, 1: 1.2}, {0: 6.0, 1: 4.0})
#: after the pin, everything on node 0 with the same CPU use
PINNED = Placement({0: 4.0}, {0: 10.0})
#: after the pin, everything on node 0 but half the cores (CPU-starved)
STARVED = Placement({0: 2.0}, {0: 10.0})


class PromQL:
    """A fake PromQL API whose answers come from ``text`` (replace it between analyses)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.down = False

    def __call__(self, request: Request) -> Answer:
        if self.down:
            return 503, json.dumps({"status": "error", "error": "down"}).encode()
        return ExpositionPrometheus(self.text, LABELS, rate_divisor=RATE_DIVISOR)(request)

    def set(self, workloads: Mapping[str, Placement]) -> None:
        self.text = host_text(workloads)


@dataclass
class Clock:
    """Unix seconds that only move when the test says so."""

    now: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def advisor_service(
    prometheus_url: str,
    db: Path,
    factory: ManagerFactory,
    *,
    backend_name: str = "sim",
    clock: Clock | None = None,
    verify_after: float = 600.0,
    wait_seconds: float = 5.0,
) -> AdvisorService:
    """The advisor service under test: numa-pinning over the PromQL API at ``prometheus_url``,
    acting through ``factory``, its audit log in ``db``, its actor ``tester@host``.
    """
    return AdvisorService(
        PrometheusLoader(prometheus_url, timeout=5, retries=0),
        build(["numa-pinning"]),
        AnalysisSettings(Window.parse("10m")),
        manager_factory=factory,
        backend_name=backend_name,
        audit=AuditLog(db),
        outcomes=OutcomeLog(db),
        rule=VerificationRule(verify_after_seconds=verify_after),
        actor="tester@host",
        clock=clock or Clock(),
        wait_seconds=wait_seconds,
    )


@dataclass
class Bench:
    """Everything a service test needs; :meth:`service` builds (another) service on it."""

    promql: PromQL
    prometheus: FakeServer
    rm: FakeResourceManager
    rm_server: FakeServer
    db: Path
    clock: Clock = field(default_factory=Clock)
    verify_after: float = 600.0

    def http_factory(self) -> ManagerFactory:
        def factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
            return HttpResourceManager(self.rm_server.url, RM_TOKEN, timeout=5)

        return factory

    def service(
        self,
        *,
        factory: ManagerFactory | None = None,
        backend_name: str = "sim",
    ) -> AdvisorService:
        return advisor_service(
            self.prometheus.url,
            self.db,
            factory or self.http_factory(),
            backend_name=backend_name,
            clock=self.clock,
            verify_after=self.verify_after,
        )

    def dry_service(self) -> AdvisorService:
        return self.service(factory=dry_run_factory, backend_name="dry-run")


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    promql = PromQL(host_text({"train": SPREAD}))
    rm = FakeResourceManager(RM_TOKEN, {"train": Allocation("n1", list(range(16)), [0, 1], [])})
    with FakeServer(promql).run() as prometheus, FakeServer(rm).run() as rm_server:
        yield Bench(promql, prometheus, rm, rm_server, tmp_path / "audit.sqlite")


@contextmanager
def serving(service: AdvisorService, token: str | None = API_TOKEN) -> Iterator[str]:
    """The service's HTTP server (its API guarded by ``token``) on 127.0.0.1, port 0; yields
    its base URL.
    """
    server = service_server(advisor_app(service, token), "127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()


def call(
    url: str, method: str = "GET", token: str | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], Any]:
    """One HTTP call: status, headers and the decoded body (JSON when it is JSON).

    A ``POST`` sends ``body`` (JSON), or an empty body without one.
    """
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    data = (body if body is not None else b"") if method == "POST" else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, got, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        status, got, raw = exc.code, dict(exc.headers), exc.read()
    if got.get("Content-Type", "").startswith("application/json"):
        return status, got, json.loads(raw)
    return status, got, raw.decode()


def the_pin(service: AdvisorService) -> str:
    """The id of the one pin recommendation of the service's latest report."""
    assert service.report is not None
    [rec] = [r for r in service.report.recommendations if r.kind == "pin"]
    return rec.id
