"""The what-if placement page (``/placement``): the advisor's ranked free GPU sets for a job
of N GPUs, the best drawn on its node's topology.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import Dash, Input, Output, State, dcc, html

from toposcope.dashboards.app.advisorclient import (
    AdvisorError,
)
from toposcope.dashboards.app.charts import empty_figure
from toposcope.dashboards.app.components import (
    NODE,
    banner,
    card,
    given_options,
    graph,
    simple_table,
    titled_card,
)
from toposcope.dashboards.app.node_data import load_topology
from toposcope.dashboards.app.promclient import PrometheusError
from toposcope.dashboards.app.sources import (
    Clients,
    advisor_failed,
    prom_failed,
)
from toposcope.dashboards.app.topology_figure import topology_figure


def layout(gpus: int, node: str | None) -> html.Div:
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
                                options=given_options(node),
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
            titled_card("Ranked placements", "place-table"),
        ],
        id="placement-page",
    )


def register(app: Dash, clients: Clients) -> None:
    """Ask the advisor for placements when the operator runs a search."""

    @app.callback(
        Output("place-node", "options"),
        Output("place-message", "children"),
        Output("place-topology", "figure"),
        Output("place-table", "children"),
        Input("place-run", "n_clicks"),
        State("place-gpus", "value"),
        State("place-node", "value"),
    )
    def placement(_clicks: int | None, gpus: int | None, node: str | None) -> tuple[Any, ...]:
        try:
            index = clients.node_index()
        except PrometheusError as exc:
            message = prom_failed(exc)
            return [], banner(message), empty_figure(message), []
        options = [{"label": n, "value": n} for n in index.nodes]
        if not gpus or int(gpus) < 1:
            text = "enter how many GPUs the job needs (1 or more)"
            return options, banner(text, "info"), empty_figure(text), []
        try:
            ranked = clients.advisor.placement(int(gpus), node or None)
        except AdvisorError as exc:
            message = advisor_failed(exc)
            return options, banner(message), empty_figure(message), []
        where = f"node {node}" if node else "any node"
        if not ranked:
            text = (
                f"no {gpus} free GPU(s) on {where}: every set is taken or the nodes are too small"
            )
            return options, banner(text, "info"), empty_figure(text), []
        best = ranked[0]
        try:
            topo = load_topology(clients.prometheus, index, best.node)
        except (PrometheusError, LookupError) as exc:
            message = str(exc)
            return options, banner(message), empty_figure(message), []
        title = (
            f"best placement for {gpus} GPU(s) on {where}: {best.node} GPUs "
            f"{', '.join(map(str, best.gpus))} (worst link {best.worst_link or 'none'})"
        )
        frame = pd.DataFrame(
            [
                {
                    "rank": i + 1,
                    "node": p.node,
                    "gpus": ", ".join(map(str, p.gpus)),
                    "worst link": p.worst_link or "-",
                    "step-time factor": f"{p.link_factor:.2f}",
                    "broken cells": p.broken_cells,
                    "stranded GPUs": p.stranded,
                    "NUMA nodes": ", ".join(map(str, p.numa_nodes)) or "-",
                }
                for i, p in enumerate(ranked)
            ]
        )
        figure = topology_figure(topo, highlight=best.gpus, title=title)
        return (
            options,
            banner(title, "ok"),
            figure,
            simple_table(frame, links={"node": NODE}),
        )
