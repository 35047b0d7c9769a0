"""Wait or place now: what a GPU set is worth over a job's run time.

Rules that price a placement decision in seconds of the job's own time, with the link
factors of :mod:`toposcope.advisor.gpu_sets` (a job's step time scales with its set's
worst link):

* :func:`wait_pays`: a pending job whose best free set is worse than the best set its size
  can get (on some node, once running jobs finish) should wait for that set when the
  expected wait is shorter than the time the worse set would add to its run:
  ``run x (f_now / f_best - 1)``. Waiting longer would finish it later than starting now.
  When other jobs are queued, the GPU time the worse set holds longer is theirs too.
* :func:`calibrated_scale`: the link prior's slowdowns calibrated by finished jobs' run times.
* :func:`best_pair_factor`: between equally good sets, a job takes the one on the machine
  whose links are worth least, keeping NVLink machines for jobs that need them.

The run time is what the resource manager knows (a time limit); nothing in the metrics
tells it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from toposcope.advisor.gpu_sets import rank_sets
from toposcope.advisor.model import NodeModel


def extra_seconds(run_seconds: float, factor: float, best_factor: float) -> float:
    """Seconds a set of step-time ``factor`` adds to a run of ``run_seconds`` on a set of
    ``best_factor`` (0 when it is no worse).
    """
    if run_seconds <= 0 or best_factor <= 0 or factor <= best_factor:
        return 0.0
    return run_seconds * (factor / best_factor - 1.0)


def wait_pays(
    run_seconds: float,
    factor_now: float,
    best_factor: float,
    wait_seconds: float,
    *,
    gpus: int = 1,
    waiting: int = 0,
) -> bool:
    """Whether a pending job should wait ``wait_seconds`` for a set of ``best_factor``
    rather than start now on one of ``factor_now`` (an unknown wait, ``inf``, never pays).

    The worse set makes the job run ``extra`` seconds longer on each of its ``gpus`` GPUs:
    alone (``waiting`` 0) the cost is that GPU time, ``extra x gpus``, so a 4-GPU job waits
    four times as long for a better set as a 1-GPU job would. With ``waiting`` other jobs in
    the queue (ahead of it or behind: any of them may need those GPUs next), every one of
    them may wait for that GPU time: the cost is ``extra x gpus x waiting``. The job waits
    while its own wait is shorter than the cost.
    """
    if math.isinf(wait_seconds) or wait_seconds < 0:
        return False
    cost = extra_seconds(run_seconds, factor_now, best_factor) * max(gpus, 1) * max(waiting, 1)
    return wait_seconds < cost


def calibrated_scale(pairs: Iterable[tuple[float, float]], prior_weight: float = 5.0) -> float:
    """How much to scale a prior's slowdown by, from (estimated, measured) slowdown pairs
    (both ``factor - 1``) of finished jobs: the mean ratio measured / estimated, shrunk
    toward 1 by ``prior_weight`` pseudo-observations (pairs without a positive estimate are
    skipped; a negative measurement counts as 0). Unlike the per-kind factors of
    :mod:`toposcope.advisor.calibration` it is not capped: run times are measured exactly.
    """
    ratios = [max(0.0, measured / estimated) for estimated, measured in pairs if estimated > 0]
    return (prior_weight + sum(ratios)) / (prior_weight + len(ratios))


def best_pair_factor(node: NodeModel) -> float:
    """The step-time factor of the best-linked pair of GPUs the machine has (1.0 with fewer
    than two GPUs): how much the machine's links are worth to jobs that communicate.

    Between equally good sets for a job, the one on the machine with the worse links (a
    higher value here) keeps the well-linked machines for the jobs that need their links.
    """
    ranked = rank_sets(node, (g.index for g in node.gpus), 2)
    return ranked[0].factor() if ranked else 1.0
