"""Calibrated priors: per recommendation kind, policy, node type and link tier, how far
measured gains fell from the policies' estimates.

The policies price recommendations with fixed priors (docs/policies.md). Once changes have
been applied and verified (:mod:`toposcope.advisor.outcomes`), each verification holds the
prior estimate the recommendation made (before any calibration, gross of a job move's
checkpoint cost: :func:`~toposcope.advisor.calibration_cells.gross_prior`), its *cell*
(kind, policy, node type, link tier: :mod:`toposcope.advisor.calibration_cells`) and the
workload's figures before and after; the *measured gain* (:func:`measured_gain`) is the one
the verdict rests on (a job move's progress), else the change of the job's progress metric
where a ``--progress-metric`` applies, else of its throughput proxy: the mean utilization of
its GPUs when it has busy GPUs, else the CPU cores it keeps busy. A clearing for another job
(:mod:`toposcope.advisor.clearing_verification`) estimates that job's gain: it is learned
from only where that gain was measured, never from a proxy.

**Shrinkage.** A factor is a multiplicative correction, so it is learned in logarithms:
the geometric mean of the ratios measured / estimated, shrunk toward a prior by ``k``
pseudo-observations of it (an empirical-Bayes mean of the log ratios,
:func:`shrunk_factor`): ``log factor = (sum log r + k * log prior) / (n + k)`` with ``k =``
:data:`PRIOR_WEIGHT` (``2``: a prior worth two verified outcomes; after two the data weigh
half, after eight four fifths). In logarithms an estimate half the truth and one twice it
are the same distance off, so a cell whose moves gain five times their estimate and one
whose pins gain two thirds of it are corrected alike, and one wild measurement moves a
factor by a bounded step instead of dominating a mean. Two levels: a kind's factor is
shrunk toward 1 (the policy's estimate as it is), and each cell's toward the factor of its
kind's *other* cells (itself shrunk toward 1; its own outcomes are not counted twice), so a
cell with few outcomes borrows from the rest of its kind, one with many follows its own,
and a kind seen in one cell only gets the kind's factor: cells that miss their priors in
opposite directions (moves onto NVLink priced at the PCIe prior gain several times their
estimate, moves between PCIe paths less than it) are each corrected as their own evidence
grows. A cell with no outcome yet takes its kind's. Each ratio is clipped to
``[RATIO_FLOOR, RATIO_CEILING]`` (0.5 to 5: a change that measured less than half its
estimate, no gain or a loss counts as half), so every factor lies in that range too.

:func:`calibrate` scales each recommendation's estimate by the factor of its cell (of its
kind where the cell has no outcome yet), says so in the gain model, keeps the prior
estimate as evidence, and sets the severity again from the calibrated value; the report's
ranking and conflict resolution then use the calibrated estimates. The simulator's truth is
never read: only what the advisor measured.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from toposcope.advisor.calibration_cells import Cell, cell_of, prior_evidence
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.outcomes import MIN_GPU_UTILIZATION, OutcomeLog, destination, start_gain
from toposcope.advisor.recommendations import HORIZON_S, cost_seconds, severity_for, value
from toposcope.report.advisor_api import Measurement, Verdict
from toposcope.report.recommendation import Recommendation, RecommendationKind

#: pseudo-observations of its prior each factor starts from (``k`` of the module docstring)
PRIOR_WEIGHT = 2.0
#: the range a measured / estimated ratio is clipped to before its logarithm is taken: a
#: change that measured less than half its estimate (a ``neutral`` verdict, or harm) counts
#: as half, what the verdict's paid share resolves; a step counter's noise can read a
#: small true gain as none, and one such reading must not sink a cell
RATIO_FLOOR, RATIO_CEILING = 0.5, 5.0
#: the range of a factor (a weighted geometric mean of clipped ratios and a prior in it)
FACTOR_FLOOR, FACTOR_CEILING = RATIO_FLOOR, RATIO_CEILING
#: cores below which a workload's CPU figure says nothing about its speed
MIN_CORES = 0.05
#: verdicts whose measurement is final
SETTLED = frozenset({Verdict.PAID, Verdict.NEUTRAL, Verdict.HARMFUL})


@dataclass(frozen=True)
class KindCalibration:
    """A kind's (or a cell's) factor and the number of verified outcomes behind it."""

    factor: float
    outcomes: int


#: a level's key: ``(kind,)`` or a whole :data:`Cell`
LevelKey = tuple[str, ...]


class Calibration(dict[str, KindCalibration]):
    """The factors learned from an outcome log: by kind (the mapping itself, what reports
    and the closed loop show) and by cell (``levels``, keyed by ``(kind,)`` and by
    :data:`Cell`).
    """

    def __init__(self, levels: Mapping[LevelKey, KindCalibration]) -> None:
        super().__init__({key[0]: c for key, c in sorted(levels.items()) if len(key) == 1})
        self.levels = dict(levels)

    def lookup(self, cell: Cell) -> tuple[LevelKey, KindCalibration] | None:
        """The factor for ``cell``: its own, else its kind's (``None``: neither learned)."""
        for key in (cell, cell[:1]):
            if key in self.levels:
                return key, self.levels[key]
        return None


def measured_gain(before: Measurement, after: Measurement) -> float | None:
    """The relative change of the workload's progress (``None``: nothing to compare): its
    progress metric where one was read both times, else GPU utilization when it was busy
    on GPUs before, else CPU cores used.
    """
    if before.progress is not None and after.progress is not None and before.progress > 0:
        return after.progress / before.progress - 1.0
    if (
        before.gpu_utilization is not None
        and after.gpu_utilization is not None
        and before.gpu_utilization >= MIN_GPU_UTILIZATION
    ):
        return after.gpu_utilization / before.gpu_utilization - 1.0
    if before.cores is not None and after.cores is not None and before.cores >= MIN_CORES:
        return after.cores / before.cores - 1.0
    return None


def log_ratio(estimated: float, measured: float) -> float:
    """``log(measured / estimated)``, the ratio clipped to ``[RATIO_FLOOR, RATIO_CEILING]``
    (``estimated`` above zero; a measured gain of zero or less counts as the floor).
    """
    return math.log(min(RATIO_CEILING, max(RATIO_FLOOR, measured / estimated)))


def shrunk(total: float, count: int, prior_weight: float, prior: float) -> KindCalibration:
    """The factor of ``count`` log ratios summing to ``total``, shrunk toward ``prior`` by
    ``prior_weight`` pseudo-observations in logarithms and clipped (module docstring).
    """
    clipped = min(FACTOR_CEILING, max(FACTOR_FLOOR, prior))
    log_factor = (prior_weight * math.log(clipped) + total) / (prior_weight + count)
    return KindCalibration(min(FACTOR_CEILING, max(FACTOR_FLOOR, math.exp(log_factor))), count)


def shrunk_factor(
    pairs: Iterable[tuple[float, float]], prior_weight: float = PRIOR_WEIGHT, prior: float = 1.0
) -> KindCalibration:
    """The factor of (estimated, measured) gain pairs, shrunk toward ``prior`` (see the
    module docstring); pairs whose estimate is not positive are skipped.
    """
    logs = [log_ratio(e, m) for e, m in pairs if e > 0]
    return shrunk(sum(logs), len(logs), prior_weight, prior)


def outcome_pairs(outcomes: OutcomeLog) -> list[tuple[Cell, float, float]]:
    """(cell, prior estimate, measured gain) of every settled verification of ``outcomes``
    that holds both (an outcome recorded before cells and priors were kept has the cell
    ``(kind, "", "", "")`` and its recorded estimate); a clearing's gain is only the one its
    verification measured for the job it cleared for.
    """
    cells = outcomes.cells()
    found = []
    for item in outcomes.all():
        if item.verdict not in SETTLED or item.measured is None or item.estimated_gain is None:
            continue
        gain = item.measured_gain
        if gain is None and not item.made_for:
            gain = measured_gain(item.baseline, item.measured)
        cell, prior = cells.get(item.recommendation_id, ((item.kind, "", "", ""), None))
        estimated = prior if prior is not None else item.estimated_gain
        if gain is not None and estimated > 0:
            found.append((cell, estimated, gain))
    return found


def calibration_from(outcomes: OutcomeLog, prior_weight: float = PRIOR_WEIGHT) -> Calibration:
    """The calibration of the settled verifications of ``outcomes`` (module docstring):
    each kind's factor shrunk toward 1, each cell's toward its kind's other cells'; kinds
    without any outcome are left out (their factor is 1).
    """
    sums: dict[LevelKey, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for cell, estimated, gain in outcome_pairs(outcomes):
        keys: tuple[LevelKey, LevelKey] = (cell[:1], cell)
        for key in keys:
            sums[key][0] += log_ratio(estimated, gain)
            sums[key][1] += 1
    levels: dict[LevelKey, KindCalibration] = {}
    for level, (total, count) in sums.items():
        if len(level) == 1:
            levels[level] = shrunk(total, int(count), prior_weight, 1.0)
            continue
        kind_total, kind_count = sums[level[:1]]
        others = shrunk(kind_total - total, int(kind_count - count), prior_weight, 1.0)
        levels[level] = shrunk(total, int(count), prior_weight, others.factor)
    return Calibration(levels)


def factors(calibration: Mapping[str, KindCalibration]) -> dict[str, float]:
    """The factors alone, by kind."""
    return {kind: c.factor for kind, c in calibration.items()}


def calibrated_gain(rec: Recommendation, factor: float) -> float:
    """``rec``'s estimate scaled by ``factor``; job-migration's estimate is net of its
    checkpoint-restores, so only the gross part is scaled, and the start of a pending job
    its move makes possible (:func:`~toposcope.advisor.outcomes.start_gain`), which no
    verdict of the move measures, is kept as it is.
    """
    if rec.kind != RecommendationKind.MIGRATE_JOB:
        return rec.estimated_gain * factor
    cost = cost_seconds(rec.kind, rec.proposed, rec.actions) / HORIZON_S
    start = start_gain(rec)
    return max(0.0, (rec.estimated_gain - start + cost) * factor - cost) + start


def _factor_for(
    rec: Recommendation, calibration: Mapping[str, KindCalibration], model: ClusterModel | None
) -> tuple[KindCalibration, str] | None:
    """The factor that applies to ``rec`` and where it was learned, in words (empty for
    its kind as a whole).
    """
    if not isinstance(calibration, Calibration):
        found = calibration.get(str(rec.kind))
        return (found, "") if found is not None else None
    node, gpus = destination(rec)
    looked = calibration.lookup(cell_of(rec, model, node, gpus))
    if looked is None:
        return None
    key, found = looked
    if len(key) == 1:
        return found, ""
    return found, f" of {key[1]} on {key[2]}, link tier {key[3]}"


def calibrate(
    recommendations: Iterable[Recommendation],
    calibration: Mapping[str, KindCalibration],
    model: ClusterModel | None = None,
) -> list[Recommendation]:
    """``recommendations`` with each estimate scaled by its factor (its cell's in ``model``
    when ``calibration`` has cells, else its kind's), the gain model naming the factor, the
    prior estimate kept as evidence, and the severity set again from the calibrated value.
    """
    result = []
    for rec in recommendations:
        applies = _factor_for(rec, calibration, model)
        if applies is None:
            result.append(rec)
            continue
        found, where = applies
        gain = calibrated_gain(rec, found.factor)
        cost = cost_seconds(rec.kind, rec.proposed, rec.actions)
        worth = value(rec.kind, gain, rec.confidence, cost)
        result.append(
            replace(
                rec,
                estimated_gain=round(gain, 6),
                gain_model=(
                    f"{rec.gain_model}; x {found.factor:.2f} calibration from "
                    f"{found.outcomes} verified {rec.kind} outcome(s){where} (prior estimate "
                    f"{rec.estimated_gain:.1%})"
                ),
                evidence=(*rec.evidence, prior_evidence(rec, rec.estimated_gain)),
                severity=severity_for(worth),
            )
        )
    return result
