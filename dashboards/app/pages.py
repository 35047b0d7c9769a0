"""The app's shell and page skeletons, and the small components pages fill in.

A page is a skeleton of empty components with fixed ids (this module) that callbacks
(:mod:`.callbacks`) fill from Prometheus and the advisor service; the skeleton depends only on
the URL, so a refresh updates figures in place and keeps the operator's selection and zoom.
Routes: ``/`` cluster, ``/node?node=NAME``, ``/workload?workload=NODE/NAME``,
``/recommendations?id=ID``, ``/placement``, ``/queue`` (:mod:`.queue_page`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlencode

import pandas as pd
from dash import dcc, html
from dash.dash_table.DataTable import DataTable

from toposcope.dashboards.app.advisorclient import AuditRow
from toposcope.dashboards.app.data import DEFAULT_RANGE, RANGES
from toposcope.recommendation import Recommendation

CLUSTER, NODE, WORKLOAD, RECOMMENDATIONS, PLACEMENT = (
    "/",
    "/node",
    "/workload",
    "/recommendations",
    "/placement",
)
NAV: tuple[tuple[str, str], ...] = (
    (CLUSTER, "Cluster"),
    (NODE, "Node"),
    (WORKLOAD, "Workload"),
    (RECOMMENDATIONS, "Recommendations"),
    (PLACEMENT, "What-if placement"),
    ("/queue", "Queue"),
)
#: refresh choices: label -> milliseconds (0 = off)
REFRESH: dict[str, int] = {"off": 0, "10s": 10_000, "30s": 30_000, "1m": 60_000, "5m": 300_000}
TOP_RECOMMENDATIONS = 10
#: table statuses under which something can be reverted
REVERTIBLE = frozenset({"applied", "in progress"})
AUDIT_ROWS = 50

CSS = """
body {
    font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0;
    background: #f6f7f9; color: #222;
}
.topbar {
    display: flex; align-items: center; gap: 18px; padding: 8px 18px; background: #1f2d3d;
    color: #fff; flex-wrap: wrap;
}
.topbar h1 { font-size: 18px; margin: 0 12px 0 0; }
.topbar a { color: #cfe0f5; text-decoration: none; font-size: 14px; }
.topbar a.active { color: #fff; font-weight: 600; border-bottom: 2px solid #fff; }
.controls { display: flex; align-items: center; gap: 8px; margin-left: auto; font-size: 13px; }
.controls .pick { width: 110px; color: #222; }
.status { font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #2e4a66; }
.status.bad { background: #a83232; }
.page { padding: 14px 18px; }
.row { display: flex; gap: 14px; flex-wrap: wrap; }
.card {
    background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 10px 12px;
    margin-bottom: 14px; flex: 1 1 420px; min-width: 0;
}
.stat { flex: 0 1 160px; text-align: center; }
.stat b { display: block; font-size: 24px; }
.banner { padding: 8px 12px; border-radius: 6px; margin-bottom: 12px; font-size: 14px; }
.banner.error { background: #fdecea; border: 1px solid #f5c2c0; color: #8a1f11; }
.banner.info { background: #eef4fb; border: 1px solid #c7dbf2; color: #1d4f91; }
.banner.ok { background: #eaf7ee; border: 1px solid #b8e2c4; color: #1b5e33; }
.picker { max-width: 520px; margin-bottom: 12px; }
table.simple { border-collapse: collapse; font-size: 13px; width: 100%; }
table.simple th, table.simple td {
    border-bottom: 1px solid #e5e7ea; padding: 4px 6px; text-align: left;
}
button.action {
    padding: 6px 14px; margin-right: 8px; border-radius: 4px; border: 1px solid #888;
    background: #fff; cursor: pointer;
}
button.action.primary { background: #1f6fd1; border-color: #1f6fd1; color: #fff; }
button.action:disabled { opacity: 0.5; cursor: not-allowed; }
h2 { font-size: 16px; margin: 4px 0 10px; }
"""

INDEX = (
    """<!DOCTYPE html>
<html>
  <head>
    {%metas%}
    <title>{%title%}</title>
    {%favicon%}
    {%css%}
    <style>"""
    + CSS
    + """</style>
  </head>
  <body>
    {%app_entry%}
    <footer>{%config%}{%scripts%}{%renderer%}</footer>
  </body>
</html>
"""
)


def query_value(search: str | None, key: str) -> str | None:
    """The first value of ``key`` in a URL query string (``?a=b``), or ``None``."""
    values = parse_qs((search or "").lstrip("?")).get(key)
    return values[0] if values else None


def href(path: str, **params: str) -> str:
    """A link to ``path`` with query parameters."""
    return f"{path}?{urlencode(params)}" if params else path


def shell(refresh: str) -> html.Div:
    """The layout around every page: navigation, time range, refresh, Prometheus status."""
    return html.Div(
        [
            dcc.Location(id="url", refresh=False),
            html.Div(
                [
                    html.H1("toposcope"),
                    html.Nav(
                        id="nav", children=nav(CLUSTER), style={"display": "flex", "gap": "16px"}
                    ),
                    html.Div(
                        [
                            html.Span("range"),
                            dcc.Dropdown(
                                id="time-range",
                                options=[{"label": r, "value": r} for r in RANGES],
                                value=DEFAULT_RANGE,
                                clearable=False,
                                searchable=False,
                                className="pick",
                            ),
                            html.Span("refresh"),
                            dcc.Dropdown(
                                id="refresh-every",
                                options=[{"label": r, "value": r} for r in REFRESH],
                                value=refresh,
                                clearable=False,
                                searchable=False,
                                className="pick",
                            ),
                            html.Button(
                                "Refresh", id="refresh-now", n_clicks=0, className="action"
                            ),
                            html.Span(
                                id="prom-status", className="status", children="Prometheus: ..."
                            ),
                        ],
                        className="controls",
                    ),
                ],
                className="topbar",
            ),
            dcc.Interval(
                id="tick", interval=REFRESH[refresh] or 60_000, disabled=REFRESH[refresh] == 0
            ),
            html.Div(id="page", className="page"),
        ]
    )


def nav(current: str) -> list[Any]:
    """The navigation links with the current page marked."""
    return [
        dcc.Link(
            label,
            href=path,
            className="active" if path == current else "",
            id=f"nav-{path.strip('/') or 'cluster'}",
        )
        for path, label in NAV
    ]


def banner(text: str, kind: str = "error") -> html.Div:
    """A coloured message line (``error``, ``info`` or ``ok``)."""
    return html.Div(text, className=f"banner {kind}")


def graph(graph_id: str) -> dcc.Graph:
    """A graph filled by a callback; its figure sets the height, the card the width."""
    return dcc.Graph(id=graph_id, config={"displaylogo": False, "displayModeBar": "hover"})


def card(*children: Any, **style: Any) -> html.Div:
    """A white panel."""
    return html.Div(list(children), className="card", style=style or None)


# -- skeletons ---------------------------------------------------------------------------


def _given(value: str | None) -> list[dict[str, str]]:
    """Dropdown options holding just the value the URL names (the callback adds the rest);
    a dropdown drops a value that is not among its options.
    """
    return [{"label": value, "value": value}] if value else []


def cluster_page() -> html.Div:
    """Skeleton of the cluster page."""
    return html.Div(
        [
            html.Div(id="cluster-message"),
            html.Div(id="cluster-summary", className="row"),
            html.Div([card(graph("cluster-util")), card(graph("cluster-memory"))], className="row"),
            html.Div([card(graph("cluster-locality"))], className="row"),
            html.Div(
                [
                    card(html.H2("Idle GPUs"), html.Div(id="cluster-idle")),
                    card(html.H2("Top recommendations"), html.Div(id="cluster-recs")),
                ],
                className="row",
            ),
        ],
        id="cluster-page",
    )


def _picker(picker_id: str, value: str | None, placeholder: str) -> html.Div:
    """The page's subject chooser; its options are filled from Prometheus by a callback."""
    return html.Div(
        dcc.Dropdown(
            id=picker_id,
            options=_given(value),
            value=value,
            placeholder=placeholder,
            clearable=False,
        ),
        className="picker",
    )


def node_page(node: str | None) -> html.Div:
    """Skeleton of the node page (``node`` from the URL, else the first node)."""
    return html.Div(
        [
            _picker("node-select", node, "choose a node"),
            html.Div(id="node-message"),
            card(graph("node-topology")),
            html.Div(
                [card(graph("node-numa-memory")), card(graph("node-numa-cpu"))], className="row"
            ),
            html.Div(
                [card(graph("node-gpu-util")), card(graph("node-gpu-memory"))], className="row"
            ),
            html.Div(
                [card(graph("node-gpu-power")), card(graph("node-gpu-throttle"))], className="row"
            ),
        ],
        id="node-page",
    )


def workload_page(workload: str | None) -> html.Div:
    """Skeleton of the workload page (``NODE/NAME`` from the URL, else the first one)."""
    return html.Div(
        [
            _picker("workload-select", workload, "choose a workload"),
            html.Div(id="workload-message"),
            html.Div(id="workload-summary", className="row"),
            html.Div(
                [card(graph("workload-cores")), card(graph("workload-memory"))], className="row"
            ),
            html.Div(
                [
                    card(graph("workload-locality")),
                    card(
                        html.H2("Recommendations for this workload"), html.Div(id="workload-recs")
                    ),
                ],
                className="row",
            ),
        ],
        id="workload-page",
    )


RECOMMENDATION_COLUMNS: tuple[Any, ...] = (
    {"name": "status", "id": "status"},
    {"name": "gain", "id": "gain", "type": "numeric", "format": {"specifier": ".1%"}},
    {"name": "kind", "id": "kind"},
    {"name": "severity", "id": "severity"},
    {"name": "target", "id": "target"},
    {"name": "summary", "id": "summary"},
    {"name": "confidence", "id": "confidence", "type": "numeric", "format": {"specifier": ".0%"}},
    {"name": "risk", "id": "risk"},
    {"name": "id", "id": "id"},
)


def recommendations_page(actions_off: str | None, user: str | None = None) -> html.Div:
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
                dcc.Store(id="recs-version", data=0),
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
                ),
            ),
            html.Div(
                [
                    card(html.H2("Evidence"), html.Div(id="recs-detail")),
                    card(html.H2("Audit log"), html.Div(id="recs-audit")),
                ],
                className="row",
            ),
        ],
        id="recommendations-page",
    )


def placement_page(gpus: int, node: str | None) -> html.Div:
    """Skeleton of the what-if placement page."""
    return html.Div(
        [
            card(
                html.Div(
                    [
                        html.Label("GPUs"),
                        dcc.Input(
                            id="place-gpus",
                            type="number",
                            min=1,
                            max=64,
                            step=1,
                            value=gpus,
                            style={"width": "70px"},
                        ),
                        html.Label("node (optional)"),
                        html.Div(
                            dcc.Dropdown(
                                id="place-node",
                                options=_given(node),
                                value=node,
                                placeholder="any node",
                            ),
                            style={"width": "260px"},
                        ),
                        html.Button(
                            "Find placement", id="place-run", n_clicks=0, className="action primary"
                        ),
                    ],
                    style={"display": "flex", "gap": "10px", "alignItems": "center"},
                ),
            ),
            html.Div(id="place-message"),
            card(graph("place-topology")),
            card(html.H2("Ranked placements"), html.Div(id="place-table")),
        ],
        id="placement-page",
    )


def not_found(path: str) -> html.Div:
    """The page for an unknown path."""
    return html.Div(
        [banner(f"no page at {path}", "info"), dcc.Link("back to the cluster", href=CLUSTER)]
    )


# -- filled-in parts ---------------------------------------------------------------------


def stats(items: Sequence[tuple[str, str]]) -> list[html.Div]:
    """Big-number cards: (value, label)."""
    return [
        html.Div([html.B(value), html.Span(label)], className="card stat") for value, label in items
    ]


def simple_table(
    frame: pd.DataFrame, links: Mapping[str, str] | None = None, empty: str = ""
) -> Any:
    """A plain HTML table of ``frame``; ``links`` maps a column to the page its values open."""
    if frame.empty:
        return banner(empty or "nothing to show", "info")
    links = links or {}
    head = html.Thead(html.Tr([html.Th(c) for c in frame.columns]))
    rows = []
    for record in frame.itertuples(index=False):
        cells = []
        for column, value in zip(frame.columns, record, strict=True):
            text = str(value)
            if column in links:
                target = links[column]
                key = "workload" if target == WORKLOAD else "node"
                cells.append(html.Td(dcc.Link(text, href=href(target, **{key: text}))))
            else:
                cells.append(html.Td(text))
        rows.append(html.Tr(cells))
    return html.Table([head, html.Tbody(rows)], className="simple")


def recommendation_list(recs: Sequence[Recommendation], empty: str) -> Any:
    """A short table of recommendations with their gains, linking to the table page."""
    if not recs:
        return banner(empty, "info")
    head = html.Thead(html.Tr([html.Th(h) for h in ("gain", "kind", "target", "summary")]))
    rows = [
        html.Tr(
            [
                html.Td(f"{r.estimated_gain:.0%}"),
                html.Td(str(r.kind)),
                html.Td(r.target.label()),
                html.Td(dcc.Link(r.summary, href=href(RECOMMENDATIONS, id=r.id))),
            ]
        )
        for r in recs
    ]
    return html.Table([head, html.Tbody(rows)], className="simple")


def status_of(rows: Sequence[AuditRow]) -> str:
    """A recommendation's state from its audit rows (the advisor's own rules).

    ``open`` (never acted on), ``applied`` (an action succeeded and is not reverted),
    ``reverted``, ``in progress`` (the resource manager still runs an action; the advisor
    settles it on its next apply or revert), ``failed`` or ``unknown``.
    """
    forward = [r for r in rows if not r.reverts]
    if not forward:
        return "open"
    if any(r.result == "succeeded" and not r.reverted_by for r in forward):
        return "applied"
    if any(r.reverted_by for r in forward):
        return "reverted"
    if any(r.result in (None, "running") for r in forward):
        return "in progress"
    last = max(forward, key=lambda r: r.seq)
    return "failed" if last.result == "failed" else last.result or "unknown"


def table_rows(recs: Sequence[Recommendation], audit: Sequence[AuditRow]) -> list[dict[str, Any]]:
    """The recommendations table: the latest report, plus audited ones no longer in it."""
    by_rec: dict[str, list[AuditRow]] = {}
    for row in audit:
        by_rec.setdefault(row.recommendation_id, []).append(row)
    rows: list[dict[str, Any]] = [
        {
            "id": r.id,
            "status": status_of(by_rec.get(r.id, ())),
            "gain": r.estimated_gain,
            "kind": str(r.kind),
            "severity": str(r.severity),
            "target": r.target.label(),
            "summary": r.summary,
            "confidence": r.confidence,
            "risk": str(r.risk),
        }
        for r in recs
    ]
    listed = {r.id for r in recs}
    for rec_id, actions in sorted(by_rec.items()):
        if rec_id in listed:
            continue
        first = min(actions, key=lambda a: a.seq)
        rows.append(
            {
                "id": rec_id,
                "status": status_of(actions),
                "gain": None,
                "kind": first.kind,
                "severity": "",
                "target": f"{first.node}/{first.workload}" if first.node else first.workload,
                "summary": "no longer in the latest report",
                "confidence": None,
                "risk": "",
            }
        )
    return rows


def evidence(rec: Recommendation) -> html.Div:
    """The evidence, gain model and proposed change of one recommendation."""
    items = [
        html.Tr(
            [
                html.Td(e.series),
                html.Td(", ".join(f"{k}={v}" for k, v in sorted(e.labels.items()))),
                html.Td(f"{e.value:.4g}"),
            ]
        )
        for e in rec.evidence
    ]
    return html.Div(
        [
            html.P(html.B(rec.summary)),
            html.P(f"estimated gain {rec.estimated_gain:.1%} ({rec.gain_model})"),
            html.P(f"confidence {rec.confidence:.0%}, risk {rec.risk}, policy {rec.policy}"),
            html.P(f"current {dict(rec.current)}; proposed {dict(rec.proposed)}"),
            html.Table(
                [
                    html.Thead(html.Tr([html.Th("series"), html.Th("labels"), html.Th("value")])),
                    html.Tbody(items),
                ],
                className="simple",
            )
            if items
            else banner("no evidence series recorded", "info"),
        ]
    )


def audit_table(rows: Sequence[AuditRow]) -> Any:
    """The audit log, newest first."""
    if not rows:
        return banner("nothing has been applied yet", "info")
    newest = sorted(rows, key=lambda r: r.seq, reverse=True)[:AUDIT_ROWS]
    frame = pd.DataFrame(
        [
            {
                "seq": r.seq,
                "when": r.result_at or r.intent_at,
                "recommendation": r.recommendation_id,
                "action": "revert" if r.reverts else r.kind,
                "target": f"{r.node}/{r.workload}" if r.node else r.workload,
                "result": r.result or "pending",
                "by": r.actor,
                "error": r.error,
            }
            for r in newest
        ]
    )
    return simple_table(frame)
