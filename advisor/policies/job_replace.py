"""job-migration's second phase: busy jobs on poorly linked sets, re-placed.

:func:`move_options` lists every busy job whose set could be better, even if only by moving
small jobs away; :func:`replace` decides for each, those whose sets were chosen jointly first,
then the others by :func:`choice_order`: a defragmentation when it nets more than a plain move
(:mod:`~toposcope.advisor.policies.defrag_values`), else the plain move when it beats the
checkpoint-restore cost, else a note. Then :func:`exchange_gpus` lets two jobs of one node that no
move touched trade GPUs (:mod:`~toposcope.advisor.policies.job_exchange`).
"""

from __future__ import annotations

from toposcope.advisor.gpu_search import worst_rank
from toposcope.advisor.gpu_sets import Placement, gpu_claims, rank_sets
from toposcope.advisor.link_gain import LinkGain, link_gain
from toposcope.advisor.model import PendingWorkload, WorkloadModel
from toposcope.advisor.policies.contested_moves import UNLISTED_NOTE, unlisted_nvlinks
from toposcope.advisor.policies.defrag_values import (
    defrag_note,
    defrag_plan,
    defrag_value,
    start_now,
    start_seconds,
)
from toposcope.advisor.policies.job_exchange import (
    ExchangeTerms,
    exchange_recommendation,
    exchanges,
)
from toposcope.advisor.policies.migration_recommendations import (
    defrag_recommendation,
    move_recommendation,
)
from toposcope.advisor.policies.migration_run import MigrationRun, MoveOption
from toposcope.advisor.policies.pcie_tiers import tier_note, tier_only


def choice_order(option: MoveOption) -> tuple[float, str]:
    """The order jobs choose their new sets in: highest gain per GPU first (then by key).

    A machine's few well-linked GPUs serve more jobs when the job that gains most for each
    GPU it takes chooses first: a 4-GPU job gaining as much as a 2-GPU one takes twice the
    GPUs for it. Every job counts the same in what the cluster gains (the closed loop's
    oracle sums the jobs' efficiencies).
    """
    gain, job = option[0], option[1]
    return (-gain / max(1, len(job.gpus)), job.key)


def move_options(run: MigrationRun, jobs: list[WorkloadModel]) -> list[MoveOption]:
    """(gain, job, its set, the best set it could get alone or ``None``) for every busy
    job not moved yet whose set could be better, even if only by moving small jobs away.
    """
    s, model = run.settings, run.model
    options: list[MoveOption] = []
    for job in jobs:
        if job.key in run.moved:
            continue
        node = model.node(job.node)
        if node is None:
            continue
        mean = node.mean_utilization(job.gpus)
        if mean is None:
            run.notes.append(run.note(job.key, "no GPU utilization series for its GPUs"))
            continue
        if mean < s.min_utilization:
            continue  # idle: idle-release's business
        if unlisted_nvlinks(node, job.gpus, run.share(job)):
            run.notes.append(run.note(job.key, UNLISTED_NOTE))
            continue
        current = rank_sets(node, job.gpus, len(job.gpus), run.search.node_cells(job.node))[0]
        f_now = current.factor(s.sensitivity)
        candidate = run.search.best_for(job)
        if candidate is None or candidate.factor(s.sensitivity) >= f_now:
            if worst_rank(current) <= run.search.floor(job.node, len(job.gpus)):
                continue  # nothing better exists, even by moving small jobs away
            options.append((0.0, job, current, None))
            continue
        gain = link_gain(run.share(job), current, candidate, s.sensitivity).gain
        options.append((gain, job, current, candidate))
    return options


def replace(run: MigrationRun, options: list[MoveOption]) -> None:
    """Re-place busy jobs whose set is worse than they could get (``options``, from
    :func:`move_options`): those whose sets were chosen jointly first, then the others,
    highest gain per GPU first (:func:`choice_order`): by a plain move, or by a
    defragmentation when that saves more.
    """
    ordered = sorted(options, key=lambda o: (o[1].key not in run.assigned, choice_order(o)))
    for _, job, current, alone in ordered:
        if job.key in run.moved:
            continue  # moved out of the way of a larger job by an earlier plan
        choice = alone
        if job.key in run.assigned:
            choice = run.assigned_set(job, include_own=True)
            if choice is None:
                continue
        replace_one(run, job, current, choice)


def replace_one(
    run: MigrationRun, job: WorkloadModel, current: Placement, first_choice: Placement | None
) -> None:
    """Decide for one job: a defragmentation when it nets more than a plain move, else
    the plain move when it beats the checkpoint-restore cost, else a note.
    """
    s = run.settings
    f_now = current.factor(s.sensitivity)
    best = first_choice

    def now_of(pending: PendingWorkload) -> float:
        return start_now(run, pending, job)

    if first_choice is not None and run.taken & set(
        gpu_claims(first_choice.node, first_choice.gpus)
    ):
        best = run.search.best_for(job, run.taken)
    if best is not None and best.factor(s.sensitivity) >= f_now:
        best = None
    link: LinkGain | None = None
    if best is not None:
        link = link_gain(run.share(job), current, best, s.sensitivity)
        link = link.with_locality(*run.unpinned(job, best))
    saved = s.remaining_seconds * max(0.0, 1.0 - link.ratio) if link is not None else 0.0
    must_beat = min(worst_rank(current), worst_rank(best))
    if must_beat > run.search.floor(job.node, len(job.gpus)):
        plan = defrag_plan(run, len(job.gpus), job, must_beat)
        if plan is not None and tier_only(s, current, plan.target):
            if best is None:
                run.notes.append(tier_note(run.terms.policy, job, current, plan.target, "freeing"))
            plan = None
        if plan is not None:
            moved = link_gain(run.share(job), current, plan.target, s.sensitivity)
            away = [m.workload for m in plan.moves]
            moved = moved.with_locality(*run.unpinned(job, plan.target, away))
            value = defrag_value(s, plan, f_now, f_now, own_cost=True, link=moved)
            plan_start = run.start_after(job, plan.target, plan.claims(), s.sensitivity, now_of)
            plain_net = saved - s.checkpoint_restore_seconds if best else None
            if plain_net is not None and best is not None:
                start = run.start_after(job, best, [], s.sensitivity, now_of)
                plain_net += start_seconds(run, start)
            if value.net_seconds > 0 and (
                plain_net is None or value.net_seconds + start_seconds(run, plan_start) > plain_net
            ):
                rec = defrag_recommendation(
                    run.model,
                    job,
                    current,
                    plan,
                    value,
                    run.terms,
                    estimate=moved.source,
                    start=plan_start,
                )
                moved_keys = (m.workload.key for m in plan.moves)
                run.take(rec, plan.claims(), job.key, *moved_keys, start=plan_start)
                return
            if best is None:
                run.notes.append(defrag_note(run, job.key, plan, value))
    if best is None or link is None:
        return
    if tier_only(s, current, best):
        run.notes.append(tier_note(run.terms.policy, job, current, best, "moving to"))
        return
    if saved <= s.checkpoint_restore_seconds:
        run.notes.append(
            run.note(
                job.key,
                f"moving to {best.node} GPUs {list(best.gpus)} would save {saved:.0f}s "
                f"of {s.remaining_seconds:.0f}s, less than the checkpoint-restore "
                f"cost {s.checkpoint_restore_seconds:.0f}s",
            )
        )
        return
    start = run.start_after(job, best, [], s.sensitivity, now_of)
    rec = move_recommendation(
        run.model,
        job,
        current,
        best,
        run.terms,
        gain=link.gain,
        saved=saved,
        model_text=link.text,
        estimate=link.source,
        start=start,
    )
    run.take(rec, gpu_claims(best.node, best.gpus), job.key, start=start)


def exchange_gpus(run: MigrationRun, jobs: list[WorkloadModel]) -> None:
    """Let two jobs of one node that no move so far touched trade GPUs when one gains
    and the other loses nothing, both moved at once
    (:mod:`~toposcope.advisor.policies.job_exchange`).
    """
    s = run.settings
    terms = ExchangeTerms(
        s.remaining_seconds,
        s.checkpoint_restore_seconds,
        s.sensitivity,
        s.pin_to_gpu_numa,
        s.min_utilization,
    )

    def estimate(job: WorkloadModel, current: Placement, target: Placement) -> LinkGain:
        return link_gain(run.share(job), current, target, s.sensitivity)

    def held_back(current: Placement, target: Placement) -> bool:
        return tier_only(s, current, target)

    movable = [j for j in jobs if j.key not in run.moved]
    found = exchanges(
        run.model, movable, run.taken, terms, estimate, held_back, run.search.node_cells
    )
    for exchange in found:
        rec = exchange_recommendation(run.model, run.terms.policy, exchange, terms)
        run.take(rec, exchange.claims(), exchange.first.job.key, exchange.second.job.key)
