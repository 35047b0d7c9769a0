"""The advisor as a service: periodic analysis, and applying and reverting on request.

:class:`AdvisorService` runs the same analysis as ``toposcope advise`` (loaders -> model ->
policies -> report) every ``interval`` seconds and keeps the latest :class:`Analysis`;
applies and reverts its recommendations through :class:`~toposcope.advisor.acting.Acting`
(dry-run unless a resource manager is configured); and has each analysis check what applied
changes did (:class:`~toposcope.advisor.verifier.Verifier`), reverting harmful ones. The
audit log is the truth across restarts: unresolved intents are settled at start-up, ages and
verifications are read back from the same SQLite file.

Several replicas can share one audit log (``--leader-elect``,
:mod:`toposcope.advisor.leader_election`): all of them analyse and answer reads, only the
leader applies, reverts and verifies. A replica that becomes the leader first settles the
intents its predecessor left without a result (:meth:`AdvisorService.take_over`); until then,
and on a standby, an apply or revert is refused with 503 naming the leader.

What serves it: its own metrics are :mod:`toposcope.advisor.service_metrics`, its HTTP API
(``/metrics``, ``/api/v1/...``) is :mod:`toposcope.advisor.api`, and
``toposcope advisor serve`` (:mod:`toposcope.advisor.serve_cli`) starts both.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from toposcope.advisor.acting import Acting, ManagerFactory, ServiceError
from toposcope.advisor.applying import Outcome
from toposcope.advisor.applying.applier import DEFAULT_WAIT_SECONDS
from toposcope.advisor.audit import AuditEntry, AuditLog
from toposcope.advisor.autoapply.loop import AutoApplier
from toposcope.advisor.autoapply.metrics import auto_exposition
from toposcope.advisor.calibration import calibration_from
from toposcope.advisor.errors import AdvisorConnectionError, AdvisorError
from toposcope.advisor.job_deadlines import load_deadlines
from toposcope.advisor.leader_election import LeaderElector
from toposcope.advisor.loaders.base import MetricsBackend, Window
from toposcope.advisor.memory_matrix import MemoryOption
from toposcope.advisor.model import ClusterModel, pending_from
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule
from toposcope.advisor.p2p_matrix import P2pOption
from toposcope.advisor.policies import PLACING, Policy
from toposcope.advisor.progress_metrics import ProgressMetric
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.advisor.runner import advise, load_model
from toposcope.advisor.service_metrics import ServiceFigures, exposition
from toposcope.advisor.verifier import Verifier
from toposcope.errors import ConfigError, SourceError, UsageError
from toposcope.report.recommendation import Recommendation, Report
from toposcope.rm import ResourceManagerError

LOG = logging.getLogger("toposcope.advisor.service")


@dataclass(frozen=True)
class AnalysisSettings:
    """What one analysis reads: the window, the selector, the node label, the minimum gain,
    the measured GPU-pair bandwidths (``--p2p-bandwidth``) and memory bandwidths
    (``--memory-bandwidth``), the job deadline file
    (``--job-deadlines``; read again by every analysis, so that an edited file counts).
    """

    window: Window
    selector: str = ""
    node_label: str = "auto"
    min_gain: float = 0.05
    p2p: tuple[P2pOption, ...] = ()
    memory: tuple[MemoryOption, ...] = ()
    deadlines_file: str = ""


@dataclass(frozen=True)
class Analysis:
    """The latest completed analysis: its report, the model it came from, and since when
    (Unix seconds) each of its recommendations has been open.
    """

    report: Report
    model: ClusterModel
    first_seen: Mapping[str, float]


class AdvisorService:
    """The advisor service (see the module docstring).

    ``manager_factory`` builds the resource manager for a call (``backend_name`` names it in
    the audit log; ``dry-run`` records nothing). ``clock`` gives Unix seconds (tests pass
    their own). ``wait_seconds`` bounds how long a revert waits for running actions.
    ``progress_metrics`` are the ``--progress-metric`` settings moved and placed jobs are
    judged by.
    """

    def __init__(
        self,
        backend: MetricsBackend,
        policies: Sequence[Policy[Any]],
        settings: AnalysisSettings,
        *,
        manager_factory: ManagerFactory,
        backend_name: str,
        audit: AuditLog,
        outcomes: OutcomeLog,
        rule: VerificationRule,
        actor: str,
        clock: Callable[[], float] = time.time,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        progress_metrics: Sequence[ProgressMetric] = (),
    ) -> None:
        self.backend = backend
        self.policies = list(policies)
        self.settings = settings
        self.audit = audit
        self.outcomes = outcomes
        self.clock = clock
        probe = ProgressProbe(backend, settings.window, progress_metrics)
        self.acting = Acting(
            manager_factory=manager_factory,
            backend_name=backend_name,
            audit=audit,
            outcomes=outcomes,
            actor=actor,
            known_nodes=self._model_nodes,
            clock=clock,
            wait_seconds=wait_seconds,
            probe=probe,
        )
        self.verifier = Verifier(audit, outcomes, rule, self.acting.revert_harmful, probe)
        self._state_lock = threading.Lock()
        self.report: Report | None = None
        self.model: ClusterModel | None = None
        self.first_seen: dict[str, float] = {}
        self.last_success: float | None = None
        self.last_duration: float | None = None
        self.last_error = ""
        self.analyses: Counter[str] = Counter()
        self.series_dropped: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading = threading.Event()
        self._leading.set()
        self.election: LeaderElector | None = None
        #: the automatic loop (``--auto-apply``), ticked after each analysis on the leader
        self.auto_apply: AutoApplier | None = None

    def _model_nodes(self) -> list[str]:
        with self._state_lock:
            model = self.model
        return sorted(model.nodes) if model is not None else []

    # -- acting ----------------------------------------------------------------------------

    def recover(self) -> list[AuditEntry]:
        """Settle intents an earlier run left without a result (the audit log is the truth)."""
        return self.acting.recover()

    # -- leading ---------------------------------------------------------------------------

    def campaign(self, election: LeaderElector) -> None:
        """Act only while ``election`` (not started yet) makes this replica the leader; its
        callbacks must be :meth:`take_over` and :meth:`step_down`.
        """
        self.election = election
        self._leading.clear()

    @property
    def leading(self) -> bool:
        """Whether this replica acts (the leader, past its take-over, or the only one)."""
        return self._leading.is_set()

    def take_over(self) -> list[AuditEntry]:
        """Become the replica that acts: settle every intent the previous leader left
        without a result (asking the resource manager what became of it), then accept
        applies and reverts. The rows settled.
        """
        settled = self.recover()
        self._leading.set()
        LOG.info("leading: applying and reverting (%d unfinished action(s) settled)", len(settled))
        return settled

    def step_down(self) -> None:
        """Stop acting (the lock is lost, or the service stops): applies and reverts are
        refused from now on; returns once the call under way, if any, has finished.
        """
        self._leading.clear()
        self.acting.wait_idle()
        LOG.info("not leading: applies and reverts are refused")

    def _require_leading(self) -> None:
        """Refuse a change on a standby: 503 naming the leader, with ``Retry-After``."""
        if self._leading.is_set():
            return
        election = self.election
        leader = election.holder() if election is not None else ""
        if election is not None and election.leading:
            message = "this replica is settling what the previous leader left; try again shortly"
        else:
            message = f"this replica is a standby; the leader is {leader or 'not known yet'}"
        retry = election.settings.retry_after if election is not None else 1
        raise ServiceError(
            message, 503, {"leader": leader or None}, headers={"Retry-After": str(retry)}
        )

    def latest(self) -> Analysis:
        """The latest analysis (:class:`ServiceError` 503 before the first one finished,
        naming the last error).
        """
        with self._state_lock:
            report, model, error = self.report, self.model, self.last_error
            first_seen = dict(self.first_seen)
        if report is None or model is None:
            raise ServiceError(f"no analysis has completed yet ({error or None})", 503)
        return Analysis(report, model, first_seen)

    def recommendation(self, rec_id: str) -> Recommendation:
        """The recommendation ``rec_id`` of the latest report (:class:`ServiceError` 404/503)."""
        with self._state_lock:
            report = self.report
        if report is None:
            raise ServiceError("no analysis has completed yet", 503)
        rec = report.find(rec_id)
        if rec is None:
            raise ServiceError(
                f"no recommendation {rec_id!r} in the latest report (what was applied under "
                f"it, if anything, is in /api/v1/audit?recommendation={rec_id})",
                404,
            )
        return rec

    def apply(self, rec_id: str, user: str | None = None) -> tuple[Outcome, str]:
        """Apply one recommendation of the latest report; the outcome and any dry-run calls.

        ``user`` is who asked (recorded in the audit log). An applied recommendation of a
        verified kind starts its verification.
        """
        self._require_leading()
        rec = self.recommendation(rec_id)
        with self._state_lock:
            model = self.model
        return self.acting.apply(rec, model, user)

    def revert(self, rec_id: str, reason: str = "", user: str | None = None) -> list[Outcome]:
        """Revert what was applied under ``rec_id`` (see :meth:`Acting.revert`)."""
        self._require_leading()
        return self.acting.revert(rec_id, reason, user)

    # -- analysing -------------------------------------------------------------------------

    def _pending_jobs(self, model: ClusterModel) -> ClusterModel:
        if self.acting.dry_run or not any(p.name in PLACING for p in self.policies):
            return model
        try:
            manager = self.acting.manager_factory(sorted(model.nodes), io.StringIO())
            workloads = manager.workloads()
        except (ResourceManagerError, AdvisorConnectionError) as exc:
            LOG.warning("no pending jobs to place: %s", exc)
            return model
        return replace(model, pending=pending_from(workloads))

    def analyse_once(self) -> Report | None:
        """One analysis; ``None`` (and the error kept for /metrics and the API) on failure."""
        started = self.clock()
        begin = time.monotonic()
        try:
            model = load_model(
                self.backend,
                self.settings.window,
                selector=self.settings.selector,
                node_label=self.settings.node_label,
                p2p=self.settings.p2p,
                memory=self.settings.memory,
                deadlines=load_deadlines(self.settings.deadlines_file),
            )
            with self._state_lock:
                self.series_dropped.update(model.dropped_series)
            model = self._pending_jobs(model)
            report = advise(
                model,
                self.policies,
                min_gain=self.settings.min_gain,
                started=started,
                calibration=calibration_from(self.outcomes),
            )
        except (AdvisorError, ConfigError, SourceError, UsageError) as exc:
            duration = time.monotonic() - begin
            with self._state_lock:
                self.last_duration = duration
                self.last_error = str(exc)
                self.analyses["failure"] += 1
            LOG.error("analysis failed: %s", exc)
            return None
        duration = time.monotonic() - begin
        seen = self.outcomes.first_seen((r.id for r in report.recommendations), started)
        with self._state_lock:
            self.report = report
            self.model = model
            self.first_seen = seen
            self.last_duration = duration
            self.last_success = self.clock()
            self.last_error = ""
            self.analyses["success"] += 1
        if self.leading:  # a standby neither judges nor reverts: the leader does
            self.acting.settle_running()
            self.verifier.verify(model, self.clock())
            if self.auto_apply is not None:
                self.auto_apply.tick(report, model, self.clock())
        LOG.info("analysis: %d recommendation(s) in %.2fs", len(report.recommendations), duration)
        return report

    # -- the loop --------------------------------------------------------------------------

    def run_forever(self, interval: float) -> None:
        """Analyse every ``interval`` seconds until :meth:`stop` (the first one at once)."""
        while not self._stop.is_set():
            self.analyse_once()
            self._stop.wait(interval)

    def start(self, interval: float) -> None:
        """Run :meth:`run_forever` in a daemon thread."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run_forever, args=(interval,), daemon=True, name="advisor-analysis"
        )
        self._thread.start()

    @property
    def running(self) -> bool:
        """True while the analysis thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop the analysis thread (after the analysis under way, if any)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    # -- what it reports -------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether an analysis has completed (the service has a report to answer with)."""
        with self._state_lock:
            return self.report is not None

    def first_seen_of(self, rec_id: str) -> float | None:
        """Since when (Unix seconds) the recommendation ``rec_id`` has been open, if it is."""
        with self._state_lock:
            return self.first_seen.get(rec_id)

    def status(self) -> dict[str, Any]:
        """The service's state for the API: last analysis, error, backend."""
        with self._state_lock:
            return {
                "resource_manager": self.acting.backend_name,
                "last_success": self.last_success,
                "last_duration_seconds": self.last_duration,
                "last_error": self.last_error or None,
                "analyses": dict(self.analyses),
            }

    def figures(self) -> ServiceFigures:
        """What ``/metrics`` exports, as of now."""
        with self._state_lock:
            state = (self.report, dict(self.first_seen), self.last_success, self.last_duration)
            analyses = dict(self.analyses)
            dropped = dict(self.series_dropped)
        report, first_seen, last_success, last_duration = state
        return ServiceFigures(
            now=self.clock(),
            report=report,
            first_seen=first_seen,
            last_success=last_success,
            last_duration=last_duration,
            analyses=analyses,
            actions=dict(self.acting.counts),
            verdicts=[(v.kind, v.verdict) for v in self.outcomes.all()],
            series_dropped=dropped,
            leader=self.leading,
        )

    def metrics_text(self) -> bytes:
        """The ``toposcope_advisor_*`` families in the Prometheus text format."""
        text = exposition(self.figures())
        if self.auto_apply is not None:
            text += auto_exposition(self.auto_apply, self.clock())
        return text
