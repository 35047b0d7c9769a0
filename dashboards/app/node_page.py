"""The node page (``/node?node=NAME``): its topology drawing with live values, and its NUMA
and GPU time series.
"""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, html

from toposcope.dashboards.app.charts import GIB, empty_figure, lines
from toposcope.dashboards.app.components import (
    banner,
    card,
    graph,
    picker,
)
from toposcope.dashboards.app.node_data import load_node_series, load_topology
from toposcope.dashboards.app.promclient import PrometheusError
from toposcope.dashboards.app.sources import (
    REFRESH_INPUTS,
    Clients,
    prom_failed,
)
from toposcope.dashboards.app.topology_figure import topology_figure


def layout(node: str | None) -> html.Div:
    """Skeleton of the node page (``node`` from the URL, else the first node)."""
    return html.Div(
        [
            picker("node-select", node, "choose a node"),
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


def register(app: Dash, clients: Clients) -> None:
    """Fill the node page when the node is chosen and on every refresh."""
    graphs = (
        "node-topology",
        "node-numa-memory",
        "node-numa-cpu",
        "node-gpu-util",
        "node-gpu-memory",
        "node-gpu-power",
        "node-gpu-throttle",
    )

    @app.callback(
        Output("node-select", "options"),
        Output("node-select", "value"),
        Output("node-message", "children"),
        *(Output(g, "figure") for g in graphs),
        Input("node-select", "value"),
        *REFRESH_INPUTS,
    )
    def node(
        chosen: str | None, _tick: int | None, _clicks: int | None, range_: str
    ) -> tuple[Any, ...]:
        try:
            index = clients.node_index()
        except PrometheusError as exc:
            message = prom_failed(exc)
            return (
                [],
                chosen,
                banner(message),
                *(empty_figure(message) for _ in graphs),
            )
        names = index.nodes
        options = [{"label": n, "value": n} for n in names]
        if not names:
            text = "no nodes: Prometheus has no toposcope_exporter_build_info series"
            return (
                options,
                None,
                banner(text, "info"),
                *(empty_figure(text) for _ in graphs),
            )
        node_name = chosen if chosen in names else names[0]
        notes: list[Any] = []
        if chosen and chosen not in names:
            notes.append(banner(f"no node {chosen!r}; showing {node_name}", "info"))
        try:
            topo = load_topology(clients.prometheus, index, node_name)
            series = load_node_series(clients.prometheus, index, node_name, range_)
        except PrometheusError as exc:
            message = prom_failed(exc)
            return (
                options,
                node_name,
                banner(message),
                *(empty_figure(message) for _ in graphs),
            )
        if not topo.gpus:
            notes.append(banner(f"{node_name} reports no GPUs (a CPU node, or NVML off)", "info"))
        no_gpu = f"{node_name} reports no GPU series"
        return (
            options,
            node_name,
            notes,
            topology_figure(topo),
            lines(
                series.numa_memory,
                "numa_node",
                "Memory used per NUMA node",
                label="NUMA",
                unit="GiB",
                scale=GIB,
            ),
            lines(
                series.numa_cpu, "numa_node", "CPU busy per NUMA node", label="NUMA", percent=True
            ),
            lines(
                series.gpu_utilization,
                "gpu",
                "GPU utilization",
                label="GPU",
                percent=True,
                empty=no_gpu,
            ),
            lines(
                series.gpu_memory,
                "gpu",
                "GPU memory used",
                label="GPU",
                unit="GiB",
                scale=GIB,
                empty=no_gpu,
            ),
            lines(series.gpu_power, "gpu", "GPU power", label="GPU", unit="W", empty=no_gpu),
            lines(
                series.gpu_throttle,
                "gpu",
                "GPU throttling (active slowdown reasons)",
                label="GPU",
                unit="reasons",
                empty=no_gpu,
            ),
        )
