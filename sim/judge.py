"""The closed loop's judge: what a round of applied advice was worth, counting everything.

``bench/closed_loop.py`` applies the advisor's recommendations to a simulated cluster and
reads the true throughput of every job after each round; this module turns those readings
into the verdict, with no knowledge of how the advisor decided:

* **harm**: after each round, every counted job whose true throughput fell counts
  (:func:`fallen`), the actions' own targets (*harmful*) and every other job (*collateral*);
* **horizon**: a move pauses its job for its checkpoint-restore cost, so a job's value is
  its efficiency integrated over its remaining time (at most ``horizon`` seconds) minus the
  time it stood still (:func:`horizon_value`), for the advisor and the oracle alike;
* **useless**: applied actions whose target gained nothing true (:func:`useless`);
* **ratios**: the advisor's gain against the best known (the larger of the oracle's and the
  advisor's own outcome, so the ratio never exceeds 1) and against the cheap upper bound
  (every job at its best alone), both from the same baseline (:func:`ratios`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toposcope.sim.cluster import SimCluster

#: relative drop of a job's true throughput that counts as harm (model noise is far below)
HARM_TOLERANCE = 1e-6
#: relative true gain of an action's target below which the action counts as useless
USELESS_BELOW = 1e-3
#: default horizon (simulated seconds) over which a job's gain is integrated
DEFAULT_HORIZON_S = 3600.0


def fallen(
    before: Mapping[str, float], after: Mapping[str, float], jobs: Mapping[str, float]
) -> list[str]:
    """The jobs of ``jobs`` whose true throughput in ``after`` is below ``before`` (a job
    missing from ``after`` is done and does not count).
    """
    return sorted(
        name
        for name in jobs
        if name in after and after[name] < before.get(name, 0.0) * (1.0 - HARM_TOLERANCE)
    )


def useless(actual_gain: float | None) -> bool:
    """Whether an applied action's target gained nothing true (``None``: the target was not
    running before, so any throughput after is a gain).
    """
    return actual_gain is not None and actual_gain < USELESS_BELOW


def job_horizon(remaining_s: float | None, horizon_s: float) -> float:
    """The seconds a job's gain is integrated over: its remaining time, at most
    ``horizon_s`` (``None``: runs until stopped).
    """
    if remaining_s is None:
        return horizon_s
    return max(0.0, min(remaining_s, horizon_s))


def horizons_now(cluster: SimCluster, names: Iterable[str], horizon_s: float) -> dict[str, float]:
    """Each named job's horizon now: its remaining run time at its best, from the cluster's
    truth and the job's duration (see :func:`job_horizon`).
    """
    rows = {row.name: row for row in cluster.truth()}
    specs = {s.name: s.spec for s in cluster.job_states()}
    result = {}
    for name in names:
        duration, progress = specs[name].duration, rows[name].progress_ratio
        remaining = None if duration is None or progress is None else (1 - progress) * duration
        result[name] = job_horizon(remaining, horizon_s)
    return result


def horizon_value(efficiency: float, paused_s: float, horizon_s: float) -> float:
    """A job's mean efficiency over its horizon when it stood still ``paused_s`` of it and
    ran at ``efficiency`` the rest (0 for a job with no time left).
    """
    if horizon_s <= 0:
        return 0.0
    return efficiency * max(0.0, horizon_s - paused_s) / horizon_s


def horizon_total(
    efficiencies: Mapping[str, float],
    paused_s: Mapping[str, float],
    horizons: Mapping[str, float],
) -> float:
    """Sum of :func:`horizon_value` over the jobs of ``horizons`` (missing efficiency: 0)."""
    return sum(
        horizon_value(efficiencies.get(name, 0.0), paused_s.get(name, 0.0), horizon)
        for name, horizon in horizons.items()
    )


@dataclass(frozen=True)
class Ratios:
    """The advisor's gain against the best known and against the upper bound.

    ``best_known_gain`` is the larger of the oracle's and the advisor's gains (so
    ``ratio`` <= 1); ``bound_gain`` is the gain of every job at its best alone.
    """

    gain: float
    oracle_gain: float
    best_known_gain: float
    bound_gain: float
    ratio: float
    ratio_to_bound: float


def _ratio(gain: float, reference: float) -> float:
    """``gain / reference``; with nothing to gain, 1.0 unless the advisor lost."""
    if reference <= 1e-9:
        return 1.0 if gain >= -1e-9 else 0.0
    return max(0.0, gain) / reference if gain < reference else 1.0


def ratios(baseline: float, advisor: float, oracle: float, bound: float) -> Ratios:
    """:class:`Ratios` of aggregates measured from the same ``baseline``."""

    def gain_of(total: float) -> float:
        return total / baseline - 1.0 if baseline > 0 else 0.0

    gain, oracle_gain, bound_gain = gain_of(advisor), gain_of(oracle), gain_of(bound)
    best = max(gain, oracle_gain)
    return Ratios(
        gain=gain,
        oracle_gain=oracle_gain,
        best_known_gain=best,
        bound_gain=bound_gain,
        ratio=_ratio(gain, best),
        ratio_to_bound=_ratio(gain, bound_gain),
    )


#: calibration target: mean absolute error within this share of the mean true gain
CALIBRATION_TARGET = 0.25


@dataclass(frozen=True)
class Calibration:
    """How far one recommendation kind's estimated gains were from the true ones."""

    kind: str
    actions: int
    mean_abs_error: float
    mean_true_gain: float
    relative_error: float

    @property
    def met(self) -> bool:
        """Whether the error is within :data:`CALIBRATION_TARGET` of the mean true gain."""
        return self.relative_error <= CALIBRATION_TARGET


def calibration(pairs: Iterable[tuple[str, float, float]]) -> list[Calibration]:
    """Per kind, from ``(kind, estimated gain, true gain)`` of the applied actions: the mean
    absolute error and that error relative to the mean absolute true gain (``inf`` when the
    true gains are all 0 but the estimates were not).
    """
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for kind, estimated, actual in pairs:
        by_kind.setdefault(kind, []).append((estimated, actual))
    result = []
    for kind, rows in sorted(by_kind.items()):
        error = sum(abs(e - a) for e, a in rows) / len(rows)
        scale = sum(abs(a) for _, a in rows) / len(rows)
        relative = error / scale if scale > 0 else (0.0 if error == 0 else math.inf)
        result.append(Calibration(kind, len(rows), error, scale, relative))
    return result
