"""The workload page (``/workload?workload=NODE/NAME``): where its threads and memory are
against its GPUs' NUMA nodes, its locality and the recommendations about it.
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
    recommendation_list,
    stats,
)
from toposcope.dashboards.app.promclient import PrometheusError
from toposcope.dashboards.app.sources import (
    REFRESH_INPUTS,
    Clients,
    prom_failed,
    report,
)
from toposcope.dashboards.app.workload_data import WorkloadRef, load_workload, load_workloads


def layout(workload: str | None) -> html.Div:
    """Skeleton of the workload page (``NODE/NAME`` from the URL, else the first one)."""
    return html.Div(
        [
            picker("workload-select", workload, "choose a workload"),
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


def register(app: Dash, clients: Clients) -> None:
    """Fill the workload page when the workload is chosen and on every refresh."""
    graphs = ("workload-cores", "workload-memory", "workload-locality")

    @app.callback(
        Output("workload-select", "options"),
        Output("workload-select", "value"),
        Output("workload-message", "children"),
        Output("workload-summary", "children"),
        *(Output(g, "figure") for g in graphs),
        Output("workload-recs", "children"),
        Input("workload-select", "value"),
        *REFRESH_INPUTS,
    )
    def workload(
        chosen: str | None, _tick: int | None, _clicks: int | None, range_: str
    ) -> tuple[Any, ...]:
        def failed(text: str, kind: str = "error", options: Any = ()) -> tuple[Any, ...]:
            empty = empty_figure(text)
            return list(options), chosen, banner(text, kind), [], empty, empty, empty, []

        try:
            index = clients.node_index()
            refs = load_workloads(clients.prometheus, index)
        except PrometheusError as exc:
            return failed(prom_failed(exc))
        options = [{"label": r.key, "value": r.key} for r in refs]
        if not refs:
            return failed(
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
            return failed(prom_failed(exc), options=options)
        gpu_numa = {str(n) for n in data.gpu_numa}
        where = ", ".join(f"NUMA {n}" for n in data.gpu_numa) or "-"
        summary = stats(
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
        recs, advisor_error = report(clients)
        mine = [r for r in recs if (r.target.node, r.target.workload) == (ref.node, ref.workload)]
        listed = recommendation_list(
            mine, advisor_error or "no recommendation concerns this workload"
        )
        notes = (
            []
            if chosen in (None, key)
            else [banner(f"no workload {chosen!r}; showing {key}", "info")]
        )
        return (
            options,
            key,
            notes,
            summary,
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
            listed,
        )  # fmt: skip
