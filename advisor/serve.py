"""The advisor as a service: periodic analysis, its own /metrics, and an HTTP JSON API.

:class:`AdvisorService` runs the same analysis as ``toposcope advise`` (loaders -> model ->
policies -> report) every ``interval`` seconds, keeps the latest :class:`Report`, applies
and reverts recommendations on request through the one :class:`Applier` (dry-run unless a
resource manager is configured), and checks what applied changes did
(:mod:`toposcope.advisor.outcomes`), reverting harmful ones. The audit log is the truth
across restarts: unresolved intents are settled at start-up, ages and verifications are read
back from the same SQLite file.

Routes of :meth:`AdvisorService.wsgi_app`::

    GET  /metrics                               toposcope_advisor_* (Prometheus text)
    GET  /api/v1/recommendations                the latest report (run, recommendations, notes)
    GET  /api/v1/recommendations/{id}           one recommendation, its audit rows, verdict
    POST /api/v1/recommendations/{id}/apply     apply it (bearer token)
    POST /api/v1/recommendations/{id}/revert    revert it (bearer token)
    GET  /api/v1/audit[?recommendation=ID]      the audit log and the verifications
    GET  /api/v1/placement?gpus=N[&node=NAME][&top=K]
                                                the best GPU sets for a job of N GPUs over the
                                                latest model (what ``toposcope place`` ranks)
    GET  /-/healthy, /-/ready                   liveness; ready once an analysis finished
    GET  /                                      a landing page

Reads are open; ``POST`` needs ``Authorization: Bearer <token>`` (401 without it, 403 with
a wrong one, 403 for everyone when the service was started without a token). A ``POST`` may
carry a JSON body ``{"user": "NAME"}`` (1-128 letters, digits or ``._@+-``): the audit log then
records the actor as ``NAME via <service actor>``; a body that is not such an object answers
400, one over :data:`MAX_BODY_BYTES` 413. Every error is JSON ``{"error": "..."}``, an
unexpected one a 500 without internals (the traceback goes to the service's log).

An apply answers 200 for ``applied``, ``dry-run`` and ``skipped``, 409 for ``failed``, 502
when the resource manager could not be reached, and 409
``{"error": ..., "state": "in_progress", "entries": [...]}`` while an earlier call of it is
still running (``entries``: its unsettled audit rows). A revert answers
``{"state": "reverted" | "partial", "outcomes": [...]}`` (one outcome per action, see
:class:`~toposcope.advisor.actuators.applier.Outcome`): 200 when everything was undone, 202
when something is still running after the bounded wait (revert again later), 409 when a
revert failed, 502 when an outcome is unknown.
"""

from __future__ import annotations

import hmac
import html
import io
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TextIO
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import Metric

from toposcope import __version__
from toposcope.advisor.actuators import Applier, DryRunResourceManager, Outcome
from toposcope.advisor.actuators.applier import DEFAULT_WAIT_SECONDS, REVERT_DONE
from toposcope.advisor.audit import (
    IN_PROGRESS,
    PARTIAL,
    REVERTED,
    UNSETTLED,
    AuditEntry,
    AuditLog,
    AuditStateError,
    recommendation_state,
)
from toposcope.advisor.errors import AdvisorConnectionError, AdvisorError
from toposcope.advisor.loaders.base import MetricsBackend, Window
from toposcope.advisor.model import ClusterModel, PendingWorkload
from toposcope.advisor.outcomes import (
    VERIFIED_KINDS,
    OutcomeLog,
    Verdict,
    VerificationRule,
    baseline,
    find_workload,
    judge,
    measure,
)
from toposcope.advisor.policies import Policy
from toposcope.advisor.policies.gpu_placement import link_factor, place
from toposcope.advisor.recommendations import Recommendation, RecommendationKind, Report, Severity
from toposcope.advisor.runner import advise, load_model
from toposcope.catalogue import spec
from toposcope.errors import ConfigError, SourceError, UsageError
from toposcope.httpserver import HttpServer, WsgiApp
from toposcope.jsonbody import JsonBodyError, parse_json_body
from toposcope.names import InvalidNameError, check_user_name
from toposcope.resources import ResourceManager, ResourceManagerError

LOG = logging.getLogger("toposcope.advisor.serve")

DEFAULT_PORT = 9849
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
API = "/api/v1"

NO_TOKEN_MESSAGE = (
    "applying and reverting are disabled: this service was started without a token; "
    "configure one with --token-file"
)

#: the resource manager for the nodes a call concerns; dry-run calls are written to the text
ManagerFactory = Callable[[Sequence[str], TextIO], ResourceManager]
StartResponse = Callable[..., Any]

#: results an apply answers 200 for
APPLY_OK = frozenset({"applied", "dry-run", "skipped"})

#: the largest POST body accepted (``{"user": ...}`` needs far less); a larger one answers 413
MAX_BODY_BYTES = 4096


class ServiceError(Exception):
    """A request the service refuses, with the HTTP status and any fields to answer besides
    ``error``.
    """

    def __init__(self, message: str, status: int, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.extra = extra or {}


@dataclass(frozen=True)
class AnalysisSettings:
    """What one analysis reads: the window, the selector, the node label, the minimum gain."""

    window: Window
    selector: str = ""
    node_label: str = "auto"
    min_gain: float = 0.05


def kind_of(recommendation_id: str) -> str:
    """The recommendation kind in an id (``pin-0123abcd4567`` -> ``pin``), or ``unknown``."""
    kind = recommendation_id.rsplit("-", 1)[0]
    return kind if kind in set(RecommendationKind) else "unknown"


class _Families:
    """Adapts a list of families to the collector interface ``generate_latest`` expects."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        """The families."""
        return self.families


class AdvisorService:
    """The advisor service (see the module docstring).

    ``manager_factory`` builds the resource manager for a call (``backend_name`` names it in
    the audit log; ``dry-run`` records nothing). ``clock`` gives Unix seconds (tests pass
    their own). ``wait_seconds`` bounds how long a revert waits for running actions.
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
        token: str | None,
        clock: Callable[[], float] = time.time,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> None:
        self.backend = backend
        self.policies = list(policies)
        self.settings = settings
        self.manager_factory = manager_factory
        self.backend_name = backend_name
        self.dry_run = backend_name == "dry-run"
        self.audit = audit
        self.outcomes = outcomes
        self.rule = rule
        self.actor = actor
        self._token = token.encode() if token is not None else None
        self.clock = clock
        self.wait_seconds = wait_seconds
        self._state_lock = threading.Lock()
        self._act_lock = threading.Lock()
        self.report: Report | None = None
        self.model: ClusterModel | None = None
        self.first_seen: dict[str, float] = {}
        self.last_success: float | None = None
        self.last_duration: float | None = None
        self.last_error = ""
        self.analyses: Counter[str] = Counter()
        self.counts: Counter[tuple[str, str]] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- acting ----------------------------------------------------------------------------

    def actor_for(self, user: str | None) -> str:
        """Who the audit log names: ``USER via <service actor>``, or the service alone."""
        return f"{user} via {self.actor}" if user else self.actor

    def _applier(self, nodes: Sequence[str], out: TextIO, user: str | None = None) -> Applier:
        return Applier(
            self.manager_factory(nodes, out),
            None if self.dry_run else self.audit,
            actor=self.actor_for(user),
            backend=self.backend_name,
            dry_run=self.dry_run,
            max_per_run=1,
            max_per_node=1,
            wait_seconds=self.wait_seconds,
        )

    def _count(self, applier: Applier) -> None:
        for (kind, result), value in applier.counts.items():
            if result != "reverted":  # counted per recommendation by the caller
                self.counts[(kind, result)] += value

    def _nodes(self) -> list[str]:
        with self._state_lock:
            model = self.model
        nodes = set(model.nodes) if model is not None else set()
        nodes |= {e.node for e in self.audit.entries() if e.node}
        return sorted(nodes)

    def recover(self) -> list[AuditEntry]:
        """Settle intents an earlier run left without a result (the audit log is the truth)."""
        if self.dry_run:
            return []
        with self._act_lock:
            applier = self._applier(self._nodes(), io.StringIO())
            try:
                settled = applier.recover()
            except (ResourceManagerError, AdvisorConnectionError) as exc:
                LOG.warning("cannot settle unfinished actions yet: %s", exc)
                return []
        for entry in settled:
            LOG.info("settled %s: %s", entry.request_id, entry.result)
        return settled

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
                f"it, if anything, is in {API}/audit?recommendation={rec_id})",
                404,
            )
        return rec

    def apply(self, rec_id: str, user: str | None = None) -> tuple[Outcome, str]:
        """Apply one recommendation of the latest report; the outcome and any dry-run calls.

        ``user`` is who asked (recorded in the audit log). An applied pin or memory
        migration starts its verification.
        """
        rec = self.recommendation(rec_id)
        with self._state_lock:
            model = self.model
        out = io.StringIO()
        with self._act_lock:
            applier = self._applier(sorted({rec.target.node, *self._nodes()}), out, user)
            try:
                [outcome] = applier.apply([rec])
            finally:
                self._count(applier)
            if outcome.result == "applied" and rec.kind in VERIFIED_KINDS and rec.target.workload:
                self.outcomes.start(rec, baseline(rec, model), self.clock())
        LOG.info("apply %s: %s %s", rec_id, outcome.result, outcome.detail)
        return outcome, out.getvalue()

    def revert(self, rec_id: str, reason: str = "", user: str | None = None) -> list[Outcome]:
        """Revert what was applied under ``rec_id`` (a recommendation or a request id).

        One outcome per action (see :class:`Outcome`); a recommendation counts as reverted,
        and its verification is settled, only once everything it applied is undone.
        """
        if self.dry_run:
            raise ServiceError(
                "revert needs a resource manager (--resource-manager sim, agent or local)", 409
            )
        with self._act_lock:
            applier = self._applier(self._nodes(), io.StringIO(), user)
            try:
                outcomes = applier.revert(rec_id)
            except ConfigError as exc:
                raise ServiceError(str(exc), 409) from exc
            finally:
                self._count(applier)
            for rec in sorted({o.recommendation_id for o in outcomes if o.result == "reverted"}):
                if recommendation_state(self.audit.entries(rec)) != REVERTED:
                    continue
                self.counts[(kind_of(rec), "reverted")] += 1
                verification = self.outcomes.get(rec)
                if verification is not None and verification.verdict == Verdict.PENDING:
                    self.outcomes.settle(
                        rec, Verdict.REVERTED, None, reason or "reverted by request", self.clock()
                    )
        LOG.info("revert %s: %s", rec_id, ", ".join(o.result for o in outcomes))
        return outcomes

    # -- analysing -------------------------------------------------------------------------

    def _pending_jobs(self, model: ClusterModel) -> ClusterModel:
        if self.dry_run or not any(p.name == "gpu-placement" for p in self.policies):
            return model
        try:
            workloads = self.manager_factory(sorted(model.nodes), io.StringIO()).workloads()
        except (ResourceManagerError, AdvisorConnectionError) as exc:
            LOG.warning("no pending jobs for gpu-placement: %s", exc)
            return model
        pending = tuple(
            PendingWorkload(w.name, w.gpus_requested)
            for w in workloads
            if w.state == "pending" and w.gpus_requested > 0
        )
        return replace(model, pending=pending)

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
            )
            model = self._pending_jobs(model)
            report = advise(model, self.policies, min_gain=self.settings.min_gain, started=started)
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
        self.verify(model)
        LOG.info("analysis: %d recommendation(s) in %.2fs", len(report.recommendations), duration)
        return report

    def verify(self, model: ClusterModel) -> None:
        """Judge applied recommendations whose wait is over; revert the harmful ones."""
        now = self.clock()
        for item in self.outcomes.pending():
            if recommendation_state(self.audit.entries(item.recommendation_id)) == REVERTED:
                self.outcomes.settle(
                    item.recommendation_id, Verdict.REVERTED, None, "reverted", now
                )
                continue
            waited = now - item.applied_at
            if waited < self.rule.verify_after_seconds:
                continue
            workload = find_workload(model, item.node, item.workload)
            if workload is None:
                if waited >= self.rule.give_up_seconds:
                    detail = "the workload has had no series since it was changed"
                    self.outcomes.settle(
                        item.recommendation_id, Verdict.UNVERIFIABLE, None, detail, now
                    )
                else:
                    self.outcomes.settle(
                        item.recommendation_id,
                        Verdict.PENDING,
                        None,
                        "the workload has no series in this analysis",
                        now,
                    )
                continue
            measured = measure(model, item.kind, workload, item.target_numa)
            verdict, detail = judge(self.rule, item.baseline, measured)
            if verdict == Verdict.PENDING and waited >= self.rule.give_up_seconds:
                verdict = Verdict.UNVERIFIABLE
            if verdict == Verdict.HARMFUL:
                detail = self._revert_harmful(item.recommendation_id, item.kind, detail)
            self.outcomes.settle(item.recommendation_id, verdict, measured, detail, now)
            LOG.info("verification of %s: %s (%s)", item.recommendation_id, verdict, detail)

    def _revert_harmful(self, rec_id: str, kind: str, detail: str) -> str:
        self.counts[(kind, "harmful")] += 1
        try:
            outcomes = self.revert(rec_id, reason=f"harmful: {detail}")
        except (ServiceError, ResourceManagerError, AdvisorConnectionError) as exc:
            LOG.error("harmful %s could not be reverted: %s", rec_id, exc)
            return f"{detail}; revert failed: {exc}"
        results = ", ".join(f"{o.result} {o.detail}".strip() for o in outcomes)
        done = all(o.result in REVERT_DONE for o in outcomes)
        return f"{detail}; {'reverted' if done else 'revert incomplete'} ({results})"

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

    # -- metrics ---------------------------------------------------------------------------

    def families(self) -> list[Metric]:
        """The ``toposcope_advisor_*`` families as of now."""
        with self._state_lock:
            report = self.report
            first_seen = dict(self.first_seen)
            last_success = self.last_success
            last_duration = self.last_duration
            analyses = Counter(self.analyses)
        now = self.clock()
        recs = report.recommendations if report is not None else ()
        open_recs = spec("toposcope_advisor_recommendations").family()
        by_kind = Counter((str(r.kind), str(r.severity)) for r in recs)
        for kind in RecommendationKind:
            for severity in Severity:
                open_recs.add_metric([str(kind), str(severity)], by_kind[(kind, severity)])
        gain = spec("toposcope_advisor_estimated_gain_ratio").family()
        age = spec("toposcope_advisor_recommendation_age_seconds").family()
        for rec in recs:
            labels = [rec.id, str(rec.kind), rec.target.label()]
            gain.add_metric(labels, rec.estimated_gain)
            age.add_metric(labels, max(0.0, now - first_seen.get(rec.id, now)))
        actions = spec("toposcope_advisor_actions_total").family()
        counts: Counter[tuple[str, str]] = Counter(
            {(str(k), r): 0 for k in RecommendationKind for r in ("failed", "harmful")}
        )
        counts.update(self.counts)
        for (kind_text, result), value in sorted(counts.items()):
            actions.add_metric([kind_text, result], value)
        verdicts = spec("toposcope_advisor_verifications").family()
        by_verdict = Counter(v.verdict for v in self.outcomes.all())
        for verdict in Verdict:
            verdicts.add_metric([str(verdict)], by_verdict[verdict])
        runs = spec("toposcope_advisor_analyses_total").family()
        for result in ("success", "failure"):
            runs.add_metric([result], analyses[result])
        families: list[Metric] = [open_recs, gain, age, actions, verdicts, runs]
        if last_duration is not None:
            duration = spec("toposcope_advisor_analysis_duration_seconds").family()
            duration.add_metric([], last_duration)
            families.append(duration)
        if last_success is not None:
            success = spec("toposcope_advisor_last_success_timestamp_seconds").family()
            success.add_metric([], last_success)
            families.append(success)
        return families

    def metrics_text(self) -> bytes:
        """The families in the Prometheus text format."""
        return generate_latest(_Families(self.families()))

    # -- HTTP ------------------------------------------------------------------------------

    def _authorise(self, environ: dict[str, Any]) -> None:
        if self._token is None:
            raise ServiceError(NO_TOKEN_MESSAGE, 403)
        scheme, _, given = str(environ.get("HTTP_AUTHORIZATION", "")).strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ServiceError("missing Authorization: Bearer <token> header", 401)
        if not hmac.compare_digest(given.strip().encode(), self._token):
            raise ServiceError("the bearer token is not valid for this service", 403)

    def status(self) -> dict[str, Any]:
        """The service's state for the API: last analysis, error, backend."""
        with self._state_lock:
            return {
                "resource_manager": self.backend_name,
                "last_success": self.last_success,
                "last_duration_seconds": self.last_duration,
                "last_error": self.last_error or None,
                "analyses": dict(self.analyses),
            }

    def _recommendations(self) -> dict[str, Any]:
        with self._state_lock:
            report = self.report
            first_seen = dict(self.first_seen)
        if report is None:
            raise ServiceError(
                f"no analysis has completed yet ({self.status()['last_error']})", 503
            )
        data = report.to_dict()
        for rec in data["recommendations"]:
            rec["first_seen"] = first_seen.get(rec["id"])
        data["service"] = self.status()
        return data

    def _one(self, rec_id: str) -> dict[str, Any]:
        rec = self.recommendation(rec_id)
        with self._state_lock:
            first = self.first_seen.get(rec_id)
        verification = self.outcomes.get(rec_id)
        entries = self.audit.entries(rec_id)
        return {
            **rec.to_dict(),
            "first_seen": first,
            "state": recommendation_state(entries),
            "audit": [_entry_dict(e) for e in entries],
            "verification": verification.to_dict() if verification else None,
        }

    def _audit(self, query: dict[str, list[str]]) -> dict[str, Any]:
        chosen = query.get("recommendation") or []
        rec_id = chosen[0] if chosen else None
        verifications = self.outcomes.all()
        if rec_id is not None:
            verifications = [v for v in verifications if v.recommendation_id == rec_id]
        return {
            "actions": [_entry_dict(e) for e in self.audit.entries(rec_id)],
            "verifications": [v.to_dict() for v in verifications],
        }

    def _placement(self, query: dict[str, list[str]]) -> dict[str, Any]:
        def number(name: str, default: int | None) -> int:
            given = (query.get(name) or [""])[0]
            if not given and default is not None:
                return default
            try:
                value = int(given)
            except ValueError:
                raise ServiceError(f"{name} must be a whole number, not {given!r}", 400) from None
            if not 1 <= value <= 1024:
                raise ServiceError(f"{name} must be between 1 and 1024", 400)
            return value

        count = number("gpus", None)
        top = number("top", 5)
        node = (query.get("node") or [""])[0] or None
        with self._state_lock:
            model = self.model
        if model is None:
            raise ServiceError(
                f"no analysis has completed yet ({self.status()['last_error']})", 503
            )
        if node is not None and node not in model.nodes:
            known = ", ".join(sorted(model.nodes)) or "none"
            raise ServiceError(f"node {node!r} has no GPU series (known nodes: {known})", 404)
        options = place(model, count, node, top=top)
        return {
            "gpus": count,
            "node": node,
            "placements": [
                {**p.to_dict(), "link_factor": link_factor(p.worst_link)} for p in options
            ],
            "service": self.status(),
        }

    def _post(self, path: str, environ: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        prefix = f"{API}/recommendations/"
        rec_id, _, action = path.removeprefix(prefix).partition("/")
        if not path.startswith(prefix) or not rec_id or action not in ("apply", "revert"):
            raise ServiceError(f"no route POST {path}", 404)
        self._authorise(environ)
        user = requesting_user(environ)
        if action == "apply":
            outcome, calls = self.apply(rec_id, user)
            if outcome.result == IN_PROGRESS:
                busy = [e for e in self.audit.entries(rec_id) if e.state in UNSETTLED]
                raise ServiceError(
                    outcome.detail,
                    409,
                    {"state": IN_PROGRESS, "entries": [_entry_dict(e) for e in busy]},
                )
            status = 200 if outcome.result in APPLY_OK else 409
            if outcome.result == "unknown":
                status = 502
            return status, {**_outcome_dict(outcome), "dry_run_calls": calls.splitlines()}
        outcomes = self.revert(rec_id, user=user)
        return revert_status(outcomes), {
            "state": REVERTED if all(o.result in REVERT_DONE for o in outcomes) else PARTIAL,
            "outcomes": [_outcome_dict(o) for o in outcomes],
        }

    def _get(self, path: str, environ: dict[str, Any]) -> tuple[int, Any]:
        if path == f"{API}/recommendations":
            return 200, self._recommendations()
        if path.startswith(f"{API}/recommendations/"):
            rec_id = path.removeprefix(f"{API}/recommendations/")
            if rec_id and "/" not in rec_id:
                return 200, self._one(rec_id)
        if path == f"{API}/audit":
            return 200, self._audit(parse_qs(str(environ.get("QUERY_STRING", ""))))
        if path == f"{API}/placement":
            return 200, self._placement(parse_qs(str(environ.get("QUERY_STRING", ""))))
        raise ServiceError(f"no route GET {path}", 404)

    def wsgi_app(self) -> WsgiApp:
        """The service's WSGI application (routes in the module docstring)."""

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            path = str(environ.get("PATH_INFO", "/") or "/")
            method = str(environ.get("REQUEST_METHOD", "GET"))
            if path == "/metrics" and method in ("GET", "HEAD"):
                start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
                return [self.metrics_text()]
            if path == "/-/healthy":
                return _text(start_response, "200 OK", "OK\n")
            if path == "/-/ready":
                with self._state_lock:
                    ready = self.report is not None
                if ready:
                    return _text(start_response, "200 OK", "OK\n")
                return _text(start_response, "503 Service Unavailable", "no analysis yet\n")
            if path == "/":
                start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
                return [_landing()]
            try:
                if method == "POST":
                    status, body = self._post(path, environ)
                elif method in ("GET", "HEAD"):
                    status, body = self._get(path, environ)
                else:
                    raise ServiceError(f"method {method} not allowed", 405)
            except ServiceError as exc:
                return _json(start_response, exc.status, {**exc.extra, "error": str(exc)})
            except ResourceManagerError as exc:
                return _json(start_response, 502, {"error": f"resource manager: {exc}"})
            except AdvisorConnectionError as exc:
                return _json(start_response, 502, {"error": str(exc)})
            except AuditStateError as exc:
                return _json(start_response, 409, {"error": str(exc)})
            except Exception:
                LOG.exception("%s %s failed", method, path)
                error = "internal error; the advisor service's log has the details"
                return _json(start_response, 500, {"error": error})
            return _json(start_response, status, body)

        return app


_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def _json(start_response: StartResponse, status: int, body: Any) -> list[bytes]:
    payload = json.dumps(body, indent=1, sort_keys=True).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))]
    if status == 401:
        headers.append(("WWW-Authenticate", 'Bearer realm="toposcope-advisor"'))
    start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
    return [payload]


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body.encode()]


def _landing() -> bytes:
    return (
        "<!doctype html><html><head><title>toposcope advisor</title></head><body>"
        f"<h1>toposcope advisor {html.escape(__version__)}</h1>"
        '<p><a href="metrics">/metrics</a>, '
        '<a href="api/v1/recommendations">/api/v1/recommendations</a>, '
        '<a href="api/v1/audit">/api/v1/audit</a></p></body></html>'
    ).encode()


def _outcome_dict(outcome: Outcome) -> dict[str, Any]:
    data = asdict(outcome)
    for state in data["states"]:
        state["status"] = str(state["status"])
        state["request"]["kind"] = str(state["request"]["kind"])
    return data


def _entry_dict(entry: AuditEntry) -> dict[str, Any]:
    return {**asdict(entry), "state": entry.state}


def revert_status(outcomes: Sequence[Outcome]) -> int:
    """The HTTP status of a revert: 200 all undone, 409 a revert failed, 502 an outcome is
    unknown, 202 something is still running (revert again later).
    """
    results = {o.result for o in outcomes}
    if results <= REVERT_DONE:
        return 200
    if "failed" in results:
        return 409
    if "unknown" in results:
        return 502
    return 202


def read_body(environ: dict[str, Any]) -> bytes:
    """The request's body, ``b""`` without one (:class:`ServiceError` 400, or 413 when it is
    over :data:`MAX_BODY_BYTES`, whatever server runs the application).
    """
    given = str(environ.get("CONTENT_LENGTH") or "").strip()
    if not given:
        return b""
    if not (given.isascii() and given.isdigit()):
        raise ServiceError(f"invalid Content-Length header: {given[:20]!r}", 400)
    length = int(given)
    if length > MAX_BODY_BYTES:
        raise ServiceError(
            f"the request body has {length} bytes; at most {MAX_BODY_BYTES} are accepted", 413
        )
    return bytes(environ["wsgi.input"].read(length)) if length else b""


def requesting_user(environ: dict[str, Any]) -> str | None:
    """The ``user`` a POST names in its body ``{"user": NAME}``; ``None`` without a body or
    without the field, :class:`ServiceError` 400 for any other body (parsed by the shared,
    depth-bounded :func:`~toposcope.jsonbody.parse_json_body`).
    """
    raw = read_body(environ)
    if not raw.strip():
        return None
    try:
        body = parse_json_body(raw)
    except JsonBodyError as exc:
        raise ServiceError(str(exc), 400) from None
    if not isinstance(body, dict):
        raise ServiceError('the request body must be a JSON object like {"user": "NAME"}', 400)
    unknown = sorted(k for k in body if k != "user")
    if unknown:
        listed = ", ".join(repr(k[:40]) for k in unknown[:5])
        raise ServiceError(
            f"unknown field(s) in the request body: {listed}; only 'user' is accepted", 400
        )
    if "user" not in body:
        return None
    try:
        return check_user_name(body["user"])
    except InvalidNameError as exc:
        raise ServiceError(str(exc), 400) from None


def service_server(app: WsgiApp, listen: str) -> HttpServer:
    """The service's HTTP server on ``listen`` (not yet serving)."""
    return HttpServer(app, listen, thread_name="advisor-http", max_body=MAX_BODY_BYTES)


def dry_run_factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
    """The dry-run resource manager (the default): calls are written to ``out``."""
    return DryRunResourceManager(out)
