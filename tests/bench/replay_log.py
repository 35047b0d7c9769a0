"""What a trace replay did, recomputed from its event log alone (not from the replay's own
bookkeeping nor from :mod:`trace_figures`), so that the tests can hold one against the
other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trace_engine import SAMPLE_S, Replay


@dataclass(frozen=True)
class Holding:
    """A job holding ``gpus`` of ``node`` from ``since`` (exclusive) to ``until``
    (inclusive; ``inf`` when it never gave them back), as the replay's samples see it.
    """

    job: str
    node: str
    gpus: frozenset[int]
    since: float
    until: float

    def holds_at(self, t: float) -> bool:
        """Whether a sample at ``t`` (taken before the events at ``t``) counts these GPUs."""
        return self.since < t <= self.until


def holdings(run: Replay) -> list[Holding]:
    """Every stretch of GPUs some job held, from the log; an ``AssertionError`` when a place
    or migrate takes a GPU another job holds, or a finish gives back GPUs the job does not
    hold.
    """
    holder: dict[tuple[str, int], str] = {}
    current: dict[str, tuple[str, frozenset[int], float]] = {}
    done: list[Holding] = []
    for event in run.log:
        if event.kind == "wait":
            continue
        if event.kind in ("migrate", "finish"):
            node, gpus, since = current.pop(event.job)
            for g in gpus:
                assert holder.pop((node, g)) == event.job
            done.append(Holding(event.job, node, gpus, since, event.time))
            if event.kind == "finish":
                assert (event.node, frozenset(event.gpus)) == (node, gpus), event
                continue
        assert event.job not in current, f"{event.job} placed while it holds GPUs"
        for g in event.gpus:
            other = holder.setdefault((event.node, g), event.job)
            assert other == event.job, f"{event.node} GPU {g}: {other} and {event.job} at once"
        current[event.job] = (event.node, frozenset(event.gpus), event.time)
    done.extend(Holding(j, n, g, s, math.inf) for j, (n, g, s) in current.items())
    return done


def first(run: Replay, kind: str) -> dict[str, float]:
    """Each job's time of its first ``kind`` event."""
    times: dict[str, float] = {}
    for event in run.log:
        if event.kind == kind:
            times.setdefault(event.job, event.time)
    return times


def sample_times(span: float) -> list[float]:
    """The sample times the figures average over (every ``SAMPLE_S`` up to ``span``)."""
    return [k * SAMPLE_S for k in range(int(span // SAMPLE_S) + 1)]


def allocated_at(held: list[Holding], t: float) -> dict[str, int]:
    """GPUs held per node by a sample at ``t``."""
    count: dict[str, int] = {}
    for h in held:
        if h.holds_at(t):
            count[h.node] = count.get(h.node, 0) + len(h.gpus)
    return count


def nearest_rank(values: list[float], q: float) -> float:
    """The ``q`` quantile by the nearest-rank definition (the smallest value with at least
    ``q`` of the values at or below it).
    """
    ordered = sorted(values)
    return next(v for i, v in enumerate(ordered, 1) if i >= q * len(ordered))
