"""Following an apply or revert that the advisor did not answer in time, to its end state.

The advisor's apply and revert wait for the resource manager; one slower than the app's
``--timeout`` leaves the app without an answer while the advisor carries on. That is not a
failure: the page says the action is still running and follows it through the advisor's
audit log, where the advisor writes a row before each call to the resource manager and the
call's result after it. So too a revert the advisor answered while part of it still runs
(HTTP 202): the advisor marks it reverted once the resource manager finished it. The app
reads the recommendation (``GET /api/v1/recommendations/ID``: its actions and audit rows)
or, once it left the latest report, its audit rows (``GET
/api/v1/audit?recommendation=ID``).

The rows this action wrote are those that are new or changed since the app read them just
before sending it (the advisor reuses a row when it retries an action). The advisor's call
has ended when none of them waits for a result and either one of them stopped it (failed,
not applied, retry later, unknown), or every action has a result (apply), or nothing applied
is left unreverted (revert). The result shown is ``failed`` when one of them failed, else the
recommendation's state then (:func:`.recommendation_views.status_of`). Following gives up after
:data:`FOLLOW_DEADLINE_S`, as a Kubernetes rollout does after its progress deadline, and
points at the audit log.

:func:`progress` judges from data alone; :func:`register` adds the page's callback that asks
the advisor every :data:`FOLLOW_INTERVAL_MS` while an action is followed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dash import Dash, Input, Output, State, html, no_update

from toposcope.dashboards.app.advisorclient import (
    AdvisorClient,
    AdvisorError,
    AdvisorRefused,
    AuditRow,
)
from toposcope.dashboards.app.components import banner
from toposcope.dashboards.app.recommendation_views import status_of
from toposcope.dashboards.app.sources import LOG, advisor_failed

#: how often the page asks the advisor about an action it follows (milliseconds)
FOLLOW_INTERVAL_MS = 2000
#: how long an action is followed before the page stops asking (a rollout's default
#: progress deadline)
FOLLOW_DEADLINE_S = 600.0
#: row results after which the advisor goes no further with an apply or revert
STOPPED = frozenset({"failed", "not-applied", "retry-later", "unknown"})
#: row results of an action the resource manager took (done, or still carrying it out)
TAKEN = frozenset({"succeeded", "running"})
ACTIONS = frozenset({"apply", "revert"})
#: the recommendation state each action aims at
AIMS = {"apply": "applied", "revert": "reverted"}


def signatures(rows: Sequence[AuditRow]) -> dict[str, str]:
    """Each row's request id and what can change in it (result, its time, its revert)."""
    return {r.request_id: f"{r.result}|{r.result_at}|{r.reverted_by}" for r in rows}


@dataclass(frozen=True)
class Following:
    """An action the page follows: ``apply`` or ``revert`` of ``rec_id``, sent at ``since``
    (Unix seconds) when the recommendation's rows were ``before`` (:func:`signatures`).

    It travels through the browser (a ``dcc.Store``) between polls; a forged one can only
    make the app read the open recommendation and audit routes.
    """

    action: str
    rec_id: str
    since: float
    before: Mapping[str, str] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        """The JSON the page's store keeps."""
        return {
            "action": self.action,
            "rec": self.rec_id,
            "since": self.since,
            "before": dict(self.before),
        }

    @classmethod
    def from_data(cls, data: object) -> Following | None:
        """The action a store holds, or ``None`` when it holds none (or not this shape)."""
        if not isinstance(data, Mapping):
            return None
        action, rec_id = data.get("action"), data.get("rec")
        since, before = data.get("since"), data.get("before")
        if action not in ACTIONS or not isinstance(rec_id, str) or not rec_id:
            return None
        if not isinstance(since, int | float) or not isinstance(before, Mapping):
            return None
        rows = {str(k): str(v) for k, v in before.items()}
        return cls(str(action), rec_id, float(since), rows)

    def changed(self, rows: Sequence[AuditRow]) -> list[AuditRow]:
        """The rows that are new or changed since the action was sent."""
        now = signatures(rows)
        return [r for r in rows if self.before.get(r.request_id) != now[r.request_id]]


@dataclass(frozen=True)
class Progress:
    """Where a followed action stands: ``done`` once it ended (or following gave up), the
    text the page shows and the banner kind (``ok``, ``info`` or ``error``).
    """

    done: bool
    text: str
    kind: str


def in_progress(
    rec_id: str, entries: object, before: Sequence[AuditRow], now: float
) -> Following | None:
    """The earlier action of ``rec_id`` the advisor still runs, from the unsettled audit rows
    its 409 ``in_progress`` answer lists (``None`` when it lists none), to follow from the
    rows read ``before`` the refused call.
    """
    rows = [e for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []
    if not rows:
        return None
    action = "revert" if all(e.get("reverts") for e in rows) else "apply"
    return Following(action, rec_id, now, signatures(before))


def _row_text(row: AuditRow) -> str:
    target = f"{row.node}/{row.workload}" if row.node else row.workload
    said = f"{row.request_id} {row.kind} {target}: {row.result or 'pending'}"
    return f"{said} ({row.error})" if row.error else said


def _ended(
    following: Following,
    rows: Sequence[AuditRow],
    aimed: Sequence[AuditRow],
    expected: Sequence[str] | None,
) -> bool:
    """Whether the advisor's call went as far as it will, its rows all answered."""
    if any(r.result in STOPPED for r in aimed):
        return True
    if following.action == "revert":
        return not any(r.result == "succeeded" and not r.reverted_by for r in rows if not r.reverts)
    if expected is None:
        return True
    taken = {r.request_id for r in rows if not r.reverts and r.result in TAKEN}
    return all(request_id in taken for request_id in expected)


def progress(
    following: Following,
    rows: Sequence[AuditRow],
    now: float,
    expected: Sequence[str] | None = None,
    deadline_s: float = FOLLOW_DEADLINE_S,
) -> Progress:
    """How ``following`` stands given the recommendation's audit ``rows`` at time ``now``
    and, when known, the request ids of its actions (``expected``).
    """
    name = f"{following.action} {following.rec_id}"
    changed = following.changed(rows)
    revert = following.action == "revert"
    aimed = [r for r in changed if bool(r.reverts) == revert]
    late = now - following.since > deadline_s
    listed = "; ".join(_row_text(r) for r in sorted(aimed, key=lambda r: r.seq))
    if not aimed:
        if late:
            text = (
                f"{name}: the advisor recorded nothing of it in {deadline_s:g}s; see the audit log"
            )
            return Progress(True, text, "info")
        return Progress(
            False, f"{name} is still running: the advisor has not recorded it yet", "info"
        )
    answered = all(r.result is not None for r in changed)
    if not (answered and _ended(following, rows, aimed, expected)):
        if late:
            text = (
                f"{name}: stopped following it after {deadline_s:g}s ({listed}); see the audit log"
            )
            return Progress(True, text, "info")
        return Progress(False, f"{name} is still running: {listed}", "info")
    state = "failed" if any(r.result == "failed" for r in aimed) else status_of(rows)
    kind = "ok" if state == AIMS[following.action] else "error" if state == "failed" else "info"
    return Progress(True, f"{name}: {state} ({listed})", kind)


def _read(advisor: AdvisorClient, rec_id: str) -> tuple[Sequence[AuditRow], list[str] | None]:
    """The recommendation's audit rows and its actions' request ids (``None`` once it left
    the latest report: then the audit log alone).
    """
    try:
        rec, rows = advisor.recommendation(rec_id)
    except AdvisorRefused as exc:
        if exc.status not in (404, 503):
            raise
        return advisor.audit(rec_id), None
    return rows, [a.request_id for a in rec.actions]


def register(app: Dash, advisor: AdvisorClient) -> None:
    """Attach the callback that follows the action in ``recs-follow`` on each tick of
    ``recs-follow-tick``: it rewrites ``recs-outcome`` and, once the action ended, stops the
    ticks and bumps ``recs-version`` so the table and audit log show the new state.
    """

    @app.callback(
        Output("recs-outcome", "children", allow_duplicate=True),
        Output("recs-follow", "data", allow_duplicate=True),
        Output("recs-follow-tick", "disabled", allow_duplicate=True),
        Output("recs-version", "data", allow_duplicate=True),
        Input("recs-follow-tick", "n_intervals"),
        State("recs-follow", "data"),
        State("recs-version", "data"),
        prevent_initial_call=True,
    )
    def follow(_tick: int | None, data: object, version: int | None) -> tuple[Any, ...]:
        following = Following.from_data(data)
        if following is None:
            return no_update, None, True, no_update
        now = time.time()
        try:
            rows, expected = _read(advisor, following.rec_id)
            state = progress(following, rows, now, expected)
        except AdvisorError as exc:
            name = f"{following.action} {following.rec_id}"
            reason = advisor_failed(exc)
            gave_up = now - following.since > FOLLOW_DEADLINE_S
            text = (
                f"{name}: stopped following it, the advisor cannot say how it went: {reason}"
                if gave_up
                else f"{name} is still running; the advisor cannot say more for now: {reason}"
            )
            state = Progress(gave_up, text, "info")
        shown = html.Div(banner(state.text, state.kind), id="recs-outcome-text")
        if not state.done:
            return shown, no_update, False, no_update
        LOG.info("followed %s", state.text)
        return shown, None, True, (version or 0) + 1
