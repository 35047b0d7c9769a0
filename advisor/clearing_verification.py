"""Verifying a clearing: a recommendation that moves jobs out of another job's way.

fabric-placement's leaf clearing (``proposed.moves``) and nic-affinity's clearing of a
NIC's near GPUs (``proposed.workload``) move small jobs aside so that the job their
``proposed.for`` names (the *beneficiary*) can be placed or moved onto what they free; that
job's own placement or move comes later, verified on its own. The clearing itself bought
something only if the beneficiary took the freed GPUs, and cost something for certain: a
restart of each job it moved, which must not run slower where it went.

At apply time :func:`clearing_jobs` records the beneficiary (first, weight 1: the clearing's
estimate is its gain) with its figures where it ran (none when it was pending), and each job
moved aside (weight 0: the estimate counts it at no gain) with its figures where it ran and
the GPUs it held there (from the model, else as the recommendation names them): the GPUs
the clearing frees. From ``verify_after`` each analysis (:func:`judge_clearing`, ``h`` the
harm threshold):

* measures every job moved aside where it went, as a job of a joint move is measured (its
  progress signal before and after: :func:`~toposcope.advisor.outcomes.move_change`);
* **harmful** as soon as one of them was slowed by more than ``h`` (the service reverts it
  where the kind and the resource manager allow);
* **paid** once a part of the beneficiary holds one of the freed GPUs (on a node where the
  GPUs freed are not known, any GPU of that node) and every job moved aside was measured
  unharmed;
* **pending** otherwise; at the give-up time **neutral** when the beneficiary did not use the
  freed GPUs (the clearing restarted its jobs for nothing, said in the detail), and
  **undetermined** when the figures to decide are missing (the freed nodes have no series,
  or a job moved aside has no progress signal before and after).

The verification's ``measured`` and ``measured_gain`` are the beneficiary's, and only where
its gain was measured (it ran before the clearing and runs on the freed GPUs now, a progress
signal read both times): calibration learns from a clearing only then, since the estimate is
that job's gain; a beneficiary that was pending leaves calibration alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from toposcope.advisor.fabric_jobs import job_parts
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.outcomes import (
    Judgement,
    VerificationRule,
    made_for,
    measure,
    move_change,
    parts_of,
)
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import JobOutcome, Measurement, Verdict, Verification
from toposcope.report.recommendation import Recommendation, RecommendationKind

#: the kind each job of a clearing is measured as (moved, wherever it went)
MOVED = str(RecommendationKind.MIGRATE_JOB)
#: where a clearing freed GPUs: node -> the GPU indices (empty: the whole node)
Freed = dict[str, frozenset[int]]


def _gpus(rec: Recommendation, value: Any, field: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(
        isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in value
    ):
        raise ConfigError(f"{rec.id}: {field} is not a list of GPU indices")
    return tuple(sorted(value))


def _text(rec: Recommendation, value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{rec.id}: {field} names no node or job")
    return value


def moved_aside(rec: Recommendation) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """The jobs clearing ``rec`` moves aside: (job, node it left, node it went to, GPUs it
    left where the recommendation names them), from ``proposed.moves`` (a leaf clearing) or
    ``proposed.workload`` with ``current.node`` and ``current.gpus`` (a NIC clearing).

    Raises :class:`~toposcope.errors.ConfigError` for a list it cannot read.
    """
    moves = rec.proposed.get("moves")
    if moves is not None:
        if not isinstance(moves, list) or not all(isinstance(m, Mapping) for m in moves):
            raise ConfigError(f"{rec.id}: proposed.moves is not a list of objects")
        return [
            (
                _text(rec, m.get("workload"), "proposed.moves[].workload"),
                _text(rec, m.get("from_node"), "proposed.moves[].from_node"),
                _text(rec, m.get("to_node"), "proposed.moves[].to_node"),
                (),
            )
            for m in moves
        ]
    return [
        (
            _text(rec, rec.proposed.get("workload"), "proposed.workload"),
            _text(rec, rec.current.get("node", rec.target.node), "current.node"),
            _text(rec, rec.proposed.get("node"), "proposed.node"),
            _gpus(rec, rec.current.get("gpus"), "current.gpus"),
        )
    ]


def job_workloads(model: ClusterModel, job: str) -> list[WorkloadModel]:
    """Every workload holding GPUs for ``job`` in ``model``, on any node: the workloads of
    that name and the parts the fabric exporter joins into it (none: it does not run).
    """
    held = [(w.node, w.name, len(w.gpus)) for w in model.workloads if w.gpus]
    part_of = job_parts(model.fabric_jobs, held)
    found = [w for w in model.workloads if w.gpus and part_of.get(w.key, w.name) == job]
    return sorted(found, key=lambda w: w.key)


def clearing_jobs(
    rec: Recommendation, model: ClusterModel | None, probe: ProgressProbe | None = None
) -> tuple[JobOutcome, ...]:
    """The beneficiary of clearing ``rec`` (empty for another recommendation) and the jobs it
    moves aside, each with its figures before the change (module docstring).
    """
    job = made_for(rec)
    if job is None:
        return ()
    moves = moved_aside(rec)
    parts = job_workloads(model, job) if model is not None else []
    before = measure(model, MOVED, parts, None, probe) if parts and model else Measurement()
    ran = parts[0].node if parts else ""
    found = [JobOutcome(job, ran, moves[0][1], 1.0, True, before)]
    for name, old, new, named in moves:
        here = parts_of(model, MOVED, old, name) if model is not None else []
        figures = measure(model, MOVED, here, None, probe) if here and model else Measurement()
        held = tuple(sorted(g for w in here if w.node == old for g in w.gpus)) or named
        found.append(JobOutcome(name, old, new, 0.0, False, figures, from_gpus=held))
    return tuple(found)


def freed_by(jobs: Sequence[JobOutcome]) -> Freed:
    """Where the jobs moved aside freed GPUs (a node whose GPUs are not known: all of it)."""
    freed: dict[str, set[int]] = {}
    whole: set[str] = set()
    for job in jobs:
        if job.target:
            continue
        freed.setdefault(job.from_node, set()).update(job.from_gpus)
        if not job.from_gpus:
            whole.add(job.from_node)
    return {node: frozenset() if node in whole else frozenset(g) for node, g in freed.items()}


def _uses(workload: WorkloadModel, freed: Freed) -> bool:
    gpus = freed.get(workload.node)
    return gpus is not None and (not gpus or bool(gpus & set(workload.gpus)))


def _shown(freed: Freed) -> str:
    return ", ".join(
        f"{node} GPUs {sorted(gpus)}" if gpus else node for node, gpus in sorted(freed.items())
    )


def _moved_now(
    rule: VerificationRule, model: ClusterModel, job: JobOutcome, probe: ProgressProbe | None
) -> JobOutcome:
    """``job`` (moved aside) measured where it went, with the change of its progress signal."""
    parts = parts_of(model, MOVED, job.node, job.job)
    if not parts:
        return replace(job, measured=None, measured_gain=None, detail="no series in this analysis")
    now = measure(model, MOVED, parts, None, probe)
    found = move_change(rule, job.baseline, now)
    if found is None:
        why = "no progress signal measured before and after yet"
        return replace(job, measured=now, measured_gain=None, detail=why)
    return replace(job, measured=now, measured_gain=found[0], detail=found[1])


def _beneficiary_now(
    rule: VerificationRule,
    model: ClusterModel,
    job: JobOutcome,
    freed: Freed,
    probe: ProgressProbe | None,
) -> tuple[JobOutcome, bool]:
    """The beneficiary measured now and whether a part of it holds a freed GPU."""
    parts = job_workloads(model, job.job)
    if not parts:
        return replace(job, measured=None, measured_gain=None, detail="does not run"), False
    now = measure(model, MOVED, parts, None, probe)
    there = [w for w in parts if _uses(w, freed)]
    if not there:
        where = ", ".join(f"{w.node} GPUs {list(w.gpus)}" for w in parts)
        return replace(job, measured=now, measured_gain=None, detail=f"runs on {where}"), False
    where = ", ".join(f"{w.node} GPUs {list(w.gpus)}" for w in there)
    found = move_change(rule, job.baseline, now)
    gain, change = found if found is not None else (None, "")
    detail = f"runs on the freed GPUs: {where}" + (f"; {change}" if change else "")
    return replace(job, node=there[0].node, measured=now, measured_gain=gain, detail=detail), True


def judge_clearing(
    rule: VerificationRule,
    model: ClusterModel,
    item: Verification,
    waited: float,
    probe: ProgressProbe | None = None,
) -> tuple[Judgement, Measurement | None, tuple[JobOutcome, ...]]:
    """The verdict on clearing ``item`` in ``model`` ``waited`` seconds after it was applied
    (module docstring), the beneficiary's figures when its gain was measured, and every job
    with its figures now.
    """
    aside = [j for j in item.jobs if not j.target]
    targets = [j for j in item.jobs if j.target]
    if len(targets) != 1 or not aside:
        why = f"no job moved aside or cleared for recorded for {item.made_for}"
        return (Verdict.UNDETERMINED, why, None), None, item.jobs
    [beneficiary] = targets
    freed = freed_by(aside)
    moved = [_moved_now(rule, model, job, probe) for job in aside]
    helped, used = _beneficiary_now(rule, model, beneficiary, freed, probe)
    jobs = (helped, *moved)
    gain = helped.measured_gain
    measured = helped.measured if gain is not None else None
    h = rule.harm_threshold
    parts = "; ".join(f"{j.job}: {j.detail}" for j in moved)
    said = f"cleared {_shown(freed)} for {item.made_for} ({helped.detail}); moved aside: {parts}"
    slowed = [j.job for j in moved if j.measured_gain is not None and j.measured_gain < -h]
    if slowed:
        harm = f"{said}; slowed by more than {h:.0%}: {', '.join(slowed)}"
        return (Verdict.HARMFUL, harm, gain), measured, jobs
    waiting = [j.job for j in moved if j.measured_gain is None]
    late = waited >= rule.give_up_seconds
    if used and not waiting:
        return (Verdict.PAID, f"{said}; none slowed by more than {h:.0%}", gain), measured, jobs
    if used:
        why = f"{said}; no progress signal measured before and after for {', '.join(waiting)}"
        return (Verdict.UNDETERMINED if late else Verdict.PENDING, why, gain), measured, jobs
    if not late:
        return (Verdict.PENDING, f"{said}; waiting for {item.made_for}", None), None, jobs
    if not any(model.node(node) is not None for node in freed):
        why = f"{said}; no series for the freed nodes by the give-up time"
        return (Verdict.UNDETERMINED, why, None), None, jobs
    cost = (
        f"{said}; {item.made_for} did not use the freed GPUs within {rule.give_up_seconds:g}s: "
        f"the clearing restarted {len(moved)} job(s) for nothing"
    )
    return (Verdict.NEUTRAL, cost, None), None, jobs
