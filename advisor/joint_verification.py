"""Verifying a recommendation that changes several jobs: each job measured, the verdict on
the whole.

An exchange of GPU sets (job-migration: ``proposed.joint``, two jobs in
``proposed.jobs``), a joint re-placement of multi-node jobs with the single-node jobs it
moves aside (fabric-placement: the same fields) and a defragmentation that moves small jobs
out of a job's way before moving it (job-migration: ``proposed.defragment``) change every
job they name. Measuring the target alone would call an exchange that speeds its target up
and slows its partner more ``paid``. :func:`changed_jobs` reads every job such a
recommendation changes and its weight in the combined gain, as the policy's gain model
weighs it:

* an exchange, and any other joint move without per-job figures: the mean of the jobs'
  gains (the estimate is the mean of both jobs' estimated gains);
* a joint re-placement whose ``current.jobs`` gives each multi-node job's GPUs and time
  left: each job listed there by its GPU-seconds (GPUs x time left) over theirs together,
  as the estimate weighs savings; a job moved aside, which the estimate counts at no gain
  (it runs as before), weighs nothing but is still checked for harm;
* a defragmentation: the sum of the moved job's gain and each moved small job's (the
  estimate adds them up).

At apply time :func:`job_baselines` records each job's figures where it ran (the target's
are the verification's own baseline); each later analysis measures every job where it went
(:func:`measure_jobs`, through its parts like a single move: :func:`~toposcope.advisor.
outcomes.parts_of`) and :func:`judge_jobs` decides, with ``h`` the harm threshold and ``e``
the paid share:

* each job's gain is the change of its own progress signal (:func:`~toposcope.advisor.
  outcomes.judge_move`: progress metric, else SM active, else GPU utilization);
* **pending** while some job has no signal measured before and after (undetermined once the
  verifier gives up);
* the measured gain is the weighted combination, what calibration learns from and what is
  compared with the estimate: **harmful** when it fell by more than ``h``, or when any job
  was slowed by more than ``h`` (a move that hurts one job to help another is caught);
  **paid** when it is positive and at least ``e`` of the estimate; **neutral** otherwise;
* a placement that moved jobs out of its way keeps its placement verdict unless a moved job
  was slowed by more than ``h`` (then harmful).

Each job's figures and gain are kept with the verification (``jobs`` in the API), so that a
user sees each job's part.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from toposcope.advisor.clearing_verification import clearing_jobs
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.outcomes import (
    JOB_KINDS,
    Judgement,
    OutcomeLog,
    VerificationRule,
    baseline,
    made_for,
    measure,
    move_change,
    parts_of,
)
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import JobOutcome, Measurement, Verdict
from toposcope.report.recommendation import Recommendation, RecommendationKind

#: the kind each changed job is measured as (moved, wherever it went)
MOVED = str(RecommendationKind.MIGRATE_JOB)


@dataclass(frozen=True)
class ChangedJob:
    """One job a recommendation changes: its name, where it ran and where it goes (the node
    of its first part), its weight in the combined gain and whether it is the target.
    """

    job: str
    from_node: str
    node: str
    weight: float
    target: bool = False


def changed_jobs(rec: Recommendation) -> tuple[ChangedJob, ...]:
    """Every job ``rec`` changes when it changes several (module docstring), the target
    first; empty for a recommendation of one job (verified as before).

    Raises :class:`~toposcope.errors.ConfigError` for a job list it cannot read.
    """
    if rec.kind not in JOB_KINDS or made_for(rec) is not None:
        return ()
    joint = rec.proposed.get("jobs") if rec.proposed.get("joint") else None
    defragment = rec.proposed.get("defragment")
    if joint is not None:
        jobs = _joint(rec, joint)
    elif defragment:
        jobs = _defragment(rec, defragment)
    else:
        return ()
    if len(jobs) < 2:
        return ()
    return tuple(sorted(jobs, key=lambda j: not j.target))


def _entries(rec: Recommendation, data: Any, field: str) -> list[Mapping[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(e, Mapping) for e in data):
        raise ConfigError(f"{rec.id}: proposed.{field} is not a list of objects")
    return list(data)


def _name(rec: Recommendation, entry: Mapping[str, Any], key: str, field: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{rec.id}: an entry of proposed.{field} has no {key}")
    return value


def _joint(rec: Recommendation, data: Any) -> list[ChangedJob]:
    """The jobs of a joint move (``proposed.jobs``), weighted as its estimate weighs them."""
    found: list[tuple[str, str, str]] = []
    for entry in _entries(rec, data, "jobs"):
        job = _name(rec, entry, "job", "jobs")
        [first, *_] = _entries(rec, entry.get("parts") or [{}], "jobs[].parts")
        found.append(
            (job, _name(rec, first, "from_node", "jobs"), _name(rec, first, "node", "jobs"))
        )
    weights = _gpu_seconds(rec, [job for job, _, _ in found])
    if weights is None:
        weights = {job: 1.0 / len(found) for job, _, _ in found} if found else {}
    return [
        ChangedJob(job, old, new, weights.get(job, 0.0), job == rec.target.workload)
        for job, old, new in found
    ]


def _gpu_seconds(rec: Recommendation, jobs: Sequence[str]) -> dict[str, float] | None:
    """Each job's share of the GPU-seconds (GPUs x time left) ``current.jobs`` lists, or
    ``None`` when it lists none of ``jobs`` with both figures.
    """
    listed = rec.current.get("jobs")
    if not isinstance(listed, Mapping):
        return None
    held: dict[str, float] = {}
    for job in jobs:
        figures = listed.get(job)
        if not isinstance(figures, Mapping):
            continue
        gpus, left = _number(figures.get("gpus")), _number(figures.get("time_left_s"))
        if gpus is not None and left is not None and gpus * left > 0:
            held[job] = gpus * left
    total = sum(held.values())
    return {job: value / total for job, value in held.items()} if total > 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _defragment(rec: Recommendation, data: Any) -> list[ChangedJob]:
    """The moved job (or the placed one) and the jobs moved out of its way, each weighing 1:
    the estimate adds their gains up.
    """
    node = rec.proposed.get("node") or rec.target.node
    jobs = [ChangedJob(rec.target.workload or "", rec.target.node, str(node), 1.0, True)]
    for entry in _entries(rec, data, "defragment"):
        jobs.append(
            ChangedJob(
                _name(rec, entry, "workload", "defragment"),
                _name(rec, entry, "from_node", "defragment"),
                _name(rec, entry, "node", "defragment"),
                1.0,
            )
        )
    return jobs


def job_baselines(
    rec: Recommendation,
    model: ClusterModel | None,
    before: Measurement,
    probe: ProgressProbe | None = None,
) -> tuple[JobOutcome, ...]:
    """Each job ``rec`` changes (:func:`changed_jobs`; empty for one job) with its figures
    before the change: the target's are ``before`` (the verification's baseline), another's
    its own where it runs in ``model`` (none: nothing to compare with, it stays pending).
    """
    found: list[JobOutcome] = []
    for job in changed_jobs(rec):
        figures = before
        if not job.target:
            parts = parts_of(model, MOVED, job.from_node, job.job) if model is not None else []
            figures = (
                measure(model, MOVED, parts, None, probe) if parts and model else Measurement()
            )
        found.append(
            JobOutcome(job.job, job.from_node, job.node, round(job.weight, 6), job.target, figures)
        )
    return tuple(found)


def start_verification(
    outcomes: OutcomeLog,
    rec: Recommendation,
    model: ClusterModel | None,
    applied_at: float,
    probe: ProgressProbe | None = None,
) -> None:
    """Record that ``rec`` was applied at ``applied_at``: its baseline from ``model`` (the
    analysis it came from) and, when it changes several jobs, each job's
    (:func:`job_baselines`; a clearing's beneficiary and jobs moved aside:
    :func:`~toposcope.advisor.clearing_verification.clearing_jobs`).
    """
    before = baseline(rec, model, probe)
    jobs = clearing_jobs(rec, model, probe) or job_baselines(rec, model, before, probe)
    outcomes.start(rec, before, applied_at, model, jobs)


def measure_jobs(
    model: ClusterModel,
    jobs: Sequence[JobOutcome],
    target: Measurement,
    probe: ProgressProbe | None = None,
) -> tuple[JobOutcome, ...]:
    """``jobs`` with their figures now: the target's ``target`` (measured as the verifier
    measures it), another's where it went, found by its parts (none: ``measured`` stays
    ``None``).
    """
    found: list[JobOutcome] = []
    for job in jobs:
        figures: Measurement | None = target
        if not job.target:
            parts = parts_of(model, MOVED, job.node, job.job)
            figures = measure(model, MOVED, parts, None, probe) if parts else None
        found.append(replace(job, measured=figures, measured_gain=None, detail=""))
    return tuple(found)


def judge_jobs(
    rule: VerificationRule,
    kind: str,
    jobs: Sequence[JobOutcome],
    alone: Judgement,
    estimated: float | None,
) -> tuple[Judgement, tuple[JobOutcome, ...]]:
    """The verdict on a change of several ``jobs`` (measured: :func:`measure_jobs`) and the
    jobs with their gains (module docstring); ``alone`` is the verdict the verifier gave the
    target alone, which a placement keeps unless a moved job was harmed.
    """
    judged = tuple(
        replace(job, detail=alone[1]) if _placed(kind, job) else _judged(rule, job) for job in jobs
    )
    changed = [j for j in judged if not _placed(kind, j)]
    waiting = [j.job for j in changed if j.measured_gain is None]
    parts = "; ".join(f"{j.job}: {j.detail}" for j in changed)
    if waiting:
        why = f"no progress signal measured before and after yet for {', '.join(waiting)}"
        return (Verdict.PENDING, f"{why}; {parts}", None), judged
    h = rule.harm_threshold
    slowed = [j.job for j in judged if j.measured_gain is not None and j.measured_gain < -h]
    harm = f"; slowed by more than {h:.0%}: {', '.join(slowed)}" if slowed else ""
    if kind == RecommendationKind.PLACE:
        verdict, detail, gain = alone
        if slowed:
            verdict = Verdict.HARMFUL
        return (verdict, f"{detail}; moved out of its way: {parts}{harm}", gain), judged
    combined = sum(j.weight * (j.measured_gain or 0.0) for j in judged)
    how = " + ".join(f"{j.weight:.3g} x {j.job}" for j in judged if j.weight > 0)
    detail = f"{len(judged)} jobs changed: {parts}; combined gain ({how}) {combined:+.0%}{harm}"
    if combined < -h or slowed:
        return (Verdict.HARMFUL, detail, combined), judged
    wanted = rule.paid_share * max(estimated or 0.0, 0.0)
    if combined > 0 and combined >= wanted:
        return (Verdict.PAID, detail, combined), judged
    return (Verdict.NEUTRAL, f"{detail}: less than {wanted:.0%} gained", combined), judged


def _placed(kind: str, job: JobOutcome) -> bool:
    """Whether ``job`` is a placed job (judged by the placement rule, not by a change)."""
    return kind == RecommendationKind.PLACE and job.target


def _judged(rule: VerificationRule, job: JobOutcome) -> JobOutcome:
    """``job`` with the change of its progress signal (``None``: not measured yet)."""
    if job.measured is None:
        return replace(job, detail="no series in this analysis")
    found = move_change(rule, job.baseline, job.measured)
    if found is None:
        return replace(job, detail="no progress signal measured before and after yet")
    gain, change = found
    return replace(job, measured_gain=gain, detail=change)
