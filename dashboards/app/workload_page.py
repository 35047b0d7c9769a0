"""The workload page (``/workload?workload=NODE/NAME``): where its threads and memory are
against its GPUs' NUMA nodes, its locality and the recommendations about it.
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
    recommendation_list,
    row,
    stats,
    titled_card,
)
from toposcope.dashboards.app.promclient import PrometheusError
from toposcope.dashboards.app.sources import Clients, prom_failed, report
from toposcope.dashboards.app.workload_data import (
    WorkloadData,
    WorkloadRef,
    load_workload,
    load_workloads,
)

#: the page's figures, in the order the callback fills them
GRAPHS = ("workload-cores", "workload-memory", "workload-locality")


def layout(workload: str | None) -> html.Div:
    """Skeleton of the workload page (``NODE/NAME`` from the URL, else the first one)."""
    return html.Div(
        [
            picker("workload-select", workload, "choose a workload"),
            html.Div(id="workload-message"),
            html.Div(id="workload-summary", className="row"),
            graph_row("workload-cores", "workload-memory"),
            row(
                card(graph("workload-locality")),
                titled_card("Recommendations for this workload", "workload-recs"),
            ),
        ],
        id="workload-page",
    )


def register(app: Dash, clients: Clients) -> None:
    """Fill the workload page when the workload is chosen and on every refresh."""
    outputs = (
        Output("workload-message", "children"),
        Output("workload-summary", "children"),
        *(Output(g, "figure") for g in GRAPHS),
        Output("workload-recs", "children"),
    )
    fill_from_picker(app, "workload-select", outputs, partial(workload_view, clients))


def workload_view(clients: Clients, chosen: str | None, range_: str) -> tuple[Any, ...]:
    """Everything the workload page shows for the ``chosen`` workload (else the first) over
    ``range_``: picker options and value, messages, summary, figures and recommendations.
    """
    try:
        index = clients.node_index()
        refs = load_workloads(clients.prometheus, index)
    except PrometheusError as exc:
        return _failed(chosen, prom_failed(exc))
    options = [{"label": r.key, "value": r.key} for r in refs]
    if not refs:
        return _failed(
            chosen,
            "no workloads: the exporters track none (workloads collector off, or no "
            "matching processes or cgroups)",
            "info",
        )
    keys = [r.key for r in refs]
    key = chosen if chosen in keys else keys[0]
    ref = WorkloadRef.parse(key)
    try:
        data = load_workload(clients.prometheus, index, ref, range_)
    except PrometheusError as exc:
        return _failed(chosen, prom_failed(exc), options=options)
    summary = _summary(ref, data)
    listed = _recommendations(clients, ref)
    notes = (
        [] if chosen in (None, key) else [banner(f"no workload {chosen!r}; showing {key}", "info")]
    )
    return (options, key, notes, summary, *_figures(data), listed)


def _failed(
    chosen: str | None, text: str, kind: str = "error", options: Any = ()
) -> tuple[Any, ...]:
    """The page when it has nothing to show: ``text`` as its message and on every figure."""
    empty = empty_figure(text)
    return list(options), chosen, banner(text, kind), [], *(empty for _ in GRAPHS), []


def _summary(ref: WorkloadRef, data: WorkloadData) -> list[html.Div]:
    """The big numbers: its node, its GPUs, their NUMA nodes and its locality ratios."""
    where = ", ".join(f"NUMA {n}" for n in data.gpu_numa) or "-"
    return stats(
        [
            (ref.node, "node"),
            (", ".join(f"GPU {g}" for g in data.gpus) or "none", "its GPUs"),
            (where, "NUMA node(s) of its GPUs"),
            *(
                (f"{value:.0%}", f"{resource} locality")
                for resource, value in sorted(data.latest_locality.items())
            ),
        ]
    )


def _recommendations(clients: Clients, ref: WorkloadRef) -> Any:
    """The advisor's recommendations about this workload, or why there are none."""
    recs, advisor_error = report(clients)
    mine = [r for r in recs if (r.target.node, r.target.workload) == (ref.node, ref.workload)]
    return recommendation_list(mine, advisor_error or "no recommendation concerns this workload")


def _figures(data: WorkloadData) -> tuple[Any, ...]:
    """Where its threads and memory run against its GPUs' NUMA nodes, and its locality."""
    gpu_numa = {str(n) for n in data.gpu_numa}
    return (
        lines(
            data.cores, "numa_node", "Where its threads run (cores busy per NUMA node)",
            label="NUMA", unit="cores", stacked=True, marked=gpu_numa,
        ),
        lines(
            data.memory, "numa_node", "Where its memory is (per NUMA node)",
            label="NUMA", unit="GiB", scale=GIB, stacked=True, marked=gpu_numa,
        ),
        lines(
            data.locality, "resource", "Locality ratio (1 = all on its GPUs' NUMA nodes)",
            label="", percent=True,
        ),
    )  # fmt: skip
