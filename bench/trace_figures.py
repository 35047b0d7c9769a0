"""Trace replay's figures per policy and its plot (see :mod:`trace_replay`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plotly.subplots import make_subplots

from toposcope.sim.jobs import JobSpec

if TYPE_CHECKING:
    from trace_engine import Replay


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def figures(run: Replay, jobs: list[JobSpec], span: float, end: float) -> dict[str, Any]:
    """The policy's figures (see the module docstring)."""
    waits = [run.started.get(j.name, end) - j.submit_time for j in jobs]
    jct = [run.finished.get(j.name, end) - j.submit_time for j in jobs]
    slow = [
        1 - (j.duration or 0) / (run.finished[j.name] - run.started[j.name])
        for j in jobs
        if j.name in run.finished and run.finished[j.name] > run.started[j.name]
    ]
    total = sum(len(t.gpus) for t in run.templates.values())
    window = [s for s in run.samples if s[0] <= span] or run.samples
    return {
        "policy": run.policy.name,
        "jobs": len(jobs),
        "finished": len(run.finished),
        "never_started": len(jobs) - len(run.started),
        "mean_queue_s": round(sum(waits) / len(waits), 1),
        "p95_queue_s": round(percentile(waits, 0.95), 1),
        "mean_jct_s": round(sum(jct) / len(jct), 1),
        "mean_locality_slowdown": round(sum(slow) / max(len(slow), 1), 4),
        "gpu_utilisation": round(sum(s[1] for s in window) / (total * len(window)), 4),
        "fragmented_share": round(sum(s[2] for s in window) / (total * len(window)), 4),
        "migrations": sum(1 for e in run.log if e.kind == "migrate"),
        "actions": run.actions,
    }


def plot(path: Path, runs: list[Replay], jobs: list[JobSpec], end: float) -> None:
    """Queueing-delay CDF and utilisation over time, one line per policy (plotly HTML)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("queueing delay CDF", "GPU utilisation"))
    for run in runs:
        waits = [(run.started.get(j.name, end) - j.submit_time) / 3600 for j in jobs]
        cdf = [q / 200 for q in range(1, 201)]
        fig.add_scatter(
            x=[percentile(waits, q) for q in cdf],
            y=cdf,
            name=run.policy.name,
            row=1,
            col=1,
            legendgroup=run.policy.name,
        )
        total = sum(len(t.gpus) for t in run.templates.values())
        fig.add_scatter(
            x=[s[0] / 3600 for s in run.samples[::6]],
            y=[s[1] / total for s in run.samples[::6]],
            name=run.policy.name,
            row=1,
            col=2,
            legendgroup=run.policy.name,
            showlegend=False,
        )
    fig.update_xaxes(title_text="hours waited", type="log", row=1, col=1)
    fig.update_xaxes(title_text="hours", row=1, col=2)
    fig.write_html(path, include_plotlyjs="cdn")
