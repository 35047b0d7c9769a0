"""The automatic loop against the simulator: the service reads the simulated node's
exporter through the simulator's HTTP server (as ``--sim URL`` does), rehearses, applies
through the simulator's resource-manager API, and the change is verified. The simulator's
clock is manual and the service's is the test's: every step is driven, nothing waits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tests.advisor_serve.conftest import Clock
from tests.integration.test_advisor_loop import SCENARIO
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.autoapply.config import AutoApplyPolicy
from toposcope.advisor.autoapply.decisions import DecisionLog
from toposcope.advisor.autoapply.loop import AutoApplier
from toposcope.advisor.loaders import Window
from toposcope.advisor.loaders.scrape import ScrapeLoader
from toposcope.advisor.loaders.sim_targets import sim_targets
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule
from toposcope.advisor.policies import build
from toposcope.advisor.rmclients import HttpResourceManager
from toposcope.advisor.service import AdvisorService, AnalysisSettings
from toposcope.report.advisor_api import Verdict
from toposcope.rm import ResourceManager
from toposcope.rm.api import make_api_app
from toposcope.sim.cluster import SimCluster
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, parse_scenario
from toposcope.sim.server import SimServer, make_sim_app

TOKEN = "auto-sim-t0ken"
VERIFY_AFTER = 600.0
WORKLOAD = "remote-memory.service"


@dataclass(frozen=True)
class Sim:
    """The simulated cluster and the base URL of its HTTP server."""

    cluster: SimCluster
    url: str


@contextmanager
def simulator(tmp_path: Path) -> Iterator[Sim]:
    """The loop scenario's cluster (one job's memory on the wrong socket), 30 simulated
    seconds in, served on a loopback port.
    """
    cluster = build_cluster(parse_scenario(SCENARIO, "loop.yaml", tmp_path))
    cluster.advance(30)
    exporters = SimExporters(cluster, tmp_path / "state", background=False)
    server = SimServer(
        make_sim_app(cluster, exporters, make_api_app(cluster, TOKEN)), "127.0.0.1:0"
    )
    address = server.address
    server.set_app(make_sim_app(cluster, exporters, make_api_app(cluster, TOKEN), address))
    server.start()
    try:
        yield Sim(cluster, f"http://{address}")
    finally:
        server.shutdown()


def service_on(sim: Sim, db: Path, clock: Clock, policy: AutoApplyPolicy) -> AdvisorService:
    """The advisor service reading every simulated node and acting through the simulator's
    resource-manager API, its automatic loop on.
    """

    def factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
        return HttpResourceManager(f"{sim.url}/api/v1", TOKEN, timeout=5)

    service = AdvisorService(
        ScrapeLoader(sim_targets(sim.url, timeout=5), timeout=5),
        build(None),
        AnalysisSettings(Window.parse("10m")),
        manager_factory=factory,
        backend_name="sim",
        audit=AuditLog(db),
        outcomes=OutcomeLog(db),
        rule=VerificationRule(verify_after_seconds=VERIFY_AFTER),
        actor="tester@host",
        clock=clock,
    )
    service.auto_apply = AutoApplier(policy, service.acting, DecisionLog(db), clock)
    return service


def analyse(service: AdvisorService, sim: Sim) -> None:
    """One analysis over a fresh scrape of every simulated node (a scrape loader reads its
    targets once, so each analysis gets its own, as each ``advise --sim`` run does).
    """
    service.backend = ScrapeLoader(sim_targets(sim.url, timeout=5), timeout=5)
    service.analyse_once()


def test_the_loop_rehearses_applies_and_verifies_on_the_simulator(tmp_path: Path) -> None:
    clock = Clock()
    policy = AutoApplyPolicy(min_confidence=0.5, per_node=5)
    with simulator(tmp_path) as sim:
        before = sim.cluster.workload(WORKLOAD).allocation
        assert before is not None and before.mems == [1]
        service = service_on(sim, tmp_path / "audit.sqlite", clock, policy)
        assert service.auto_apply is not None

        analyse(service, sim)
        assert service.report is not None
        [rec] = [r for r in service.report.recommendations if r.target.workload == WORKLOAD]
        [rehearsal] = service.auto_apply.decisions.recent()
        assert (rehearsal.recommendation_id, rehearsal.decision) == (rec.id, "dry-run")
        assert sim.cluster.workload(WORKLOAD).allocation == before  # nothing sent yet

        clock.now += 60
        sim.cluster.advance(60)
        analyse(service, sim)
        applied = service.auto_apply.decisions.recent(1)[0]
        assert (applied.recommendation_id, applied.decision) == (rec.id, "applied"), applied
        sim.cluster.advance(60)  # the simulated page migration finishes
        after = sim.cluster.workload(WORKLOAD).allocation
        assert after is not None and after.mems == [0]
        rows = service.audit.entries(rec.id)
        assert [(r.actor, r.backend) for r in rows] == [("auto-apply via tester@host", "sim")]

        clock.now += VERIFY_AFTER + 1
        sim.cluster.advance(VERIFY_AFTER)
        analyse(service, sim)
        verification = service.outcomes.get(rec.id)
        assert verification is not None
        assert verification.verdict == Verdict.PAID, verification
        assert verification.detail.startswith("remote share 100% -> 0%"), verification.detail
