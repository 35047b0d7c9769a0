"""The batch queue page (``/queue``): what waits and why, per partition and per account.

It reads the ``toposcope_queue_*`` series that ``toposcope slurm exporter`` publishes (any
scheduler backend may), as instant queries: per partition its GPUs by state, fragmented GPUs,
pending jobs by toposcope's reason and the oldest wait of the jobs that could start; per
account its GPUs held against its fair share, the GPUs it asks for and its oldest wait.
:func:`load_queue` queries, :func:`render_queue` builds the components (no I/O),
:func:`register` wires the page's callback to the app's refresh inputs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from dash import Dash, Input, Output, html

from toposcope.catalogue.queue_metrics import PENDING_REASONS
from toposcope.dashboards.app.charts import empty_figure
from toposcope.dashboards.app.components import (
    banner,
    graph_row,
    row,
    simple_table,
    stats,
    titled_card,
)
from toposcope.dashboards.app.promclient import PromClient, PrometheusError
from toposcope.dashboards.app.queries import metric

LOG = logging.getLogger("toposcope.dashboards.app")

QUEUE = "/queue"
#: pending reasons of jobs that could start if resources were there
STARTABLE = 'reason=~"resources|topology|priority"'
GPUS = f"sum by (partition, state) ({metric('toposcope_queue_gpus')})"
FRAGMENTED = f"sum by (partition) ({metric('toposcope_queue_fragmented_gpus')})"
PENDING = f"sum by (partition, reason) ({metric('toposcope_queue_pending_jobs')})"
OLDEST = (
    f"max by (partition) ({metric('toposcope_queue_pending_oldest_wait_seconds')}{{{STARTABLE}}})"
)


def _by_account(name: str, aggregation: str = "sum") -> str:
    return f"{aggregation} by (partition, account) ({metric(name)})"


#: per-account figures: table column -> query
ACCOUNT_QUERIES: dict[str, str] = {
    "GPUs held": _by_account("toposcope_queue_account_allocated_gpus"),
    "fair share": _by_account("toposcope_queue_account_fair_share_gpus"),
    "GPUs asked for": _by_account("toposcope_queue_account_pending_gpus"),
    "oldest wait (s)": _by_account("toposcope_queue_account_oldest_wait_seconds", "max"),
}
PARTITION_COLUMNS = ("free", "allocated", "unavailable", "fragmented", "pending", "on topology")


@dataclass(frozen=True)
class QueueData:
    """The page's tables: ``partitions`` (one row per partition), ``pending`` (partition,
    reason, jobs) and ``accounts`` (one row per partition and account)."""

    partitions: pd.DataFrame
    pending: pd.DataFrame
    accounts: pd.DataFrame


def _frame(prom: PromClient, expr: str, labels: Sequence[str], value: str) -> pd.DataFrame:
    rows = [
        {**{label: s.labels.get(label, "") for label in labels}, value: s.value}
        for s in prom.query(expr).samples
    ]
    return pd.DataFrame(rows, columns=[*labels, value])


def load_queue(prom: PromClient) -> QueueData:
    """Every partition's and account's figures now (PrometheusError when it cannot answer)."""
    gpus = _frame(prom, GPUS, ("partition", "state"), "gpus")
    partitions = gpus.pivot_table(index="partition", columns="state", values="gpus", aggfunc="sum")
    pending = _frame(prom, PENDING, ("partition", "reason"), "jobs")
    by_reason = pending.pivot_table(index="partition", columns="reason", values="jobs")
    extra = pd.DataFrame(
        {
            "fragmented": _frame(prom, FRAGMENTED, ("partition",), "v").set_index("partition")["v"],
            "pending": by_reason.sum(axis=1) if not by_reason.empty else pd.Series(dtype=float),
            "on topology": by_reason.get("topology", pd.Series(dtype=float)),
            "oldest wait (s)": _frame(prom, OLDEST, ("partition",), "v").set_index("partition")[
                "v"
            ],
        }
    )
    table = partitions.join(extra, how="outer") if not partitions.empty else extra
    table = table.reindex(columns=[*PARTITION_COLUMNS, "oldest wait (s)"]).reset_index()
    accounts: pd.DataFrame | None = None
    for column, expr in ACCOUNT_QUERIES.items():
        frame = _frame(prom, expr, ("partition", "account"), column)
        accounts = frame if accounts is None else accounts.merge(frame, how="outer")
    assert accounts is not None
    return QueueData(
        table.rename(columns={"index": "partition"}),
        pending,
        accounts.sort_values(["partition", "account"]),
    )


def _shown(frame: pd.DataFrame) -> pd.DataFrame:
    """Counts as whole numbers, waits in minutes, missing figures as ``-``."""
    out = frame.copy()
    for column in out.columns:
        if column.startswith("oldest wait"):
            out[column] = out[column].map(lambda v: "-" if pd.isna(v) else f"{v / 60:.0f} min")
        elif column == "fair share":
            out[column] = out[column].map(lambda v: "-" if pd.isna(v) else f"{v:.1f}")
        elif out[column].dtype.kind == "f":
            out[column] = out[column].map(lambda v: "-" if pd.isna(v) else f"{v:.0f}")
    return out.rename(columns={c: c.replace(" (s)", "") for c in out.columns})


def pending_figure(pending: pd.DataFrame) -> go.Figure:
    """Stacked bars: pending jobs per partition, one colour per reason."""
    if pending.empty:
        return empty_figure("no pending jobs")
    figure = go.Figure()
    for reason in PENDING_REASONS:
        part = pending[pending["reason"] == reason]
        if not part.empty:
            figure.add_bar(x=part["partition"], y=part["jobs"], name=reason)
    figure.update_layout(
        barmode="stack", title="Pending jobs by reason", margin={"t": 40, "b": 30}, height=320
    )
    return figure


def render_queue(data: QueueData) -> tuple[Any, ...]:
    """Message, summary cards, pending figure, partitions table and accounts table."""
    parts = data.partitions
    if parts.empty:
        note = banner(
            "Prometheus has no queue series: is it scraping `toposcope slurm exporter`? "
            "(no toposcope_queue_gpus)",
            "info",
        )
        empty = banner("nothing to show", "info")
        return note, [], empty_figure("no queue series"), empty, empty
    total = parts[list(PARTITION_COLUMNS)].sum()
    summary = stats(
        [
            (f"{total['pending']:.0f}", "pending jobs"),
            (f"{total['on topology']:.0f}", "pending on topology"),
            (f"{total['free']:.0f}", "free GPUs"),
            (f"{total['fragmented']:.0f}", "fragmented GPUs"),
            (str(len(parts)), "partitions"),
        ]
    )
    message = (
        banner(
            f"{total['on topology']:.0f} job(s) wait on topology: enough GPUs are free in their "
            "partition, but split across nodes",
            "info",
        )
        if total["on topology"] > 0
        else html.Div()
    )
    return (
        message,
        summary,
        pending_figure(data.pending),
        simple_table(_shown(parts)),
        simple_table(_shown(data.accounts), empty="no accounts with jobs"),
    )


def queue_page() -> html.Div:
    """Skeleton of the queue page."""
    return html.Div(
        [
            html.Div(id="queue-message"),
            html.Div(id="queue-summary", className="row"),
            graph_row("queue-pending"),
            row(
                titled_card("Partitions", "queue-partitions"),
                titled_card("Accounts", "queue-accounts"),
            ),
        ],
        id="queue-page",
    )


def queue_view(prom: PromClient) -> tuple[Any, ...]:
    """The page's components now; a Prometheus failure is shown, never raised."""
    try:
        return render_queue(load_queue(prom))
    except PrometheusError as exc:
        LOG.warning("Prometheus: %s", exc)
        message = banner(str(exc))
        return message, [], empty_figure(str(exc)), message, message


def register(app: Dash, prom: PromClient, inputs: Sequence[Input]) -> None:
    """Fill the queue page on every refresh ``inputs`` fire."""

    @app.callback(
        Output("queue-message", "children"),
        Output("queue-summary", "children"),
        Output("queue-pending", "figure"),
        Output("queue-partitions", "children"),
        Output("queue-accounts", "children"),
        *inputs,
    )
    def fill(*_: object) -> tuple[Any, ...]:
        return queue_view(prom)
