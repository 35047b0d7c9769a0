"""The fabric trace replay's engine: one placement policy over a job trace on a tree fabric.

The clock jumps from event to event (arrivals, finishes). After each, the policy is asked
for the pending jobs in arrival order (a later job may start before one that does not fit,
as a backfilling scheduler lets it); a job size that did not fit is not asked again in the
same pass. A started gang holds its GPUs until it ends: its run time at the tightest level
it could have had, times the judge's factor for the level it spans
(:class:`fabric_truth.SlowdownModel`). No job is moved once started. :func:`figures` turns
a :class:`Run` into the report's figures.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fabric_policies import POLICIES, Hold, Policy, View
from fabric_trace import FabricJob
from fabric_truth import SlowdownModel

from toposcope.fabric.cellfit import lowest_level_possible
from toposcope.fabric.cells import CellTree, NodeFree


@dataclass
class Outcome:
    """What happened to one job: when it started and ended, the level it spanned and the
    tightest level it could have had (``None`` start: never started).
    """

    job: FabricJob
    nodes: int
    start: float | None = None
    end: float | None = None
    level: int = 0
    tightest: int = 0
    first_hold_level: int | None = None
    first_hold_at: float | None = None
    placed_on: tuple[str, ...] = ()
    share: int = 0


@dataclass
class Run:
    """One policy's replay: every job's :class:`Outcome`, the wait-or-spread decisions and
    how long the replay took.
    """

    policy: str
    outcomes: dict[str, Outcome]
    stop: float
    span: float
    total_gpus: int
    model: SlowdownModel
    decisions: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


def replay(
    policy: str,
    jobs: Sequence[FabricJob],
    tree: CellTree,
    gpus: dict[str, int],
    model: SlowdownModel,
    stop: float,
) -> Run:
    """Run the trace under ``policy`` until every job is done or ``stop``."""
    began = time.perf_counter()
    choose = POLICIES[policy]
    order = sorted(gpus)
    view = View(tree, gpus, dict(gpus), order)
    span = max((j.submit_time for j in jobs), default=0.0)
    run = Run(policy, {}, stop, span, sum(gpus.values()), model)
    tightest = _tightest_levels(tree, gpus, {view.shape(j.gpus) for j in jobs})
    arrivals = sorted(jobs, key=lambda j: (j.submit_time, j.name))
    pending: list[FabricJob] = []
    ends: list[tuple[float, str]] = []
    placed: dict[str, tuple[tuple[str, ...], int]] = {}
    at = 0
    while True:
        upcoming = arrivals[at].submit_time if at < len(arrivals) else math.inf
        now = min(upcoming, ends[0][0] if ends else math.inf)
        if now > stop or math.isinf(now):
            break
        while ends and ends[0][0] <= now:
            _, name = heapq.heappop(ends)
            nodes, share = placed.pop(name)
            for node in nodes:
                view.free[node] += share
                view.holders[node] = [h for h in view.holders[node] if h[2] != name]
        while at < len(arrivals) and arrivals[at].submit_time <= now:
            job = arrivals[at]
            shape = view.shape(job.gpus)
            run.outcomes[job.name] = Outcome(job, shape[0], tightest=tightest[shape])
            pending.append(job)
            at += 1
        view.now, view.queued = now, len(pending)
        started = _pass(run, view, choose, pending)
        for name, (nodes, share, end) in started.items():
            placed[name] = (nodes, share)
            heapq.heappush(ends, (end, name))
            for node in nodes:
                view.holders.setdefault(node, []).append((share, end, name))
        pending = [j for j in pending if j.name not in started]
    run.seconds = time.perf_counter() - began
    return run


def _pass(
    run: Run, view: View, choose: Policy, pending: Sequence[FabricJob]
) -> dict[str, tuple[tuple[str, ...], int, float]]:
    """Ask the policy for each pending job once; start what it places."""
    started: dict[str, tuple[tuple[str, ...], int, float]] = {}
    no_fit: set[int] = set()
    free_total = sum(view.free.values())
    for job in pending:
        if job.gpus > free_total or job.gpus in no_fit:
            continue
        decision = choose(view, job.name, job.gpus, job.duration)
        outcome = run.outcomes[job.name]
        if decision is None:
            no_fit.add(job.gpus)
            continue
        if isinstance(decision, Hold):
            if outcome.first_hold_at is None:
                outcome.first_hold_at, outcome.first_hold_level = view.now, decision.level
                view.held_since[job.name] = view.now
                run.decisions["held"] += 1
            continue
        outcome.start, outcome.level = view.now, decision.level
        outcome.placed_on, outcome.share = decision.nodes, decision.share
        factor = 1.0 + run.model.slowdown(decision.level, outcome.tightest)
        outcome.end = view.now + job.duration * factor
        for node in decision.nodes:
            view.free[node] -= decision.share
        free_total -= decision.share * len(decision.nodes)
        started[job.name] = (decision.nodes, decision.share, outcome.end)
        view.held_since.pop(job.name, None)
        _count(run, outcome)
    return started


def _count(run: Run, outcome: Outcome) -> None:
    """Tally a started gang job's placement as a wait-or-spread decision."""
    if outcome.nodes < 2:
        return
    spread = outcome.level > outcome.tightest
    if outcome.first_hold_level is None:
        run.decisions["spread_now" if spread else "tight_now"] += 1
    elif outcome.level < outcome.first_hold_level:
        run.decisions["held_then_tighter"] += 1
    else:
        run.decisions["held_then_spread"] += 1


def _tightest_levels(
    tree: CellTree, gpus: dict[str, int], shapes: set[tuple[int, int]]
) -> dict[tuple[int, int], int]:
    """(nodes, GPUs per node) -> the tightest level the fabric ever gives such a job."""
    empty = {n: NodeFree(n, g, g) for n, g in gpus.items()}
    result: dict[tuple[int, int], int] = {}
    for nodes, share in shapes:
        level = 0 if nodes == 1 else lowest_level_possible(tree, empty, nodes, share)
        if level is None:
            raise ValueError(f"no cell of the fabric holds {nodes} nodes of {share} GPUs")
        result[(nodes, share)] = level
    return result


def figures(run: Run) -> dict[str, Any]:
    """The report's figures for one run (see ``fabric_replay.py``)."""
    outcomes = list(run.outcomes.values())
    queue = sorted(_queued(run, o) for o in outcomes)
    gangs = [o for o in outcomes if o.nodes > 1]
    gang_queue = [_queued(run, o) for o in gangs]
    started = [o for o in outcomes if o.start is not None]
    slow = [run.model.slowdown(o.level, o.tightest) for o in started if o.nodes > 1]
    busy = 0.0
    for o in started:
        end = min(o.end if o.end is not None else run.stop, run.stop, run.span)
        busy += o.job.gpus * max(0.0, end - min(o.start or 0.0, run.span))
    return {
        "policy": run.policy,
        "jobs": len(outcomes),
        "gang_jobs": len(gangs),
        "never_started": len(outcomes) - len(started),
        "mean_queue_s": round(_mean(queue), 1),
        "p95_queue_s": round(queue[int(0.95 * (len(queue) - 1))] if queue else 0.0, 1),
        "mean_gang_queue_s": round(_mean(gang_queue), 1),
        "mean_fabric_slowdown": round(_mean(slow), 4),
        "mean_fabric_slowdown_all_jobs": round(sum(slow) / len(started) if started else 0.0, 4),
        "spread_gangs": sum(1 for o in started if o.nodes > 1 and o.level > o.tightest),
        "gpu_utilisation": round(busy / (run.total_gpus * run.span), 4) if run.span else 0.0,
        "decisions": dict(sorted(run.decisions.items())),
        "seconds": round(run.seconds, 2),
    }


def _queued(run: Run, outcome: Outcome) -> float:
    """A job's queueing delay (until the stop when it never started)."""
    start = outcome.start if outcome.start is not None else run.stop
    return start - outcome.job.submit_time


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
