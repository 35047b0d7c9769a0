"""Plotly charts of the Dash app from the pages' frames: the cluster heatmaps and locality
bars, and the time-series lines of the node and workload pages.

Every builder returns a figure that explains itself when it has nothing to draw
(:func:`empty_figure`), never blank axes. Figures carry a ``uirevision`` so that a refresh
keeps the operator's zoom.
"""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd
import plotly.graph_objects as go

from toposcope.dashboards.app.cluster_data import ClusterData, heatmap_matrix

#: above this many nodes the heatmaps hide row labels and the locality chart shows the worst
MANY_NODES = 60
WORST_SHOWN = 40
GIB = 1024.0**3
#: the plotly template and margins every figure uses
TEMPLATE = "plotly_white"
MARGIN = {"l": 60, "r": 20, "t": 50, "b": 40}


def empty_figure(message: str, title: str = "") -> go.Figure:
    """A figure with no axes that says why there is nothing to draw."""
    figure = go.Figure()
    figure.update_layout(
        template=TEMPLATE,
        title=title,
        xaxis={"visible": False},
        yaxis={"visible": False},
        height=260,
        margin=MARGIN,
        annotations=[
            {
                "text": message,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
                "font": {"size": 14, "color": "#666"},
            }
        ],
    )
    return figure


def gpu_heatmap(cluster: ClusterData, column: str, title: str) -> go.Figure:
    """Nodes by GPU index, coloured by ``column`` (a 0..1 ratio); lost GPUs say so."""
    if cluster.gpus.empty:
        return empty_figure("no GPU series in Prometheus (no GPU nodes, or none scraped)", title)
    matrix = heatmap_matrix(cluster.gpus, column)
    rows = len(matrix.index)
    lost = {
        (n, g)
        for n, g in cluster.gpus.loc[cluster.gpus["up"] != 1, ["node", "gpu"]].itertuples(
            index=False
        )
    }
    text = [
        [
            f"{v:.0%}" if pd.notna(v) else ("lost" if (node, gpu) in lost else "")
            for gpu, v in zip(matrix.columns, row, strict=True)
        ]
        for node, row in zip(matrix.index, matrix.to_numpy(), strict=True)
    ]
    figure = go.Figure(
        go.Heatmap(
            z=matrix.to_numpy(),
            x=[f"GPU {c}" for c in matrix.columns],
            y=list(matrix.index),
            zmin=0.0,
            zmax=1.0,
            colorscale="Viridis",
            colorbar={"tickformat": ".0%", "thickness": 12},
            text=text,
            texttemplate="%{text}" if rows <= MANY_NODES else None,
            hovertemplate="%{y} %{x}: %{text}<extra></extra>",
            xgap=2,
            ygap=2 if rows <= MANY_NODES else 0,
        )
    )
    figure.update_layout(
        template=TEMPLATE,
        title=title,
        height=max(260, min(900, 60 + 26 * rows)),
        margin=MARGIN,
        plot_bgcolor="#ffffff",
        yaxis={"autorange": "reversed", "showticklabels": rows <= MANY_NODES, "type": "category"},
        uirevision=title,
    )
    return figure


def locality_bars(cluster: ClusterData) -> go.Figure:
    """Each node's locality score (mean of its workloads' ratios), worst first."""
    title = "Locality score per node (1 = every workload next to its GPUs)"
    scores = cluster.locality.sort_values(["score", "node"])
    if scores.empty:
        return empty_figure(
            "no workload locality series: the exporters track no workloads (or run without "
            "the workloads collector)",
            title,
        )
    if len(scores) > MANY_NODES:
        title = f"{title}: the {WORST_SHOWN} lowest of {len(scores)} nodes"
        scores = scores.head(WORST_SHOWN)
    colours = [
        "#d62728" if s < 0.5 else "#ff7f0e" if s < 0.8 else "#2ca02c" for s in scores["score"]
    ]
    figure = go.Figure(
        go.Bar(
            x=scores["node"],
            y=scores["score"],
            marker_color=colours,
            hovertemplate="%{x}: %{y:.2f}<extra></extra>",
        )
    )
    figure.update_layout(
        template=TEMPLATE,
        title=title,
        height=300,
        margin=MARGIN,
        yaxis={"range": [0, 1.05], "tickformat": ".0%"},
        xaxis={"type": "category"},
        uirevision="locality",
    )
    return figure


def lines(
    frame: pd.DataFrame,
    key: str,
    title: str,
    *,
    label: str,
    unit: str = "",
    scale: float = 1.0,
    percent: bool = False,
    stacked: bool = False,
    empty: str = "no series for this range",
    marked: Collection[str] = (),
) -> go.Figure:
    """One line per value of ``key`` over ``time``; ``marked`` keys get a suffix and width."""
    if frame.empty:
        return empty_figure(empty, title)
    figure = go.Figure()
    ordered = sorted(frame[key].unique(), key=lambda k: (len(str(k)), str(k)))
    for value in ordered:
        part = frame[frame[key] == value].sort_values("time")
        name = f"{label} {value}"
        if str(value) in marked:
            name += " (GPU-local)"
        figure.add_trace(
            go.Scatter(
                x=part["time"],
                y=part["value"] / scale,
                name=name,
                mode="lines",
                stackgroup="one" if stacked else None,
                line={"width": 3 if str(value) in marked else 1.5},
            )
        )
    figure.update_layout(
        template=TEMPLATE,
        title=title,
        height=300,
        margin=MARGIN,
        yaxis={"title": unit, "tickformat": ".0%" if percent else None, "rangemode": "tozero"},
        legend={"orientation": "h", "y": -0.2},
        hovermode="x unified",
        uirevision=title,
    )
    return figure
