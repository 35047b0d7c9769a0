"""The routes of the advisor service's HTTP API (see :mod:`toposcope.advisor.api`).

Each view turns one call of :class:`~toposcope.advisor.service.AdvisorService` into its
answer: the JSON routes return plain data that APIFlask builds through the route's answer
model (:mod:`toposcope.report.advisor_api`; the requests' are in
:mod:`toposcope.advisor.api_models`), and raise what the service refuses for
:mod:`toposcope.advisor.api_errors` to answer. ``/metrics``, the health checks and the
landing page are served beside the API and left out of its document.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from apiflask import APIFlask
from flask import Response, current_app
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, TypeAdapter, ValidationError

from toposcope import __version__
from toposcope.advisor import api_models as models
from toposcope.advisor.acting import ServiceError
from toposcope.advisor.api_errors import answer_of, error_responses, json_answer
from toposcope.advisor.applying.applier import REVERT_DONE
from toposcope.advisor.audit import (
    IN_PROGRESS,
    PARTIAL,
    REVERTED,
    UNSETTLED,
    AuditEntry,
    recommendation_state,
)
from toposcope.advisor.gpu_sets import place
from toposcope.advisor.service import AdvisorService
from toposcope.auth.bearer import BearerAuth
from toposcope.report import advisor_api as answers
from toposcope.report.advisor_api import Outcome
from toposcope.serving.selfmetrics import daemon_registry

API_PREFIX = "/api/v1"
SECURITY_SCHEME = "BearerAuth"
#: results an apply answers 200 for
APPLY_OK = frozenset({"applied", "dry-run", "skipped"})
#: where an app keeps the service its views answer for (``app.extensions``)
SERVICE_KEY = "toposcope.advisor.service"
TEXT = "text/plain; charset=utf-8"
USER_EXAMPLE = {"user": "alice@example.org"}

View = Callable[..., Any]
LOG = logging.getLogger("toposcope.advisor.api")
_OPEN_RECOMMENDATION = TypeAdapter(answers.OpenRecommendation)


def answerable(recommendations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recommendations that fit the list's answer model; each one that does not is
    logged and left out, so that one bad recommendation cannot fail the list for everyone.
    """
    kept = []
    for rec in recommendations:
        try:
            _OPEN_RECOMMENDATION.validate_python(rec)
        except ValidationError as exc:
            LOG.error(
                "recommendation %r left out of the list: it does not fit the API's answer: %s",
                str(rec.get("id", ""))[:80],
                " ".join(line.strip() for line in str(exc).splitlines()[1:3]),
            )
            continue
        kept.append(rec)
    return kept


def service_of_app() -> AdvisorService:
    """The service of the app answering the current request."""
    service: AdvisorService = current_app.extensions[SERVICE_KEY]
    return service


def outcome_dict(outcome: Outcome) -> dict[str, Any]:
    """An outcome (:class:`~toposcope.report.advisor_api.Outcome`) as its answer's JSON."""
    return asdict(outcome)


def entry_dict(entry: AuditEntry) -> dict[str, Any]:
    """An audit row as its answer's JSON, with its state."""
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


def register_operations(app: APIFlask) -> None:
    """``/metrics``, the health checks and the landing page: not part of the JSON API."""
    own = daemon_registry()

    @app.get("/metrics")
    @app.doc(hide=True)
    def metrics() -> Response:
        """The service's metrics and the process's own (``process_*``, build info)."""
        text = service_of_app().metrics_text() + generate_latest(own)
        return Response(text, content_type=CONTENT_TYPE_LATEST)

    @app.get("/-/healthy")
    @app.doc(hide=True)
    def healthy() -> Response:
        """Liveness: the process answers."""
        return Response("OK\n", content_type=TEXT)

    @app.get("/-/ready")
    @app.doc(hide=True)
    def ready() -> Response:
        """Readiness: an analysis has completed, so the API has a report to answer with."""
        if service_of_app().ready:
            return Response("OK\n", content_type=TEXT)
        return Response("no analysis yet\n", 503, content_type=TEXT)

    @app.get("/")
    @app.doc(hide=True)
    def landing() -> Response:
        """A page linking what the service serves."""
        page = (
            "<!doctype html><html><head><title>toposcope advisor</title></head><body>"
            f"<h1>toposcope advisor {html.escape(__version__)}</h1>"
            '<p><a href="metrics">/metrics</a>, '
            '<a href="api/v1/recommendations">/api/v1/recommendations</a>, '
            '<a href="api/v1/audit">/api/v1/audit</a>, '
            '<a href="api/v1/openapi.json">/api/v1/openapi.json</a></p></body></html>'
        )
        return Response(page, content_type="text/html; charset=utf-8")


def register_reads(app: APIFlask) -> None:
    """The open routes: the report, one recommendation, the audit log, placements."""

    @app.get(f"{API_PREFIX}/recommendations")
    @app.output(answers.RecommendationsAnswer)
    @app.doc(operation_id="listRecommendations", responses=error_responses(503))
    def list_recommendations() -> dict[str, Any]:
        """The latest report, each recommendation with the time it was first seen."""
        service = service_of_app()
        latest = service.latest()
        data = latest.report.to_dict()
        for rec in data["recommendations"]:
            rec["first_seen"] = latest.first_seen.get(rec["id"])
        data["recommendations"] = answerable(data["recommendations"])
        data["service"] = service.status()
        return data

    @app.get(f"{API_PREFIX}/recommendations/<rec_id>")
    @app.output(answers.OneRecommendationAnswer)
    @app.doc(operation_id="getRecommendation", responses=error_responses(404, 503))
    def get_recommendation(rec_id: str) -> dict[str, Any]:
        """One recommendation of the latest report, its state, audit rows and verification."""
        service = service_of_app()
        rec = service.recommendation(rec_id)
        if not answerable([rec.to_dict()]):
            raise ServiceError(
                f"recommendation {rec_id!r} names something the API does not serve "
                "(see the advisor's log)",
                404,
            )
        entries = service.audit.entries(rec_id)
        verification = service.outcomes.get(rec_id)
        return {
            **rec.to_dict(),
            "first_seen": service.first_seen_of(rec_id),
            "state": recommendation_state(entries),
            "audit": [entry_dict(e) for e in entries],
            "verification": verification.to_dict() if verification else None,
        }

    @app.get(f"{API_PREFIX}/audit")
    @app.input(models.AuditQuery, location="query", arg_name="query")
    @app.output(answers.AuditAnswer)
    @app.doc(operation_id="getAudit")
    def audit(query: models.AuditQuery) -> dict[str, Any]:
        """The audit log and the verifications, of one recommendation when it is named."""
        service = service_of_app()
        rec_id = query.recommendation or None
        verifications = service.outcomes.all()
        if rec_id is not None:
            verifications = [v for v in verifications if v.recommendation_id == rec_id]
        return {
            "actions": [entry_dict(e) for e in service.audit.entries(rec_id)],
            "verifications": [v.to_dict() for v in verifications],
        }

    @app.get(f"{API_PREFIX}/placement")
    @app.input(models.PlacementQuery, location="query", arg_name="query")
    @app.output(answers.PlacementAnswer)
    @app.doc(operation_id="rankPlacements", responses=error_responses(404, 503))
    def placement(query: models.PlacementQuery) -> dict[str, Any]:
        """The best free GPU sets for a job of ``gpus`` GPUs over the latest model."""
        service = service_of_app()
        model = service.latest().model
        if query.node is not None and query.node not in model.nodes:
            known = ", ".join(sorted(model.nodes)) or "none"
            raise ServiceError(f"node {query.node!r} has no GPU series (known nodes: {known})", 404)
        options = place(model, query.gpus, query.node, top=query.top)
        return {
            "gpus": query.gpus,
            "node": query.node,
            "placements": [{**p.to_dict(), "link_factor": p.factor()} for p in options],
            "service": service.status(),
        }


def _change(
    app: APIFlask,
    auth: BearerAuth,
    action: str,
    answer: type[BaseModel],
    description: str,
    responses: dict[int | str, Any],
) -> Callable[[View], View]:
    """The decorators of a guarded ``POST .../{rec_id}/ACTION``: the route, its answer and
    documented ``responses`` besides the ones every change has, the bearer check, then the
    optional ``{"user": NAME}`` body (checked after the token, so that an unauthenticated
    client learns nothing about it).
    """

    def decorate(view: View) -> View:
        body = app.input(models.UserBody, location="json", arg_name="body", example=USER_EXAMPLE)
        documented = app.doc(
            operation_id=f"{action}Recommendation",
            security=SECURITY_SCHEME,
            responses={**error_responses(401, 403, 404, 413), **responses},
        )
        guarded = documented(auth.required(body(view)))
        answered = app.output(answer, description=description)(guarded)
        routed: View = app.post(f"{API_PREFIX}/recommendations/<rec_id>/{action}")(answered)
        return routed

    return decorate


def register_changes(app: APIFlask, auth: BearerAuth) -> None:
    """The guarded routes: apply and revert."""

    @_change(
        app,
        auth,
        "apply",
        answers.ApplyAnswer,
        "applied, dry-run or skipped",
        {
            **error_responses(503),
            409: answer_of(
                "the apply failed (its outcome), an earlier call of it is still running "
                "(in_progress with its unsettled audit rows), or the audit log refused",
                "AppliedOutcome",
                "InProgress",
                "Error",
            ),
            502: answer_of(
                "the resource manager could not be reached (an unknown outcome, or an error)",
                "AppliedOutcome",
                "Error",
            ),
        },
    )
    def apply(rec_id: str, body: models.UserBody) -> Any:
        """Apply one recommendation of the latest report (dry-run unless the service has a
        resource manager); an applied pin or memory migration is verified later.
        """
        service = service_of_app()
        outcome, calls = service.apply(rec_id, body.user)
        if outcome.result == IN_PROGRESS:
            busy = [entry_dict(e) for e in service.audit.entries(rec_id) if e.state in UNSETTLED]
            answer = {"error": outcome.detail, "state": IN_PROGRESS, "entries": busy}
            return json_answer(answers.InProgress, answer, 409)
        status = 200 if outcome.result in APPLY_OK else 409
        if outcome.result == "unknown":
            status = 502
        return {**outcome_dict(outcome), "dry_run_calls": calls.splitlines()}, status

    @_change(
        app,
        auth,
        "revert",
        answers.RevertAnswer,
        "everything it applied is undone",
        {
            **error_responses(503),
            202: answer_of("something is still running: revert again later", "RevertAnswer"),
            409: answer_of(
                "a revert failed (the outcomes), nothing was applied, or no resource manager",
                "RevertAnswer",
                "Error",
            ),
            502: answer_of(
                "an outcome is unknown, or the resource manager is unreachable",
                "RevertAnswer",
                "Error",
            ),
        },
    )
    def revert(rec_id: str, body: models.UserBody) -> Any:
        """Revert what was applied under a recommendation (or one request id)."""
        outcomes = service_of_app().revert(rec_id, user=body.user)
        done = all(o.result in REVERT_DONE for o in outcomes)
        answer = {
            "state": REVERTED if done else PARTIAL,
            "outcomes": [outcome_dict(o) for o in outcomes],
        }
        return answer, revert_status(outcomes)
