"""The fabric page's figures: the switch tree with the GPU occupancy of the nodes below each
switch, the multi-node jobs drawn across it and the selected job's path; and the blocks.

The tree figure has two parts on one horizontal axis: above, the drawn levels of a
:class:`~.fabric_layout.View` (links, switches coloured by the share of GPUs held below
them, and the leaves' nodes when the view draws them); below, one lane per multi-node job
with a mark at each switch of the lowest drawn row that has some of its nodes below it, so
a job spread over many switches is a long lane. The selected job's lane, switches, links and
nodes are red. Every figure explains itself when it has nothing to draw.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from toposcope.dashboards.app.charts import MARGIN, TEMPLATE, empty_figure
from toposcope.dashboards.app.fabric_data import FabricData, FabricJob
from toposcope.dashboards.app.fabric_layout import FabricIndex, JobPath, View
from toposcope.fabric.model import level_name

#: colours: links, nodes without GPU series, the selected job, jobs spread beyond need, others
LINK = "#b7bec8"
NO_DATA = "#c8ccd2"
SELECTED = "#d62728"
SPREAD = "#ff7f0e"
TIGHT = "#1f77b4"
#: the most job lanes drawn, and the most block rows
MAX_LANES = 25
MAX_BLOCK_ROWS = 600
#: where the leaves' nodes are drawn, under the leaf row (y = 0)
_NODES_TOP, _NODES_BOTTOM = -0.35, -1.35
_COLOURS = {
    "colorscale": "Viridis",
    "cmin": 0.0,
    "cmax": 1.0,
    "colorbar": {"title": {"text": "GPUs held"}, "tickformat": ".0%", "thickness": 12, "len": 0.6},
}


def plain(text: str) -> str:
    """``text`` from metric labels, drawn as it is: plotly reads ``<tags>`` and ``&`` in
    figure text, so they are escaped (a hover's ``%{...}`` is only read in its template).
    """
    return html.escape(text, quote=False)


def _ring(size: float, width: float) -> dict[str, object]:
    """A red open square around a marked switch or node."""
    return {"color": SELECTED, "size": size, "symbol": "square-open", "line": {"width": width}}


def _ring_selected(
    figure: go.Figure, x: Sequence[float | str], y: Sequence[float | str], size: float
) -> None:
    """Ring the selected job's nodes at ``x``/``y`` (nothing when none is drawn)."""
    if x:
        figure.add_scatter(
            x=x,
            y=y,
            mode="markers",
            marker=_ring(size, 2),
            hoverinfo="skip",
            name="selected job's nodes",
        )


def share(held: float, up: float) -> float:
    """GPUs held over GPUs up (NaN without GPUs)."""
    return held / up if up > 0 else float("nan")


def describe_job(job: FabricJob) -> str:
    """One line on a job's size and spread, for hovers and the page."""
    figures = job.figures
    parts = [f"{len(job.node_gpus)} nodes"]
    if "gpus" in figures:
        parts.append(f"{figures['gpus']:.0f} GPUs")
    for level, spanned in sorted(job.domains.items()):
        needed = job.needed.get(level)
        wanted = f" (needs {needed:.0f})" if needed is not None else ""
        parts.append(f"{level} domains {spanned:.0f}{wanted}")
    if "top_level" in figures:
        top = f"crosses {level_name(int(figures['top_level']))}"
        if "top_level_needed" in figures:
            top += f" (needs {level_name(int(figures['top_level_needed']))})"
        parts.append(top)
    return ", ".join(parts)


def _switch_hover(index: FabricIndex, data: FabricData, name: str) -> tuple[str, float]:
    switch = index.fabric.switch(name)
    below = index.below[name]
    held, up = float(data.held[below].sum()), float(data.up[below].sum())
    ratio = share(held, up)
    text = (
        f"{name} ({level_name(switch.level)})<br>{len(below)} nodes, {held:.0f}/{up:.0f} GPUs held"
    )
    if up > 0:
        text += f" ({ratio:.0%})"
    if switch.oversubscription is not None:
        text += f"<br>oversubscription {switch.oversubscription:.2g}:1"
    return text, ratio


def _draw_links(figure: go.Figure, index: FabricIndex, view: View, path: JobPath | None) -> None:
    xs: list[float | None] = []
    ys: list[float | None] = []
    red_x: list[float | None] = []
    red_y: list[float | None] = []
    on_path = path.edges if path is not None else frozenset()
    for parent, child in view.edges:
        segment_x = [view.x[parent], view.x[child], None]
        segment_y = [float(index.level(parent)), float(index.level(child)), None]
        if (parent, child) in on_path:
            red_x += segment_x
            red_y += segment_y
        else:
            xs += segment_x
            ys += segment_y
    line = {"color": LINK, "width": 1}
    figure.add_scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", name="links")
    if red_x:
        figure.add_scatter(
            x=red_x,
            y=red_y,
            mode="lines",
            line={"color": SELECTED, "width": 3},
            hoverinfo="skip",
            name="selected job's links",
        )


def _draw_switches(
    figure: go.Figure, index: FabricIndex, view: View, data: FabricData, path: JobPath | None
) -> None:
    xs, ys, colours, texts, sizes = [], [], [], [], []
    bare_x, bare_y, bare_text = [], [], []
    for level, names in view.rows:
        size = max(6.0, min(18.0, 900.0 / len(names)))
        for name in names:
            text, ratio = _switch_hover(index, data, name)
            if np.isnan(ratio):
                bare_x.append(view.x[name])
                bare_y.append(float(level))
                bare_text.append(text)
                continue
            xs.append(view.x[name])
            ys.append(float(level))
            colours.append(ratio)
            texts.append(text)
            sizes.append(size)
    figure.add_scatter(
        x=xs,
        y=ys,
        mode="markers",
        marker={"color": colours, "coloraxis": "coloraxis", "size": sizes, "symbol": "square"},
        text=texts,
        hovertemplate="%{text}<extra></extra>",
        name="switches",
    )
    if bare_x:
        figure.add_scatter(
            x=bare_x,
            y=bare_y,
            mode="markers",
            marker={"color": NO_DATA, "size": 8, "symbol": "square"},
            text=bare_text,
            hovertemplate="%{text}<extra></extra>",
            name="switches without GPU series below",
        )
    if path is not None:
        marked = [(view.x[s], float(index.level(s))) for s in path.switches if s in view.x]
        if marked:
            figure.add_scatter(
                x=[m[0] for m in marked],
                y=[m[1] for m in marked],
                mode="markers",
                marker=_ring(20, 3),
                hoverinfo="skip",
                name="selected job's path",
            )


def _draw_nodes(
    figure: go.Figure, index: FabricIndex, view: View, data: FabricData, job: FabricJob | None
) -> None:
    depth = max(len(nodes) for _, nodes in view.columns)
    step = (_NODES_TOP - _NODES_BOTTOM) / max(depth - 1, 1)
    ys = [_NODES_TOP - r * step for r in range(depth)]
    z = np.full((depth, len(view.columns)), np.nan)
    text = [[""] * len(view.columns) for _ in range(depth)]
    picked_x, picked_y = [], []
    chosen = set(job.node_gpus) if job is not None else set()
    for column, (leaf, nodes) in enumerate(view.columns):
        for r, name in enumerate(nodes):
            at = index.position[name]
            held, up = float(data.held[at]), float(data.up[at])
            z[r, column] = share(held, up)
            block = index.block_of.get(name)
            text[r][column] = (
                f"{name} under {leaf}<br>{held:.0f}/{up:.0f} GPUs held"
                + (f"<br>block {block}" if block else "")
                + ("" if data.reported[at] else "<br>no GPU series")
            )
            if name in chosen:
                picked_x.append(view.x[leaf])
                picked_y.append(ys[r])
    xs = [view.x[leaf] for leaf, _ in view.columns]
    present = [[0.0 if r < len(nodes) else None for _, nodes in view.columns] for r in range(depth)]
    figure.add_heatmap(  # every node, grey; those with GPU series are drawn over it
        x=xs,
        y=ys,
        z=present,
        text=text,
        colorscale=[[0.0, NO_DATA], [1.0, NO_DATA]],
        showscale=False,
        hovertemplate="%{text}<extra></extra>",
        xgap=1,
        ygap=1,
        name="nodes without GPU series",
    )
    figure.add_heatmap(
        x=xs,
        y=ys,
        z=z,
        text=text,
        coloraxis="coloraxis",
        hovertemplate="%{text}<extra></extra>",
        xgap=1,
        ygap=1,
        name="nodes",
    )
    _ring_selected(figure, picked_x, picked_y, 9)


def _lanes(
    index: FabricIndex, view: View, jobs: Sequence[FabricJob], selected: FabricJob | None
) -> list[tuple[FabricJob, list[float]]]:
    """The jobs drawn (selected first) with the places of the lowest row's switches they use."""
    lowest = view.lowest
    lanes: list[tuple[FabricJob, list[float]]] = []
    ordered = ([selected] if selected is not None else []) + [j for j in jobs if j is not selected]
    mask = np.zeros(len(index.node_names), dtype=np.bool_)
    for job in ordered:
        positions = [index.position[n] for n in job.node_gpus if n in index.position]
        if not positions:
            continue
        mask[positions] = True
        xs = [view.x[s] for s in lowest if mask[index.below[s]].any()]
        mask[positions] = False
        if xs:
            lanes.append((job, sorted(xs)))
        if len(lanes) >= MAX_LANES:
            break
    return lanes


def _draw_lanes(
    figure: go.Figure, lanes: Sequence[tuple[FabricJob, list[float]]], selected: FabricJob | None
) -> None:
    for lane, (job, xs) in enumerate(lanes):
        colour = SELECTED if job is selected else SPREAD if job.spread else TIGHT
        figure.add_scatter(
            x=xs,
            y=[-lane] * len(xs),
            mode="lines+markers",
            line={"color": colour, "width": 4 if job is selected else 2},
            marker={"color": colour, "size": 8},
            name=job.workload,
            text=[plain(f"{job.workload}: {describe_job(job)}")] * len(xs),
            hovertemplate="%{text}<extra></extra>",
            row=2,
            col=1,
        )


def tree_figure(
    index: FabricIndex,
    view: View,
    data: FabricData,
    selected: FabricJob | None = None,
    path: JobPath | None = None,
) -> go.Figure:
    """The switch tree of ``view`` with occupancy, the jobs across it and ``selected``'s path."""
    where = f"below {view.root}" if view.root else "the whole fabric"
    drawn = sum(len(names) for _, names in view.rows)
    title = f"Fabric: {where} ({drawn:,} switches drawn, {len(view.nodes):,} nodes)"
    if not view.rows:
        return empty_figure("the fabric has no switches", title)
    lanes = _lanes(index, view, data.jobs, selected)
    top_height = 90 * len(view.rows) + (160 if view.columns else 40)
    lane_height = 40 + 24 * max(len(lanes), 1)
    figure = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        row_heights=[top_height, lane_height],
    )
    _draw_links(figure, index, view, path)
    _draw_switches(figure, index, view, data, path)
    if view.columns:
        _draw_nodes(figure, index, view, data, selected)
    _draw_lanes(figure, lanes, selected)
    levels = [level for level, _ in view.rows]
    ticks = {float(level): level_name(level) for level in levels}
    if view.columns:
        ticks[(_NODES_TOP + _NODES_BOTTOM) / 2] = "nodes"
    notes = []
    if view.hidden:
        notes.append(f"{view.hidden:,} switches below are not drawn: choose a switch to drill down")
    if view.edges_left_out:
        notes.append(f"{view.edges_left_out:,} links not drawn")
    if not lanes:
        notes.append("no multi-node jobs here")
    figure.update_layout(
        template=TEMPLATE,
        title={"text": title + (f"<br><sub>{'; '.join(notes)}</sub>" if notes else "")},
        height=top_height + lane_height + 90,
        margin={**MARGIN, "l": 160, "t": 80 if notes else 50},
        showlegend=False,
        coloraxis=_COLOURS,
        uirevision=f"fabric-{view.root}",
        hoverlabel={"align": "left"},
    )
    figure.update_xaxes(range=[0, 1], showticklabels=False, showgrid=False, zeroline=False)
    figure.update_yaxes(
        tickvals=list(ticks),
        ticktext=list(ticks.values()),
        showgrid=False,
        zeroline=False,
        row=1,
        col=1,
    )
    figure.update_yaxes(
        tickvals=[-lane for lane in range(len(lanes))],
        ticktext=[plain(job.workload) for job, _ in lanes],
        range=[-max(len(lanes), 1) + 0.5, 0.5],
        showgrid=False,
        zeroline=False,
        title={"text": "jobs"},
        row=2,
        col=1,
    )
    return figure


def blocks_figure(
    index: FabricIndex, view: View, data: FabricData, selected: FabricJob | None = None
) -> go.Figure:
    """Each block with its nodes (one cell each) coloured by the share of GPUs held."""
    title = "Blocks and their nodes' GPUs held"
    in_view = set(view.nodes.tolist()) if view.root else None
    blocks = [
        b
        for b in index.fabric.blocks
        if in_view is None or any(index.position[n] in in_view for n in b.nodes)
    ]
    if not blocks:
        what = "this fabric has no blocks" if not index.fabric.blocks else "no blocks here"
        return empty_figure(what, title)
    if len(blocks) > MAX_BLOCK_ROWS:
        title += f" (the first {MAX_BLOCK_ROWS} of {len(blocks)})"
        blocks = blocks[:MAX_BLOCK_ROWS]
    width = max(len(b.nodes) for b in blocks)
    z = np.full((len(blocks), width), np.nan)
    text = [[""] * width for _ in blocks]
    chosen: Mapping[str, float] = selected.node_gpus if selected is not None else {}
    marked_x, marked_y = [], []
    for r, block in enumerate(blocks):
        for c, name in enumerate(block.nodes):
            at = index.position[name]
            held, up = float(data.held[at]), float(data.up[at])
            z[r, c] = share(held, up)
            text[r][c] = f"{name} in {block.name}<br>{held:.0f}/{up:.0f} GPUs held"
            if name in chosen:
                marked_x.append(c)
                marked_y.append(block.name)
    names = [b.name for b in blocks]
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(width)),
            y=names,
            text=text,
            coloraxis="coloraxis",
            hovertemplate="%{text}<extra></extra>",
            xgap=1,
            ygap=1 if len(blocks) <= 60 else 0,
        )
    )
    _ring_selected(figure, marked_x, marked_y, 10)
    figure.update_layout(
        template=TEMPLATE,
        title=title,
        height=max(260, min(900, 90 + 18 * len(blocks))),
        margin=MARGIN,
        showlegend=False,
        coloraxis=_COLOURS,
        xaxis={"title": {"text": "node in block"}, "showgrid": False},
        yaxis={
            "type": "category",
            "autorange": "reversed",
            "showticklabels": len(blocks) <= 60,
        },
        uirevision=f"blocks-{view.root}",
    )
    return figure
