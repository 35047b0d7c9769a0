"""Calibrated priors: per recommendation kind, how far measured gains fell from estimates.

The policies price recommendations with fixed priors (docs/policies.md). Once changes have
been applied and verified (:mod:`toposcope.advisor.outcomes`), each verification holds the
estimate the recommendation made and the workload's figures before and after; the
*measured gain* (:func:`measured_gain`) is the change of its throughput proxy: the mean
utilization of its GPUs when it has busy GPUs, else the CPU cores it keeps busy.

A kind's factor (:func:`shrunk_factor`) is the mean ratio measured / estimated, shrunk toward
1 by ``prior_weight`` pseudo-observations of ratio 1 (a Bayesian mean with a prior worth
that many outcomes): ``(prior_weight + sum(r_i)) / (prior_weight + n)``. Each ratio is
clipped to ``[RATIO_FLOOR, RATIO_CEILING]`` and the factor to ``[FACTOR_FLOOR,
FACTOR_CEILING]``, so one wild measurement cannot swing a kind. :func:`calibrate` scales the
estimates of a report's recommendations by their kind's factor, says so in the gain model and
sets the severity again from the calibrated value. The simulator's truth is never read:
only what the advisor measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from toposcope.advisor.outcomes import MIN_GPU_UTILIZATION, OutcomeLog
from toposcope.advisor.recommendations import HORIZON_S, cost_seconds, severity_for, value
from toposcope.report.advisor_api import Measurement, Verdict
from toposcope.report.recommendation import Recommendation, RecommendationKind

#: pseudo-observations of ratio 1 each kind's factor starts from
PRIOR_WEIGHT = 5.0
RATIO_FLOOR, RATIO_CEILING = -1.0, 3.0
FACTOR_FLOOR, FACTOR_CEILING = 0.05, 2.0
#: cores below which a workload's CPU figure says nothing about its speed
MIN_CORES = 0.05
#: verdicts whose measurement is final
SETTLED = frozenset({Verdict.EFFECTIVE, Verdict.INEFFECTIVE, Verdict.HARMFUL})


@dataclass(frozen=True)
class KindCalibration:
    """A kind's factor and the number of verified outcomes behind it."""

    factor: float
    outcomes: int


def measured_gain(before: Measurement, after: Measurement) -> float | None:
    """The relative change of the workload's throughput proxy (``None``: nothing to compare):
    GPU utilization when it was busy on GPUs before, else CPU cores used.
    """
    if (
        before.gpu_utilization is not None
        and after.gpu_utilization is not None
        and before.gpu_utilization >= MIN_GPU_UTILIZATION
    ):
        return after.gpu_utilization / before.gpu_utilization - 1.0
    if before.cores is not None and after.cores is not None and before.cores >= MIN_CORES:
        return after.cores / before.cores - 1.0
    return None


def shrunk_factor(
    pairs: Iterable[tuple[float, float]], prior_weight: float = PRIOR_WEIGHT
) -> KindCalibration:
    """The factor of (estimated, measured) gain pairs (see the module docstring); pairs
    whose estimate is not positive are skipped.
    """
    ratios = [
        min(RATIO_CEILING, max(RATIO_FLOOR, measured / estimated))
        for estimated, measured in pairs
        if estimated > 0
    ]
    factor = (prior_weight + sum(ratios)) / (prior_weight + len(ratios))
    return KindCalibration(min(FACTOR_CEILING, max(FACTOR_FLOOR, factor)), len(ratios))


def calibration_from(
    outcomes: OutcomeLog, prior_weight: float = PRIOR_WEIGHT
) -> dict[str, KindCalibration]:
    """Per kind, the calibration of the settled verifications of ``outcomes`` that hold an
    estimate and a measured gain (the one the verdict rests on, such as a job move's
    progress, else the throughput proxy's change; kinds without any are left out: their
    factor is 1).
    """
    pairs: dict[str, list[tuple[float, float]]] = {}
    for item in outcomes.all():
        if item.verdict not in SETTLED or item.measured is None or item.estimated_gain is None:
            continue
        gain = item.measured_gain
        if gain is None:
            gain = measured_gain(item.baseline, item.measured)
        if gain is not None and item.estimated_gain > 0:
            pairs.setdefault(item.kind, []).append((item.estimated_gain, gain))
    return {kind: shrunk_factor(found, prior_weight) for kind, found in sorted(pairs.items())}


def factors(calibration: Mapping[str, KindCalibration]) -> dict[str, float]:
    """The factors alone, by kind."""
    return {kind: c.factor for kind, c in calibration.items()}


def calibrated_gain(rec: Recommendation, factor: float) -> float:
    """``rec``'s estimate scaled by ``factor``; job-migration's estimate is net of its
    checkpoint-restores, so only the gross part is scaled.
    """
    if rec.kind != RecommendationKind.MIGRATE_JOB:
        return rec.estimated_gain * factor
    cost = cost_seconds(rec.kind, rec.proposed, rec.actions) / HORIZON_S
    return max(0.0, (rec.estimated_gain + cost) * factor - cost)


def calibrate(
    recommendations: Iterable[Recommendation], calibration: Mapping[str, KindCalibration]
) -> list[Recommendation]:
    """``recommendations`` with each estimate scaled by its kind's factor, the gain model
    naming the factor, and the severity set again from the calibrated value.
    """
    result = []
    for rec in recommendations:
        found = calibration.get(str(rec.kind))
        if found is None:
            result.append(rec)
            continue
        gain = calibrated_gain(rec, found.factor)
        cost = cost_seconds(rec.kind, rec.proposed, rec.actions)
        worth = value(rec.kind, gain, rec.confidence, cost)
        result.append(
            replace(
                rec,
                estimated_gain=round(gain, 6),
                gain_model=(
                    f"{rec.gain_model}; x {found.factor:.2f} calibration from "
                    f"{found.outcomes} verified {rec.kind} outcome(s) (prior estimate "
                    f"{rec.estimated_gain:.1%})"
                ),
                severity=severity_for(worth),
            )
        )
    return result
