"""The fabric page (``/fabric?switch=NAME&job=WORKLOAD``): the network between nodes with the
GPU occupancy below every switch and in every block, the multi-node jobs drawn across it,
and the selected job's path.

The fabric is the model the app was started with (``toposcope dash --fabric-file`` and its
siblings); occupancy and jobs come from Prometheus on every refresh. The overview draws the
levels from the top while they stay readable (:mod:`.fabric_layout`); choosing a switch
drills down to it and what hangs below it, down to its leaves' nodes. :func:`fabric_view`
computes every component (public so that ``bench/dash_fabric.py`` times exactly what the
page renders), :func:`register` wires it to the pickers and the app's refresh inputs.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import Dash, Input, Output, dcc, html

from toposcope.dashboards.app.charts import empty_figure
from toposcope.dashboards.app.components import (
    banner,
    card,
    given_options,
    graph,
    href,
    query_value,
    row,
    stats,
    titled_card,
)
from toposcope.dashboards.app.fabric_data import (
    FabricData,
    FabricJob,
    load_fabric_data,
)
from toposcope.dashboards.app.fabric_figure import (
    blocks_figure,
    describe_job,
    share,
    tree_figure,
)
from toposcope.dashboards.app.fabric_layout import FabricIndex, job_path
from toposcope.dashboards.app.promclient import PrometheusError
from toposcope.dashboards.app.sources import REFRESH_INPUTS, Clients, prom_failed
from toposcope.fabric.model import level_name

FABRIC = "/fabric"
#: the most jobs listed in the table
MAX_JOB_ROWS = 200
#: what the page says when the app has no fabric
NO_FABRIC = (
    "no fabric: start the app with the cluster's network fabric (toposcope dash "
    "--fabric-file FILE, --fabric-slurm-topology FILE or --fabric-ibnetdiscover FILE, the sources "
    "toposcope fabric show reads)"
)


def _picker(picker_id: str, value: str | None, placeholder: str, label: str) -> html.Div:
    return html.Div(
        [
            html.Label(label),
            dcc.Dropdown(
                id=picker_id,
                options=given_options(value),
                value=value,
                placeholder=placeholder,
            ),
        ],
        style={"flex": "1 1 300px", "maxWidth": "480px"},
    )


def layout(index: FabricIndex | None, switch: str | None, job: str | None) -> html.Div:
    """Skeleton of the fabric page; ``switch`` and ``job`` are the URL's choices."""
    if index is None:
        return html.Div([banner(NO_FABRIC, "info")], id="fabric-page")
    return html.Div(
        [
            html.Div(id="fabric-message"),
            html.Div(id="fabric-summary", className="row"),
            card(
                html.Div(
                    [
                        html.Div(
                            [
                                html.Label("drill down to a switch"),
                                dcc.Dropdown(
                                    id="fabric-switch",
                                    options=drill_downs(index),
                                    value=chosen_switch(index, switch),
                                    placeholder="the whole fabric",
                                ),
                            ],
                            style={"flex": "1 1 300px", "maxWidth": "480px"},
                        ),
                        _picker("fabric-job", job, "no job selected", "multi-node job"),
                    ],
                    className="row",
                ),
            ),
            card(graph("fabric-tree")),
            row(card(graph("fabric-blocks")), titled_card("Selected job", "fabric-job-detail")),
            titled_card("Multi-node jobs (most spread beyond need first)", "fabric-jobs"),
        ],
        id="fabric-page",
    )


def _figure_text(job: FabricJob, name: str, digits: str = ".0f") -> str:
    value = job.figures.get(name)
    return "-" if value is None else format(value, digits)


def _domains_text(job: FabricJob, level: str) -> str:
    spanned = job.domains.get(level)
    if spanned is None:
        return "-"
    needed = job.needed.get(level)
    return f"{spanned:.0f}" + (f" / {needed:.0f}" if needed is not None else "")


def _traffic(job: FabricJob) -> str:
    """Bytes/s through the job's nodes' ports, per direction."""
    if not job.traffic:
        return "-"
    return ", ".join(f"{d or 'all'} {_rate(v)}" for d, v in sorted(job.traffic.items()))


def _rate(value: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B/s"


def _level_text(job: FabricJob, name: str) -> str:
    value = job.figures.get(name)
    return "-" if value is None else level_name(int(value))


def jobs_table(jobs: tuple[FabricJob, ...], switch: str | None) -> Any:
    """The multi-node jobs, each linking to the page with it selected."""
    if not jobs:
        return banner(
            "no multi-node jobs: Prometheus has no toposcope_job_fabric_node_gpus (the cluster "
            "exporter with a fabric publishes them for running jobs on more than one node)",
            "info",
        )
    head = [
        "job",
        "partition",
        "nodes",
        "GPUs",
        "leaf domains / needed",
        "block domains / needed",
        "crosses",
        "could cross",
        "rail-aligned",
        "network traffic",
    ]
    rows = []
    for job in jobs[:MAX_JOB_ROWS]:
        aligned = job.figures.get("rail_aligned")
        params = {"job": job.workload} | ({"switch": switch} if switch else {})
        rows.append(
            html.Tr(
                [
                    html.Td(dcc.Link(job.workload, href=href(FABRIC, **params))),
                    html.Td(job.partition),
                    html.Td(str(len(job.node_gpus))),
                    html.Td(_figure_text(job, "gpus")),
                    html.Td(_domains_text(job, "leaf")),
                    html.Td(_domains_text(job, "block")),
                    html.Td(_level_text(job, "top_level")),
                    html.Td(_level_text(job, "top_level_needed")),
                    html.Td("-" if aligned is None else "yes" if aligned >= 1 else "no"),
                    html.Td(_traffic(job)),
                ],
                style={"color": "#b45309"} if job.spread else None,
            )
        )
    note = (
        [banner(f"the first {MAX_JOB_ROWS} of {len(jobs)} jobs", "info")]
        if len(jobs) > MAX_JOB_ROWS
        else []
    )
    table = html.Table(
        [html.Thead(html.Tr([html.Th(h) for h in head])), html.Tbody(rows)], className="simple"
    )
    return html.Div([*note, table])


def job_detail(index: FabricIndex, job: FabricJob | None) -> Any:
    """What the selected job spans and the path its traffic takes through the fabric."""
    if job is None:
        return banner("choose a multi-node job to see its path", "info")
    path = job_path(index, job.node_gpus)
    if path.top_level is not None:
        top = level_name(path.top_level)
    elif path.leaves:
        top = "no switch joins all its nodes in the model"
    else:
        top = "no switch is above its nodes in the model"
    by_level: dict[int, list[str]] = {}
    for name in path.switches:
        by_level.setdefault(index.level(name), []).append(name)
    lines = [
        html.P(describe_job(job)),
        html.P(f"its traffic crosses up to: {top}"),
        html.Ul(
            [
                html.Li(f"{level_name(level)}: {', '.join(sorted(names)[:40])}")
                for level, names in sorted(by_level.items(), reverse=True)
            ]
        ),
        html.P(
            "nodes: "
            + ", ".join(f"{n} ({g:.0f} GPUs)" for n, g in sorted(job.node_gpus.items())[:64])
        ),
    ]
    if path.unknown:
        lines.append(
            banner(f"not in the fabric: {', '.join(path.unknown[:20])}", "info"),
        )
    return html.Div(lines, id="fabric-path")


def _summary(index: FabricIndex, data: FabricData) -> list[html.Div]:
    held, up = float(data.held.sum()), float(data.up.sum())
    ratio = share(held, up)
    levels = sorted({s.level for s in index.fabric.switches}, reverse=True)
    return stats(
        [
            (f"{len(index.node_names):,}", "nodes"),
            (
                f"{len(index.fabric.switches):,}",
                f"switches ({'/'.join(level_name(lv) for lv in levels)})",
            ),
            (f"{len(index.fabric.blocks):,}", "blocks"),
            (f"{held:,.0f} / {up:,.0f}", "GPUs held / up"),
            ("-" if pd.isna(ratio) else f"{ratio:.0%}", "GPU occupancy"),
            (str(len(data.jobs)), "multi-node jobs"),
            (str(sum(1 for j in data.jobs if j.spread)), "spread beyond need"),
        ]
    )


def _messages(index: FabricIndex, data: FabricData) -> list[Any]:
    messages: list[Any] = []
    missing = int((~data.reported).sum())
    if missing == len(index.node_names):
        messages.append(
            banner(
                "no fabric node reports GPU series: are its nodes' exporters scraped, under the "
                "names the fabric gives them? (toposcope_gpu_up)",
                "info",
            )
        )
    elif missing:
        messages.append(banner(f"{missing:,} fabric node(s) report no GPU series", "info"))
    if data.outside:
        messages.append(
            banner(f"{data.outside:,} node(s) report GPUs but are not in the fabric", "info")
        )
    if data.dropped:
        messages.append(banner(f"{data.dropped} series answered NaN and are not shown", "info"))
    return messages


def render_fabric(
    index: FabricIndex, data: FabricData, switch: str | None, chosen: str | None
) -> tuple[Any, ...]:
    """The page's components from loaded data (no I/O): message, summary, tree figure,
    blocks figure, job detail, jobs table, then the job picker's options.
    """
    view = index.view(switch)
    selected = data.job(chosen)
    path = job_path(index, selected.node_gpus) if selected is not None else None
    options = [
        {"label": f"{j.workload} ({len(j.node_gpus)} nodes)", "value": j.workload}
        for j in data.jobs
    ]
    return (
        _messages(index, data),
        _summary(index, data),
        tree_figure(index, view, data, selected, path),
        blocks_figure(index, view, data, selected),
        job_detail(index, selected),
        jobs_table(data.jobs, switch),
        options,
    )


def fabric_view(
    clients: Clients, index: FabricIndex, switch: str | None, chosen: str | None
) -> tuple[Any, ...]:
    """Everything the page shows now; a Prometheus failure is shown, never raised."""
    switch = chosen_switch(index, switch)
    try:
        data = load_fabric_data(clients.prometheus, index, clients.node_label)
    except PrometheusError as exc:
        message = prom_failed(exc)
        empty = empty_figure(message, "Fabric")
        return banner(message), [], empty, empty, banner(message), banner(message), []
    return render_fabric(index, data, switch, chosen)


def drill_downs(index: FabricIndex) -> list[dict[str, str]]:
    """The switch picker's options: every switch with switches below it, highest first."""
    return [
        {"label": f"{s.name} ({level_name(s.level)})", "value": s.name}
        for s in sorted(index.fabric.switches, key=lambda s: (-s.level, s.name))
        if s.switches
    ]


def chosen_switch(index: FabricIndex, switch: str | None) -> str | None:
    """``switch`` when the page can drill down to it, else ``None`` (the whole fabric)."""
    if switch is None or switch not in index.below:
        return None
    return switch if index.fabric.switch(switch).switches else None


def register(app: Dash, clients: Clients, index: FabricIndex | None) -> None:
    """Fill the fabric page when a switch or job is chosen and on every refresh; follow a
    link of the jobs table (which changes only the URL's query) into the pickers.
    """
    if index is None:
        return

    @app.callback(
        Output("fabric-switch", "value"),
        Output("fabric-job", "value"),
        Input("url", "search"),
        prevent_initial_call=True,
    )
    def follow(search: str | None) -> tuple[str | None, str | None]:
        return chosen_switch(index, query_value(search, "switch")), query_value(search, "job")

    @app.callback(
        Output("fabric-message", "children"),
        Output("fabric-summary", "children"),
        Output("fabric-tree", "figure"),
        Output("fabric-blocks", "figure"),
        Output("fabric-job-detail", "children"),
        Output("fabric-jobs", "children"),
        Output("fabric-job", "options"),
        Input("fabric-switch", "value"),
        Input("fabric-job", "value"),
        *REFRESH_INPUTS,
    )
    def fill(
        switch: str | None, job: str | None, _tick: int | None, _clicks: int | None, _range: str
    ) -> tuple[Any, ...]:
        return fabric_view(clients, index, switch, job)
