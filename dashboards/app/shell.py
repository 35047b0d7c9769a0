"""The layout around every page (navigation, time range, refresh, Prometheus status), the
page's style, and the routing from the URL to a page's skeleton.

A page is a skeleton of empty components with fixed ids (each page module's ``layout``)
that its callbacks fill from Prometheus and the advisor service; the skeleton depends only on
the URL, so a refresh updates figures in place and keeps the operator's selection and zoom.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dash import Dash, Input, Output, State, dcc, html

from toposcope.dashboards.app import (
    cluster_page,
    fabric_page,
    node_page,
    placement_page,
    queue_page,
    recommendations_page,
    workload_page,
)
from toposcope.dashboards.app.access import Access, current_user
from toposcope.dashboards.app.components import (
    CLUSTER,
    NODE,
    PLACEMENT,
    RECOMMENDATIONS,
    WORKLOAD,
    banner,
    query_value,
)
from toposcope.dashboards.app.fabric_layout import FabricIndex
from toposcope.dashboards.app.prom_frames import DEFAULT_RANGE, RANGES
from toposcope.dashboards.app.promclient import PrometheusError
from toposcope.dashboards.app.recommendations_page import actions_off
from toposcope.dashboards.app.sources import (
    Clients,
    prom_failed,
)

NAV: tuple[tuple[str, str], ...] = (
    (CLUSTER, "Cluster"),
    (NODE, "Node"),
    (WORKLOAD, "Workload"),
    (RECOMMENDATIONS, "Recommendations"),
    (PLACEMENT, "What-if placement"),
    (queue_page.QUEUE, "Queue"),
    (fabric_page.FABRIC, "Fabric"),
)
#: refresh choices: label -> milliseconds (0 = off)
REFRESH: dict[str, int] = {"off": 0, "10s": 10_000, "30s": 30_000, "1m": 60_000, "5m": 300_000}


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


def _choice(choice_id: str, choices: Iterable[str], value: str) -> dcc.Dropdown:
    """A small top-bar dropdown of fixed ``choices``."""
    return dcc.Dropdown(
        id=choice_id,
        options=[{"label": c, "value": c} for c in choices],
        value=value,
        clearable=False,
        searchable=False,
        className="pick",
    )


def layout(refresh: str) -> html.Div:
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
                            _choice("time-range", RANGES, DEFAULT_RANGE),
                            html.Span("refresh"),
                            _choice("refresh-every", REFRESH, refresh),
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


def not_found(path: str) -> html.Div:
    """The page for an unknown path."""
    return html.Div(
        [banner(f"no page at {path}", "info"), dcc.Link("back to the cluster", href=CLUSTER)]
    )


def register(
    app: Dash, clients: Clients, access: Access, fabric: FabricIndex | None = None
) -> None:
    """Route the URL to its page and keep the refresh and Prometheus status current
    (``fabric``: the network fabric the app was started with, if any).
    """

    @app.callback(
        Output("page", "children"),
        Output("nav", "children"),
        Input("url", "pathname"),
        State("url", "search"),
    )
    def route(pathname: str | None, search: str | None) -> tuple[Any, Any]:
        path = pathname or CLUSTER
        if path == CLUSTER:
            page: Any = cluster_page.layout()
        elif path == NODE:
            page = node_page.layout(query_value(search, "node"))
        elif path == WORKLOAD:
            page = workload_page.layout(query_value(search, "workload"))
        elif path == RECOMMENDATIONS:
            page = recommendations_page.layout(actions_off(clients.advisor, access), current_user())
        elif path == queue_page.QUEUE:
            page = queue_page.queue_page()
        elif path == fabric_page.FABRIC:
            page = fabric_page.layout(
                fabric, query_value(search, "switch"), query_value(search, "job")
            )
        elif path == PLACEMENT:
            gpus = query_value(search, "gpus") or "2"
            count = int(gpus) if gpus.isdigit() and int(gpus) > 0 else 2
            page = placement_page.layout(count, query_value(search, "node"))
        else:
            page = not_found(path)
        return page, nav(path)

    @app.callback(
        Output("tick", "interval"),
        Output("tick", "disabled"),
        Input("refresh-every", "value"),
    )
    def set_refresh(choice: str | None) -> tuple[int, bool]:
        milliseconds = REFRESH.get(choice or "off", 0)
        return (milliseconds or 60_000), milliseconds == 0

    @app.callback(
        Output("prom-status", "children"),
        Output("prom-status", "className"),
        Input("tick", "n_intervals"),
        Input("refresh-now", "n_clicks"),
    )
    def prometheus_status(_tick: int | None, _clicks: int | None) -> tuple[str, str]:
        try:
            index = clients.node_index()
        except PrometheusError as exc:
            prom_failed(exc)
            return "Prometheus unreachable", "status bad"
        count = len(index.nodes)
        if not count:
            return "Prometheus: no exporters", "status bad"
        return f"Prometheus: {count} node{'s' if count != 1 else ''}", "status"
