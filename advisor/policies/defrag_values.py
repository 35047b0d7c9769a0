"""Defragmentation plans and their worth in job-migration's terms, and its pending phase.

:func:`defrag_plan` asks :func:`~toposcope.advisor.defragment.best_plan` for the set a job of
a size could have if smaller jobs moved to other free GPUs, leaving alone what the run took,
moved or holds; :func:`defrag_value` and :func:`pending_value` weigh a plan in the run's
settings (a running job pays its own checkpoint-restore, a pending one only waits). The last
phase (:func:`place_pending`) recommends such a plan for a pending job that no free set
serves as well. :func:`start_now` tells what a pending job gets this round without a given
move, so that a move counts only the start it really makes possible.
"""

from __future__ import annotations

from collections.abc import Iterable

from toposcope.advisor.defragment import DefragPlan, DefragValue, best_plan, plan_value
from toposcope.advisor.gpu_search import worst_rank
from toposcope.advisor.gpu_sets import Placement, first_fit
from toposcope.advisor.link_gain import MEASURED, LinkGain
from toposcope.advisor.model import PendingWorkload, WorkloadModel
from toposcope.advisor.policies.migration_recommendations import defrag_recommendation
from toposcope.advisor.policies.migration_run import MigrationRun
from toposcope.advisor.policies.migration_settings import JobMigrationSettings
from toposcope.advisor.policies.move_starts import EnabledStart, start_value
from toposcope.report.recommendation import Note


def place_pending(run: MigrationRun, pending: PendingWorkload) -> None:
    """Place a pending job on a set freed by moving small jobs, when no free set is as
    good and the gain beats the moved jobs' cost (else a note, or nothing to say).
    """
    s = run.settings
    count = pending.gpus_requested
    run.taken.difference_update(run.reserved.pop(pending.name, []))
    if count < s.min_gpus or pending.name in run.served:
        return  # too small, or starts on the GPUs a move of this run leaves
    plain = run.search.free_best(count, run.taken)
    must_beat = worst_rank(plain)
    if must_beat <= run.search.floor_any(count):
        return
    plan = defrag_plan(run, count, None, must_beat)
    if plan is None:
        return
    value = pending_value(run, plan, plain, count, run.taken)
    if value.net_seconds <= 0:
        run.notes.append(defrag_note(run, f"pending/{pending.name}", plan, value))
        return
    rec = defrag_recommendation(
        run.model, None, plain, plan, value, run.terms, pending=pending.name
    )
    run.take(rec, plan.claims(), *(m.workload.key for m in plan.moves))


def defrag_plan(
    run: MigrationRun, count: int, job: WorkloadModel | None, must_beat: int
) -> DefragPlan | None:
    """The best defragmentation for a job of ``count`` GPUs (``job``, or a pending one:
    ``None``) whose set's worst link ranks ``must_beat``, moving none of what the run took,
    moved or holds in place.
    """
    return best_plan(
        run.search,
        count,
        job,
        taken=run.taken,
        moved=run.moved | set(run.stay),
        must_beat=must_beat,
        sensitivity=run.settings.sensitivity,
    )


def pending_value(
    run: MigrationRun,
    plan: DefragPlan,
    plain: Placement | None,
    count: int,
    taken: Iterable[str],
) -> DefragValue:
    """A pending job's defragmentation ``plan`` against its best free set ``plain`` and
    the first set that fits it among the GPUs not ``taken`` (no cost of its own: it waits).
    """
    s = run.settings
    baseline = first_fit(run.model, count, taken)
    return defrag_value(
        s,
        plan,
        plain.factor(s.sensitivity) if plain is not None else None,
        baseline.factor(s.sensitivity) if baseline is not None else None,
        own_cost=False,
    )


def defrag_value(
    settings: JobMigrationSettings,
    plan: DefragPlan,
    f_now: float | None,
    f_base: float | None,
    *,
    own_cost: bool,
    link: LinkGain | None = None,
) -> DefragValue:
    """The plan's worth in ``settings``' checkpoint-restore cost and remaining run time; a
    running large job's ``link`` gain replaces the prices' ratio for it when it rests on
    measured traffic.
    """
    measured = None
    if link is not None and (link.source == MEASURED or link.locality != 1.0):
        measured = (link.ratio, link.text)
    return plan_value(
        plan,
        f_now,
        f_base,
        own_cost=own_cost,
        cost=settings.checkpoint_restore_seconds,
        remaining=settings.remaining_seconds,
        sensitivity=settings.sensitivity,
        measured=measured,
    )


def defrag_note(run: MigrationRun, target: str, plan: DefragPlan, value: DefragValue) -> Note:
    """The note that a defragmentation ``plan`` for ``target`` would not pay."""
    names = ", ".join(m.workload.name for m in plan.moves)
    return run.note(
        target,
        f"freeing {plan.target.node} GPUs {list(plan.target.gpus)} by moving {names} "
        f"would save {value.net_seconds:.0f}s net of the checkpoint-restore cost of "
        f"every job moved: not worth it",
    )


def start_now(run: MigrationRun, pending: PendingWorkload, mover: WorkloadModel) -> float:
    """``pending``'s efficiency where it starts this round unless ``mover`` moves: on its
    best free set, or on the set the pending phase would free for it by moving small jobs
    other than ``mover`` (:func:`place_pending`'s plan, when it pays); 0 when neither.
    """
    s, count = run.settings, pending.gpus_requested
    taken = run.taken - set(run.reserved.get(pending.name, []))
    plain = run.search.free_best(count, taken)
    best = start_value(run.search, count, plain, s.sensitivity) if plain is not None else 0.0
    must_beat = worst_rank(plain)
    if count < s.min_gpus or must_beat <= run.search.floor_any(count):
        return best
    plan = best_plan(
        run.search,
        count,
        None,
        taken=run.taken,
        moved=run.moved | set(run.stay) | {mover.key},
        must_beat=must_beat,
        sensitivity=s.sensitivity,
    )
    if plan is None:
        return best
    value = pending_value(run, plan, plain, count, taken)
    if value.net_seconds <= 0:
        return best
    return max(best, start_value(run.search, count, plan.target, s.sensitivity))


def start_seconds(run: MigrationRun, start: EnabledStart | None) -> float:
    """What a pending job's start is worth in seconds of the remaining run time."""
    return run.settings.remaining_seconds * start.value if start is not None else 0.0
