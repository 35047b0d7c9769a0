"""The cluster page (``/``): GPU use and memory heatmaps, node locality, idle GPUs and the top
recommendations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from dash import Dash, Output, html

from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.charts import empty_figure, gpu_heatmap, locality_bars
from toposcope.dashboards.app.cluster_data import ClusterData, load_cluster
from toposcope.dashboards.app.components import (
    NODE,
    banner,
    graph_row,
    recommendation_list,
    row,
    simple_table,
    stats,
    titled_card,
)
from toposcope.dashboards.app.promclient import PrometheusError
from toposcope.dashboards.app.sources import (
    REFRESH_INPUTS,
    Clients,
    prom_failed,
    report,
)
from toposcope.report.recommendation import Recommendation

TOP_RECOMMENDATIONS = 10


def layout() -> html.Div:
    """Skeleton of the cluster page."""
    return html.Div(
        [
            html.Div(id="cluster-message"),
            html.Div(id="cluster-summary", className="row"),
            graph_row("cluster-util", "cluster-memory"),
            graph_row("cluster-locality"),
            row(
                titled_card("Idle GPUs", "cluster-idle"),
                titled_card("Top recommendations", "cluster-recs"),
            ),
        ],
        id="cluster-page",
    )


def cluster_view(clients: Clients, range_: str) -> tuple[Any, ...]:
    """Everything the cluster page shows: message, summary, three figures, idle, top recs.

    Public so that ``bench/dash_render.py`` times exactly what the page renders.
    """
    try:
        cluster = load_cluster(clients.prometheus, range_, clients.node_label)
    except PrometheusError as exc:
        message = prom_failed(exc)
        empty = empty_figure(message)
        recs, advisor_error = report(clients)
        top = recommendation_list(recs[:TOP_RECOMMENDATIONS], advisor_error or "no recommendations")
        return banner(message), [], empty, empty, empty, banner(message), top
    recs, advisor_error = report(clients)
    return render_cluster(cluster, recs, advisor_error)


def render_cluster(
    cluster: ClusterData, recs: Sequence[Recommendation], advisor_error: str | None
) -> tuple[Any, ...]:
    """The cluster page's components from loaded data (no I/O)."""
    gpus = cluster.gpus
    messages: list[Any] = []
    if not cluster.nodes:
        messages.append(
            banner(
                "Prometheus has no toposcope series: is it scraping `toposcope exporter` or "
                "`toposcope sim`? (no toposcope_exporter_build_info)",
                "info",
            )
        )
    elif gpus.empty:
        messages.append(banner("no GPUs: the scraped nodes report no GPU series", "info"))
    if cluster.dropped:
        messages.append(banner(f"{cluster.dropped} series answered NaN and are not shown", "info"))
    idle = cluster.idle
    up = int((gpus["up"] == 1).sum()) if not gpus.empty else 0
    lost = int((gpus["up"] != 1).sum()) if not gpus.empty else 0
    mean_util = gpus.loc[gpus["up"] == 1, "utilization"].mean() if up else float("nan")
    summary = stats(
        [
            (str(len(cluster.nodes)), "nodes"),
            (str(up), "GPUs up"),
            (str(lost), "GPUs lost"),
            (str(len(idle)), f"idle GPUs (<{q.IDLE_UTILIZATION:.0%})"),
            ("-" if pd.isna(mean_util) else f"{mean_util:.0%}", f"mean GPU use, {cluster.range_}"),
            (str(len(recs)), "recommendations"),
        ]
    )
    util = gpu_heatmap(cluster, "utilization", f"GPU utilization (average over {cluster.range_})")
    memory = gpu_heatmap(cluster, "memory_ratio", "GPU memory in use")
    locality = locality_bars(cluster)
    idle_frame = idle[["node", "gpu", "utilization", "holder"]].assign(
        utilization=idle["utilization"].map(lambda v: "-" if pd.isna(v) else f"{v:.1%}"),
        holder=idle["holder"].replace("", "(free)"),
    )
    idle_table = simple_table(
        idle_frame.head(200),
        links={"node": NODE},
        empty="no idle GPUs" if not gpus.empty else "no GPUs to report on",
    )
    top = recommendation_list(
        recs[:TOP_RECOMMENDATIONS],
        advisor_error or "no recommendations: the advisor found nothing worth changing",
    )
    if advisor_error:
        top = html.Div([banner(advisor_error), top])
    return messages, summary, util, memory, locality, idle_table, top


def register(app: Dash, clients: Clients) -> None:
    """Fill the cluster page on every refresh."""

    @app.callback(
        Output("cluster-message", "children"),
        Output("cluster-summary", "children"),
        Output("cluster-util", "figure"),
        Output("cluster-memory", "figure"),
        Output("cluster-locality", "figure"),
        Output("cluster-idle", "children"),
        Output("cluster-recs", "children"),
        *REFRESH_INPUTS,
    )
    def cluster(_tick: int | None, _clicks: int | None, range_: str) -> tuple[Any, ...]:
        return cluster_view(clients, range_)
