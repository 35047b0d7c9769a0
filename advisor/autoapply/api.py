"""The automatic loop's routes in the advisor service's API.

::

    GET  /api/v1/auto-apply                the loop's state, policy and latest decisions
    POST /api/v1/auto-apply/stop           the kill switch: stop at once (bearer token)
    POST /api/v1/auto-apply/resume         resume after a stop (bearer token)

A stop returns once the action under way, if any, has finished: nothing starts after it.
It is kept in the audit database, so a restarted service stays stopped until resumed; the
kill-switch file stops the loop whatever the API says. Without ``--auto-apply`` every
route answers 404.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apiflask import APIFlask
from pydantic import BaseModel, Field

from toposcope.advisor import api_models as models
from toposcope.advisor.acting import ServiceError
from toposcope.advisor.api_errors import error_responses
from toposcope.advisor.api_routes import USER_EXAMPLE, View, service_of_app
from toposcope.advisor.autoapply.loop import AutoApplier
from toposcope.advisor.service import AdvisorService
from toposcope.auth.bearer import BearerAuth
from toposcope.report.advisor_api import STRICT

PREFIX = "/api/v1/auto-apply"
#: the most decisions one answer lists
MAX_DECISIONS = 500


class AutoDecision(BaseModel):
    """One decision of the loop."""

    model_config = STRICT

    at: float = Field(description="Unix seconds")
    recommendation_id: str
    kind: str
    node: str
    workload: str
    group: str = Field(description="the namespace or Slurm account it counts against")
    decision: str = Field(description="applied, dry-run, would-apply, skipped or failed")
    reason: str
    code: str = Field(description="a skip's reason code (toposcope_advisor_auto_skipped_total)")


class AutoPolicy(BaseModel):
    """The limits the loop runs under."""

    model_config = STRICT

    source: str
    kinds: list[str]
    min_confidence: float
    min_gain: float
    max_risk: str
    per_node: int
    per_namespace: int
    per_hour: int
    cooldown_seconds: float
    blackouts: list[str]
    dry_run_first: bool
    dry_run_only: bool
    kill_switch_file: str | None


class AutoApplyAnswer(BaseModel):
    """The loop's state and its latest decisions, newest first."""

    model_config = STRICT

    active: bool = Field(description="whether it may apply now")
    stopped: str | None = Field(description="why it is stopped (kill switch), if it is")
    blackout: str | None = Field(description="the blackout window open now, if any")
    last_tick: float | None
    last_state: str
    policy: AutoPolicy
    decisions: list[AutoDecision]


class AutoQuery(BaseModel):
    """How many decisions to list."""

    model_config = STRICT

    limit: int = Field(100, ge=1, le=MAX_DECISIONS)


def _loop(service: AdvisorService) -> AutoApplier:
    if service.auto_apply is None:
        raise ServiceError("automatic apply is off (start the service with --auto-apply)", 404)
    return service.auto_apply


def _answer(auto: AutoApplier, limit: int = 100) -> dict[str, Any]:
    return {**auto.status(), "decisions": auto.recent(limit)}


def register_auto_apply(app: APIFlask, auth: BearerAuth) -> None:
    """Add the loop's routes to ``app`` (changes guarded by ``auth``)."""

    @app.get(PREFIX)
    @app.input(AutoQuery, location="query", arg_name="query")
    @app.output(AutoApplyAnswer)
    @app.doc(operation_id="getAutoApply", responses=error_responses(404))
    def auto_apply(query: AutoQuery) -> dict[str, Any]:
        """The automatic loop's state, its policy and its latest decisions."""
        return _answer(_loop(service_of_app()), query.limit)

    def change(action: str, summary: str) -> Callable[[View], View]:
        def decorate(view: View) -> View:
            body = app.input(
                models.UserBody, location="json", arg_name="body", example=USER_EXAMPLE
            )
            documented = app.doc(
                operation_id=f"{action}AutoApply",
                summary=summary,
                security="BearerAuth",
                responses=error_responses(401, 403, 404, 413),
            )
            answered = app.output(AutoApplyAnswer)(documented(auth.required(body(view))))
            routed: View = app.post(f"{PREFIX}/{action}")(answered)
            return routed

        return decorate

    @change("stop", "Stop the automatic loop at once")
    def stop_auto_apply(body: models.UserBody) -> dict[str, Any]:
        """The kill switch: no automatic action starts once this answers (kept across
        restarts until a resume).
        """
        auto = _loop(service_of_app())
        auto.stop(body.user or "the API", "stopped through the API")
        return _answer(auto)

    @change("resume", "Resume the automatic loop")
    def resume_auto_apply(body: models.UserBody) -> dict[str, Any]:
        """Resume after a stop (the kill-switch file, while it exists, still stops it)."""
        auto = _loop(service_of_app())
        auto.resume(body.user or "the API")
        return _answer(auto)
