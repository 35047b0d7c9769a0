"""A typed client of the advisor service's HTTP API (``toposcope advisor serve``).

Reads (the report, one recommendation, the audit log, a what-if placement) are open;
:meth:`AdvisorClient.apply` and :meth:`AdvisorClient.revert` send the operator's bearer
token, which lives only in the Dash server process and is never sent to the browser, and
the name of the user who asked (``{"user": NAME}``), which the advisor records as the actor.
Failures become :class:`AdvisorError` subclasses whose messages are meant for the page (a
request sent but not answered in time is :class:`AdvisorTimedOut`: not a failure, as the
advisor may still be carrying it out); an answer that is not JSON is reported with its HTTP
status and text. Recommendations and reports are the core's contract
(:mod:`toposcope.report.recommendation`), decoded and checked by its decoder: a report this version
of toposcope cannot read is a clear error, not a guess. Audit rows and placements are the
advisor API's answer types (:mod:`toposcope.report.advisor_api`, the definition the service
answers with), read leniently so that a newer service's added fields do not break the app;
so are verifications (what an applied recommendation did, :class:`Verification`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toposcope.report.advisor_api import (
    ONE_RECOMMENDATION_FIELDS,
    SERVED_RECOMMENDATION_FIELDS,
    SERVICE_FIELDS,
    AuditRow,
    RankedPlacement,
    Verification,
)
from toposcope.report.decoder import decode_recommendation, decode_report
from toposcope.report.recommendation import Recommendation, RecommendationError, Report

DEFAULT_TIMEOUT = 10.0
API = "/api/v1"


class AdvisorError(Exception):
    """The advisor service could not answer; the message is meant for the page."""


class AdvisorUnreachable(AdvisorError):
    """Nothing answers at the advisor URL, or not in time."""


class AdvisorTimedOut(AdvisorUnreachable):
    """The request was sent but no answer came within the client's timeout: the advisor may
    still be carrying it out (an apply waits on the resource manager), so it did not fail.
    """


class AdvisorRefused(AdvisorError):
    """The service answered with an error status (``status``) and message."""

    def __init__(self, message: str, status: int, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = dict(body or {})


class ActionInProgress(AdvisorRefused):
    """The advisor still runs an earlier apply or revert of the recommendation (HTTP 409)."""


class AdvisorBadAnswer(AdvisorError):
    """The answer is not the advisor API's JSON."""


@dataclass(frozen=True)
class AdvisorReport:
    """The advisor's latest report (the core's :class:`Report`) and the service's last error."""

    report: Report
    last_error: str | None

    @property
    def recommendations(self) -> list[Recommendation]:
        """The report's recommendations, highest gain first."""
        return self.report.by_gain()

    @property
    def notes(self) -> tuple[str, ...]:
        """Each note as ``policy: target: reason``."""
        return tuple(f"{n.policy}: {n.target}: {n.reason}" for n in self.report.notes)


@dataclass(frozen=True)
class ActionResult:
    """What an apply or revert call answered: the HTTP status, each result and its detail."""

    status: int
    results: tuple[str, ...]
    details: tuple[str, ...]
    dry_run_calls: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the service answered 200 (applied, dry-run, skipped or all reverted)."""
        return self.status == 200

    @property
    def pending(self) -> bool:
        """True when part of a revert still runs (HTTP 202: revert again later)."""
        return self.status == 202


@dataclass(frozen=True)
class RecommendationDetail:
    """One recommendation as ``GET /recommendations/{id}`` answers it: the recommendation,
    its audit rows, oldest first, and the verification of what applying it did (``None``
    until it is applied).
    """

    recommendation: Recommendation
    audit: tuple[AuditRow, ...]
    verification: Verification | None


@dataclass(frozen=True)
class AuditLog:
    """What ``GET /audit`` answers: the audit rows, oldest first, and the verifications."""

    actions: tuple[AuditRow, ...]
    verifications: tuple[Verification, ...]


@dataclass(frozen=True)
class AdvisorClient:
    """Talks to the advisor service at ``url``; ``token`` authorises apply and revert."""

    url: str
    token: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT

    @property
    def can_act(self) -> bool:
        """Whether apply and revert can be sent (a token is configured)."""
        return bool(self.token)

    def _call(
        self,
        method: str,
        path: str,
        *,
        authorised: bool = False,
        body: Mapping[str, Any] | None = None,
    ) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        data = b"" if method == "POST" else None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        if authorised:
            if not self.token:
                raise AdvisorRefused(
                    "no advisor token: start the app with --advisor-token-file or set "
                    "TOPOSCOPE_ADVISOR_TOKEN to apply or revert",
                    401,
                )
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            f"{self.url.rstrip('/')}{path}",
            data=data,
            method=method,
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, raw = int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            status, raw = int(exc.code), exc.read()
        except TimeoutError as exc:
            raise AdvisorTimedOut(
                f"the advisor at {self.url} did not answer within {self.timeout:g}s"
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise AdvisorUnreachable(
                f"the advisor service is unreachable at {self.url} ({reason}); check --advisor "
                "and that `toposcope advisor serve` runs"
            ) from exc
        try:
            answer = json.loads(raw)
        except ValueError as exc:
            if status >= 400:
                raise AdvisorRefused(
                    f"the advisor answered HTTP {status}: {_text(raw) or 'no detail'}", status
                ) from exc
            raise AdvisorBadAnswer(
                f"{self.url}{path} did not answer JSON (HTTP {status}); is --advisor the "
                "advisor service's base URL?"
            ) from exc
        return status, answer

    def _get(self, path: str) -> Mapping[str, Any]:
        status, body = self._call("GET", path)
        if status != 200:
            message = body.get("error") if isinstance(body, dict) else None
            raise AdvisorRefused(
                f"the advisor answered HTTP {status}: {message or 'no detail'}", status
            )
        if not isinstance(body, dict):
            raise AdvisorBadAnswer(f"{self.url}{path} answered something other than an object")
        return body

    def report(self) -> AdvisorReport:
        """The latest report (:class:`AdvisorRefused` 503 until a first analysis finished)."""
        body = self._get(f"{API}/recommendations")
        service = body.get("service")
        last_error = service.get("last_error") if isinstance(service, dict) else None
        try:
            report = decode_report(
                body, extra=SERVICE_FIELDS, recommendation_extra=SERVED_RECOMMENDATION_FIELDS
            )
        except RecommendationError as exc:
            raise AdvisorBadAnswer(f"the report the advisor sent is malformed: {exc}") from exc
        return AdvisorReport(report, str(last_error) if last_error else None)

    def recommendation(self, rec_id: str) -> tuple[Recommendation, tuple[AuditRow, ...]]:
        """One recommendation of the latest report and its audit rows."""
        detail = self.recommendation_detail(rec_id)
        return detail.recommendation, detail.audit

    def recommendation_detail(self, rec_id: str) -> RecommendationDetail:
        """One recommendation of the latest report, its audit rows and its verification."""
        body = self._get(f"{API}/recommendations/{urllib.parse.quote(rec_id, safe='')}")
        try:
            rec = decode_recommendation(body, extra=ONE_RECOMMENDATION_FIELDS)
        except RecommendationError as exc:
            raise AdvisorBadAnswer(
                f"the recommendation the advisor sent is malformed: {exc}"
            ) from exc
        audit = body.get("audit")
        if not isinstance(audit, list | None):
            raise AdvisorBadAnswer("the advisor sent audit rows that are not a list")
        verification = body.get("verification")
        return RecommendationDetail(
            rec,
            _audit_rows(audit or ()),
            _verifications([verification])[0] if verification is not None else None,
        )

    def audit(self, rec_id: str | None = None) -> tuple[AuditRow, ...]:
        """The audit log (of one recommendation, when given), oldest first."""
        return self.audit_log(rec_id).actions

    def audit_log(self, rec_id: str | None = None) -> AuditLog:
        """The audit log and the verifications (of one recommendation, when given)."""
        query = f"?{urllib.parse.urlencode({'recommendation': rec_id})}" if rec_id else ""
        body = self._get(f"{API}/audit{query}")
        return AuditLog(
            _audit_rows(body.get("actions") or ()), _verifications(body.get("verifications") or ())
        )

    def placement(self, gpus: int, node: str | None = None, top: int = 5) -> list[RankedPlacement]:
        """The advisor's best GPU sets for a job of ``gpus`` GPUs (on ``node`` if given)."""
        params: dict[str, str] = {"gpus": str(gpus), "top": str(top)}
        if node:
            params["node"] = node
        body = self._get(f"{API}/placement?{urllib.parse.urlencode(params)}")
        try:
            return [RankedPlacement.from_json(p) for p in body.get("placements") or ()]
        except (KeyError, TypeError, ValueError) as exc:
            raise AdvisorBadAnswer(f"a placement the advisor sent is malformed: {exc}") from exc

    def _act(self, rec_id: str, action: str, user: str | None) -> ActionResult:
        path = f"{API}/recommendations/{urllib.parse.quote(rec_id, safe='')}/{action}"
        sent = {"user": user} if user is not None else None
        status, body = self._call("POST", path, authorised=True, body=sent)
        if not isinstance(body, dict):
            raise AdvisorBadAnswer(f"{self.url}{path} answered something other than an object")
        if "error" in body:
            if status == 409 and body.get("state") == "in_progress":
                running = len(body.get("entries") or ())
                raise ActionInProgress(
                    f"{action} {rec_id} is already in progress ({running} action"
                    f"{'' if running == 1 else 's'} still running): {body['error']}",
                    status,
                    body,
                )
            raise AdvisorRefused(f"{action} refused (HTTP {status}): {body['error']}", status, body)
        outcomes: Sequence[Any] = body.get("outcomes") or [body]
        return ActionResult(
            status=status,
            results=tuple(str(o.get("result", "")) for o in outcomes if isinstance(o, dict)),
            details=tuple(str(o.get("detail", "")) for o in outcomes if isinstance(o, dict)),
            dry_run_calls=tuple(str(c) for c in body.get("dry_run_calls") or ()),
        )

    def apply(self, rec_id: str, user: str | None = None) -> ActionResult:
        """Apply a recommendation of the latest report (POST with the bearer token), on
        behalf of ``user`` when given (the advisor records that user as the actor).
        """
        return self._act(rec_id, "apply", user)

    def revert(self, rec_id: str, user: str | None = None) -> ActionResult:
        """Revert what was applied under a recommendation (POST with the bearer token), on
        behalf of ``user`` when given.
        """
        return self._act(rec_id, "revert", user)


def _audit_rows(rows: Sequence[Any]) -> tuple[AuditRow, ...]:
    """The audit rows of an answer (:meth:`AuditRow.from_json`); a malformed one is
    :class:`AdvisorBadAnswer`.
    """
    try:
        return tuple(AuditRow.from_json(row) for row in rows)
    except (KeyError, TypeError, ValueError) as exc:
        raise AdvisorBadAnswer(f"an audit row the advisor sent is malformed: {exc}") from exc


def _verifications(items: Sequence[Any]) -> tuple[Verification, ...]:
    """The verifications of an answer (:meth:`Verification.from_json`); a malformed one is
    :class:`AdvisorBadAnswer`.
    """
    try:
        return tuple(Verification.from_json(item) for item in items)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AdvisorBadAnswer(f"a verification the advisor sent is malformed: {exc}") from exc


def _text(raw: bytes, limit: int = 200) -> str:
    """The start of a non-JSON answer, on one line, for a message."""
    text = " ".join(raw.decode("utf-8", "replace").split())
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


__all__ = [
    "API",
    "DEFAULT_TIMEOUT",
    "ActionInProgress",
    "ActionResult",
    "AdvisorBadAnswer",
    "AdvisorClient",
    "AdvisorError",
    "AdvisorRefused",
    "AdvisorReport",
    "AdvisorTimedOut",
    "AdvisorUnreachable",
    "AuditLog",
    "AuditRow",
    "RankedPlacement",
    "RecommendationDetail",
    "Verification",
]
