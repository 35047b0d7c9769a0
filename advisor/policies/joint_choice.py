"""job-migration's joint choice: the sets of jobs that want the same GPUs, chosen together.

Before any job moves, the sets the jobs to separate from a shared GPU and the poorly linked
jobs would choose alone are compared; where they share GPUs, or share them with the set
gpu-placement would start a pending job on, :func:`choose_jointly` hands them to
:func:`~toposcope.advisor.policies.contested_moves.joint_choices` and keeps the answer in the
run (``assigned``, and ``reserved`` for the pending jobs' starts it keeps), for the later
phases to follow (:meth:`~toposcope.advisor.policies.migration_run.MigrationRun.assigned_set`).
"""

from __future__ import annotations

from toposcope.advisor.gpu_sets import Placement, gpu_claims, rank_sets
from toposcope.advisor.link_gain import link_gain
from toposcope.advisor.policies.contested_moves import (
    MoveTerms,
    Wanting,
    joint_choices,
    pending_starts,
)
from toposcope.advisor.policies.defrag_values import start_now
from toposcope.advisor.policies.migration_run import MigrationRun, MoveOption
from toposcope.advisor.policies.move_starts import EnabledStart, enabled_start
from toposcope.advisor.policies.shared_gpus import SharedGpu


def choose_jointly(
    run: MigrationRun,
    movers: list[SharedGpu],
    options: list[MoveOption],
) -> None:
    """Choose together the sets of the jobs whose first choices share GPUs
    (:mod:`~toposcope.advisor.policies.contested_moves`): jobs to separate from a GPU
    they share and jobs to re-place alike; ``run.assigned`` keeps the choice.
    """
    s, search = run.settings, run.search
    base = {m.workload.key: m.gain for m in movers}
    wanting: list[Wanting] = []
    for mover in movers:
        job = mover.workload
        cells = search.node_cells(job.node)
        current = rank_sets(run.model.nodes[job.node], job.gpus, len(job.gpus), cells)[0]
        first = search.best_for(job, include_own=False)
        if first is not None:
            peers = mover.gain / (1.0 + mover.gain)  # what the jobs it leaves gain
            wanting.append(Wanting(job, current, first, include_own=False, peer_value=peers))
    for _, job, current, first in options:
        if first is not None and job.key not in base:
            wanting.append(Wanting(job, current, first))

    def gain_of(w: Wanting, target: Placement) -> float:
        link = link_gain(run.share(w.job), w.current, target, s.sensitivity)
        return (1.0 + base.get(w.job.key, 0.0)) * (1.0 + link.gain) - 1.0

    def start_of(w: Wanting, target: Placement) -> EnabledStart | None:
        if not w.include_own:
            return None  # the GPUs it leaves stay held by the jobs it shared them with
        return enabled_start(
            search,
            run.model.pending,
            w.job,
            target,
            sensitivity=s.sensitivity,
            full_value=True,
            alternative=lambda p: start_now(run, p, w.job),
        )

    terms = MoveTerms(s.remaining_seconds, s.checkpoint_restore_seconds)
    starts = pending_starts(search, run.model.pending, s.sensitivity)
    chosen, kept = joint_choices(search, wanting, gain_of, terms, starts, start_of)
    run.assigned = {k: (c.target if c is not None else None) for k, c in chosen.items()}
    for start in kept:
        claims = gpu_claims(start.target.node, start.target.gpus)
        run.reserved[start.name] = claims
        run.taken.update(claims)
    for key, target in sorted(run.assigned.items()):
        if target is None:
            run.notes.append(
                run.note(
                    key,
                    "not moved this round: the better sets it could take are chosen "
                    "for jobs that gain more from them (sets chosen jointly)",
                )
            )
