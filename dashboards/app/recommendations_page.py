"""The recommendations page (``/recommendations?id=ID``): the table, a recommendation's
evidence, the audit log, and Apply and Revert.

Apply and revert run here, on the server, with the token the app was started with (the
browser never sees it), for the user :mod:`.access` let through, whom the advisor records as
the actor. One the advisor does not answer within the app's ``--timeout`` (a slow resource
manager) is still running, not failed: the page says so and follows it to its end state
(:mod:`.action_follow`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.dash_table.DataTable import DataTable

from toposcope.dashboards.app import action_follow
from toposcope.dashboards.app.access import Access, action_user, current_user
from toposcope.dashboards.app.action_follow import (
    FOLLOW_INTERVAL_MS,
    Following,
    in_progress,
    signatures,
)
from toposcope.dashboards.app.advisorclient import (
    ActionInProgress,
    AdvisorClient,
    AdvisorError,
    AdvisorRefused,
    AdvisorTimedOut,
    AuditLog,
    AuditRow,
)
from toposcope.dashboards.app.components import (
    banner,
    card,
    query_value,
    row,
    titled_card,
)
from toposcope.dashboards.app.recommendation_views import (
    REVERTIBLE,
    audit_table,
    evidence,
    table_rows,
)
from toposcope.dashboards.app.sources import (
    LOG,
    REFRESH_INPUTS,
    Clients,
    advisor_failed,
)
from toposcope.dashboards.app.verification_views import verdicts_by_recommendation, what_it_did
from toposcope.report.recommendation import Recommendation

RECOMMENDATION_COLUMNS: tuple[Any, ...] = (
    {"name": "status", "id": "status"},
    {"name": "verdict", "id": "verdict"},
    {"name": "gain", "id": "gain", "type": "numeric", "format": {"specifier": ".1%"}},
    {"name": "kind", "id": "kind"},
    {"name": "severity", "id": "severity"},
    {"name": "target", "id": "target"},
    {"name": "summary", "id": "summary"},
    {"name": "confidence", "id": "confidence", "type": "numeric", "format": {"specifier": ".0%"}},
    {"name": "risk", "id": "risk"},
    {"name": "id", "id": "id"},
)

#: the verdict column's colours: harmful stands out, paid reads as good news
VERDICT_STYLES: tuple[dict[str, Any], ...] = (
    {
        "if": {"filter_query": '{verdict} = "harmful"', "column_id": "verdict"},
        "backgroundColor": "#fde2e1",
        "color": "#a4262c",
        "fontWeight": "bold",
    },
    {
        "if": {"filter_query": '{verdict} = "paid"', "column_id": "verdict"},
        "color": "#107c10",
    },
)


def layout(actions_off: str | None, user: str | None = None) -> html.Div:
    """Skeleton of the recommendations page: ``actions_off`` says why Apply and Revert are
    off (no advisor token, no signed-in user), else the page names the ``user`` they act as.
    """
    if actions_off is not None:
        note: html.Div | None = banner(actions_off, "info")
    elif user:
        note = banner(f"signed in as {user}: apply and revert are recorded under that name", "ok")
    else:
        note = None
    return html.Div(
        [
            html.Div(id="recs-message"),
            note,
            card(
                html.H2("Recommendations"),
                html.Div(
                    [
                        html.Button(
                            "Apply",
                            id="recs-apply",
                            n_clicks=0,
                            disabled=True,
                            className="action primary",
                        ),
                        html.Button(
                            "Revert",
                            id="recs-revert",
                            n_clicks=0,
                            disabled=True,
                            className="action",
                        ),
                    ],
                    style={"marginBottom": "10px"},
                ),
                dcc.ConfirmDialog(id="recs-confirm-apply"),
                dcc.ConfirmDialog(id="recs-confirm-revert"),
                *(dcc.Store(id=f"recs-question-{a}", data=q) for a, q in QUESTIONS.items()),
                dcc.Store(id="recs-version", data=0),
                dcc.Store(id="recs-follow", data=None),
                dcc.Interval(
                    id="recs-follow-tick", interval=FOLLOW_INTERVAL_MS, n_intervals=0, disabled=True
                ),
                html.Div(id="recs-outcome", style={"marginBottom": "10px"}),
                DataTable(
                    id="recs-table",
                    columns=list(RECOMMENDATION_COLUMNS),
                    data=[],
                    sort_action="native",
                    sort_by=[{"column_id": "gain", "direction": "desc"}],
                    filter_action="native",
                    row_selectable="single",
                    selected_rows=[],
                    page_size=100,
                    style_table={"overflowX": "auto", "overflowY": "auto", "maxHeight": "380px"},
                    style_cell={
                        "fontSize": 13,
                        "fontFamily": "inherit",
                        "textAlign": "left",
                        "maxWidth": 420,
                        "whiteSpace": "normal",
                        "height": "auto",
                    },
                    style_header={"fontWeight": "bold", "backgroundColor": "#f0f2f5"},
                    style_data_conditional=list(VERDICT_STYLES),
                ),
            ),
            row(titled_card("Evidence", "recs-detail"), titled_card("Audit log", "recs-audit")),
        ],
        id="recommendations-page",
    )


def actions_off(advisor: AdvisorClient, access: Access) -> str | None:
    """Why the current request may not apply or revert, or ``None`` when it may."""
    if not advisor.can_act:
        return (
            "apply and revert are off: start the app with --advisor-token-file or "
            "TOPOSCOPE_ADVISOR_TOKEN set"
        )
    if current_user() is None:
        return access.sign_in_hint()
    return None


def _action_text(action: str, rec_id: str, results: Sequence[str], details: Sequence[str]) -> str:
    said = "; ".join(f"{r} {d}".strip() for r, d in zip(results, details, strict=False))
    return f"{action} {rec_id}: {said or 'no outcome'}"


def selected_id(
    rows: Sequence[dict[str, Any]] | None, selected: Sequence[int] | None
) -> str | None:
    """The id of the table row ``selected`` points at (indexes into ``rows``), if any."""
    if not rows or not selected or not 0 <= selected[0] < len(rows):
        return None
    return str(rows[selected[0]]["id"])


def _row(rows: Sequence[dict[str, Any]] | None, rec_id: str) -> dict[str, Any] | None:
    """The table row of ``rec_id``, if the table holds it."""
    return next((r for r in rows or () if r["id"] == rec_id), None)


def register(app: Dash, clients: Clients, access: Access) -> frozenset[str]:
    """Attach the page's callbacks to ``app``; answer the ids of those that change
    state (apply and revert), which :func:`.access.install` guards.
    """
    advisor = clients.advisor
    _register_table(app, advisor)
    _register_detail(app, advisor, access)
    _register_confirm(app, "apply")
    _register_confirm(app, "revert")
    registered = set(app.callback_map)
    _register_act(app, advisor, access)
    actions = frozenset(set(app.callback_map) - registered)
    action_follow.register(app, advisor)
    return actions


def _register_table(app: Dash, advisor: AdvisorClient) -> None:
    """Refill the table, the messages and the audit log on every refresh and after an action."""

    @app.callback(
        Output("recs-table", "data"),
        Output("recs-table", "selected_rows"),
        Output("recs-message", "children"),
        Output("recs-audit", "children"),
        *REFRESH_INPUTS,
        Input("recs-version", "data"),
        State("recs-table", "selected_rows"),
        State("recs-table", "data"),
        State("url", "search"),
    )
    def table(
        _tick: int | None,
        _clicks: int | None,
        _range: str,
        _version: int,
        selected: list[int] | None,
        shown: list[dict[str, Any]] | None,
        search: str | None,
    ) -> tuple[Any, ...]:
        return table_view(advisor, selected, shown, search)


def table_view(
    advisor: AdvisorClient,
    selected: list[int] | None,
    shown: list[dict[str, Any]] | None,
    search: str | None,
) -> tuple[Any, ...]:
    """The table's rows and selection, the page's messages and the audit log, from the
    advisor's latest report; the selection stays on the recommendation that was selected in
    ``shown``, else on the one the URL's ``id`` names.
    """
    messages: list[Any] = []
    try:
        report = advisor.report()
        recs: Sequence[Recommendation] = report.recommendations
        if report.last_error:
            messages.append(banner(f"the latest analysis failed: {report.last_error}"))
    except AdvisorError as exc:
        recs = ()
        messages.append(banner(advisor_failed(exc)))
    try:
        log = advisor.audit_log()
    except AdvisorError as exc:
        log = AuditLog((), ())
        messages.append(banner(f"audit log: {advisor_failed(exc)}"))
    audit: Sequence[AuditRow] = log.actions
    rows = table_rows(recs, audit, verdicts_by_recommendation(log.verifications))
    if not rows and not messages:
        messages.append(
            banner("no recommendations: the advisor found nothing worth changing", "ok")
        )
    wanted = selected_id(shown, selected) or query_value(search, "id")
    index = [i for i, r in enumerate(rows) if r["id"] == wanted]
    return rows, index[:1], messages, audit_table(audit)


def _register_detail(app: Dash, advisor: AdvisorClient, access: Access) -> None:
    """Show the selected recommendation's evidence and turn Apply and Revert on or off."""

    @app.callback(
        Output("recs-detail", "children"),
        Output("recs-apply", "disabled"),
        Output("recs-revert", "disabled"),
        Input("recs-table", "selected_rows"),
        Input("recs-table", "data"),
    )
    def detail(
        selected: list[int] | None, rows: list[dict[str, Any]] | None
    ) -> tuple[Any, bool, bool]:
        return detail_view(advisor, access, selected, rows)


def detail_view(
    advisor: AdvisorClient,
    access: Access,
    selected: list[int] | None,
    rows: list[dict[str, Any]] | None,
) -> tuple[Any, bool, bool]:
    """The selected recommendation's evidence and what applying it did, and whether Apply
    and Revert are disabled: each needs a request that may act and a status it applies to
    (an apply, a gain too).
    """
    rec_id = selected_id(rows, selected)
    if rec_id is None:
        return banner("select a recommendation to see its evidence", "info"), True, True
    entry = _row(rows, rec_id)
    status = entry["status"] if entry else "open"
    can_act = actions_off(advisor, access) is None
    can_revert = can_act and status in REVERTIBLE
    can_apply = (
        can_act
        and status in ("open", "failed", "reverted")
        and entry is not None
        and entry["gain"] is not None
    )
    try:
        found = advisor.recommendation_detail(rec_id)
    except AdvisorError as exc:
        if isinstance(exc, AdvisorRefused) and exc.status == 404:
            return _gone_view(advisor, rec_id), True, not can_revert
        return banner(advisor_failed(exc)), not can_apply, not can_revert
    shown = html.Div([evidence(found.recommendation), what_it_did(found.verification, found.audit)])
    return shown, not can_apply, not can_revert


def _gone_view(advisor: AdvisorClient, rec_id: str) -> html.Div:
    """A recommendation no longer in the latest report (applying it usually removes it): no
    evidence, but what applying it did, from the audit log's verification of it.
    """
    gone = banner(f"{rec_id} is no longer in the latest report", "info")
    try:
        log = advisor.audit_log(rec_id)
    except AdvisorError as exc:
        return html.Div([gone, banner(f"audit log: {advisor_failed(exc)}")])
    if not log.actions:
        return html.Div([gone])
    verification = next((v for v in log.verifications if v.recommendation_id == rec_id), None)
    return html.Div([gone, what_it_did(verification, log.actions)])


#: The confirmation each action asks, filled in the browser: ``{id}`` the recommendation,
#: ``{summary}`` and ``{target}`` its table row's.
QUESTIONS = {
    "apply": (
        "Apply {id}?\n\n{summary}\n\nThe advisor will change {target} through its resource manager."
    ),
    "revert": "Revert what was applied under {id}?",
}

#: Opens a confirmation in the browser itself: no round trip to a busy server between the
#: click and the dialog (the apply or revert it confirms still runs on the server).
_ASK_JS = """
function(clicks, selected, rows, question) {
    if (!clicks || !rows || !selected || !selected.length) { return [false, ""]; }
    const row = rows[selected[0]];
    if (!row) { return [false, ""]; }
    const fill = {id: row.id, summary: row.summary || "", target: row.target || "the target"};
    return [true, question.replace(/\\{(id|summary|target)\\}/g, (_, key) => String(fill[key]))];
}
"""


def _register_confirm(app: Dash, action: str) -> None:
    """Ask for confirmation (``recs-confirm-ACTION``) when the ``recs-ACTION`` button is
    clicked with a recommendation selected, with the question of :data:`QUESTIONS`.
    """
    app.clientside_callback(  # type: ignore[no-untyped-call]  # dash is untyped
        _ASK_JS,
        Output(f"recs-confirm-{action}", "displayed"),
        Output(f"recs-confirm-{action}", "message"),
        Input(f"recs-{action}", "n_clicks"),
        State("recs-table", "selected_rows"),
        State("recs-table", "data"),
        State(f"recs-question-{action}", "data"),
        prevent_initial_call=True,
    )


def _register_act(app: Dash, advisor: AdvisorClient, access: Access) -> None:
    """Apply or revert the selected recommendation once the operator confirms."""

    @app.callback(
        Output("recs-outcome", "children"),
        Output("recs-version", "data"),
        Output("recs-follow", "data"),
        Output("recs-follow-tick", "disabled"),
        Input("recs-confirm-apply", "submit_n_clicks"),
        Input("recs-confirm-revert", "submit_n_clicks"),
        State("recs-table", "selected_rows"),
        State("recs-table", "data"),
        State("recs-version", "data"),
        prevent_initial_call=True,
    )
    def act(
        _apply: int | None,
        _revert: int | None,
        selected: list[int] | None,
        rows: list[dict[str, Any]] | None,
        version: int,
    ) -> tuple[Any, Any, Any, Any]:
        rec_id = selected_id(rows, selected)
        if rec_id is None:
            return banner("select a recommendation first", "info"), no_update, no_update, no_update
        action = "apply" if ctx.triggered_id == "recs-confirm-apply" else "revert"
        user = action_user()
        if user is None:
            return banner(access.sign_in_hint()), no_update, no_update, no_update
        return send_action(advisor, action, rec_id, user, (version or 0) + 1)


def send_action(
    advisor: AdvisorClient, action: str, rec_id: str, user: str, bumped: int
) -> tuple[Any, Any, Any, Any]:
    """Send ``action`` (``apply`` or ``revert``) of ``rec_id`` for ``user``: the outcome, the
    table's next version ``bumped``, and what to follow (with the follow tick's ``disabled``)
    when the advisor has not finished it yet.
    """
    try:
        before = advisor.audit(rec_id)
    except AdvisorError as exc:
        LOG.warning("%s %s by %s not sent: %s", action, rec_id, user, exc)
        return banner(f"{action} {rec_id} was not sent: {exc}"), bumped, None, True
    try:
        if action == "apply":
            result = advisor.apply(rec_id, user=user)
        else:
            result = advisor.revert(rec_id, user=user)
    except AdvisorTimedOut:
        LOG.info("%s %s by %s: no answer within %gs", action, rec_id, user, advisor.timeout)
        following = Following(action, rec_id, time.time(), signatures(before))
        text = (
            f"{action} {rec_id} is still running: the advisor did not answer within "
            f"{advisor.timeout:g}s; following it until it ends"
        )
        return banner(text, "info"), bumped, following.to_data(), False
    except ActionInProgress as exc:
        LOG.info("%s %s by %s: %s", action, rec_id, user, exc)
        running = in_progress(rec_id, exc.body.get("entries"), before, time.time())
        data = running.to_data() if running is not None else None
        return banner(str(exc), "info"), bumped, data, running is None
    except AdvisorError as exc:
        LOG.warning("%s %s by %s: %s", action, rec_id, user, exc)
        return banner(f"{action} {rec_id} failed: {exc}"), bumped, None, True
    LOG.info("%s %s by %s: %s", action, rec_id, user, ", ".join(result.results))
    text = _action_text(action, rec_id, result.results, result.details)
    kind = "ok" if result.ok else "info" if result.pending else "error"
    children: list[Any] = [banner(text, kind)]
    if result.dry_run_calls:
        children.append(html.Pre("\n".join(result.dry_run_calls)))
    if result.pending:  # part of a revert still runs: the advisor settles it, the page follows
        following = Following(action, rec_id, time.time(), signatures(before))
        return html.Div(children, id="recs-outcome-text"), bumped, following.to_data(), False
    return html.Div(children, id="recs-outcome-text"), bumped, None, True
