"""The node page (``/node?node=NAME``): its topology drawing with live values, and its NUMA
and GPU time series.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from dash import Dash, Output, html

from toposcope.dashboards.app.charts import GIB, empty_figure, lines
from toposcope.dashboards.app.components import (
    banner,
    card,
    fill_from_picker,
    graph,
    graph_row,
    picker,
)
from toposcope.dashboards.app.node_data import (
    NodeSeries,
    NodeTopology,
    load_node_series,
    load_topology,
)
from toposcope.dashboards.app.promclient import PrometheusError
from toposcope.dashboards.app.sources import Clients, prom_failed
from toposcope.dashboards.app.topology_figure import topology_figure

#: the page's figures, in the order the callback fills them
GRAPHS = (
    "node-topology",
    "node-numa-memory",
    "node-numa-cpu",
    "node-gpu-util",
    "node-gpu-memory",
    "node-gpu-power",
    "node-gpu-throttle",
)


def layout(node: str | None) -> html.Div:
    """Skeleton of the node page (``node`` from the URL, else the first node)."""
    return html.Div(
        [
            picker("node-select", node, "choose a node"),
            html.Div(id="node-message"),
            card(graph("node-topology")),
            graph_row("node-numa-memory", "node-numa-cpu"),
            graph_row("node-gpu-util", "node-gpu-memory"),
            graph_row("node-gpu-power", "node-gpu-throttle"),
        ],
        id="node-page",
    )


def register(app: Dash, clients: Clients) -> None:
    """Fill the node page when the node is chosen and on every refresh."""
    outputs = (Output("node-message", "children"), *(Output(g, "figure") for g in GRAPHS))
    fill_from_picker(app, "node-select", outputs, partial(node_view, clients))


def node_view(clients: Clients, chosen: str | None, range_: str) -> tuple[Any, ...]:
    """Everything the node page shows for the ``chosen`` node (else the first) over
    ``range_``: picker options and value, messages, and one figure per :data:`GRAPHS`.
    """
    try:
        index = clients.node_index()
    except PrometheusError as exc:
        return _failed([], chosen, prom_failed(exc))
    names = index.nodes
    options = [{"label": n, "value": n} for n in names]
    if not names:
        text = "no nodes: Prometheus has no toposcope_exporter_build_info series"
        return _failed(options, None, text, "info")
    node_name = chosen if chosen in names else names[0]
    notes: list[Any] = []
    if chosen and chosen not in names:
        notes.append(banner(f"no node {chosen!r}; showing {node_name}", "info"))
    try:
        topo = load_topology(clients.prometheus, index, node_name)
        series = load_node_series(clients.prometheus, index, node_name, range_)
    except PrometheusError as exc:
        return _failed(options, node_name, prom_failed(exc))
    if not topo.gpus:
        notes.append(banner(f"{node_name} reports no GPUs (a CPU node, or NVML off)", "info"))
    return (options, node_name, notes, *_figures(topo, series))


def _failed(options: Any, value: str | None, text: str, kind: str = "error") -> tuple[Any, ...]:
    """The page when it has nothing to draw: ``text`` as its message and on every figure."""
    return (options, value, banner(text, kind), *(empty_figure(text) for _ in GRAPHS))


def _figures(topo: NodeTopology, series: NodeSeries) -> tuple[Any, ...]:
    """The node's topology drawing and its time series, in the order of :data:`GRAPHS`."""
    no_gpu = f"{topo.name} reports no GPU series"
    return (
        topology_figure(topo),
        lines(
            series.numa_memory,
            "numa_node",
            "Memory used per NUMA node",
            label="NUMA",
            unit="GiB",
            scale=GIB,
        ),
        lines(series.numa_cpu, "numa_node", "CPU busy per NUMA node", label="NUMA", percent=True),
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
