"""The recommendation of a joint re-placement of running multi-node jobs (:mod:`.fabric_swaps`).

One ``migrate-job`` of ``fabric-placement`` without contract actions (each names one node):
``proposed["joint"]`` is true and ``proposed["jobs"]`` lists every job that moves, each with
every part (``part``, ``from_node``, ``from_gpus``, ``node``, ``gpus``), the cell and level
it goes to and what it saves. A backend carries it out at once or refuses it whole: the
simulator in one ``POST /api/v1/gang-moves``
(:func:`toposcope.advisor.rmclients.gang_plan.gang_plan`); Slurm and Kubernetes cannot move
several jobs as one step and refuse it with the reason, never half of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.fabric_moves import MoveRule, running_jobs
from toposcope.advisor.policies.fabric_swaps import MovedJob, Swap, best_swap
from toposcope.advisor.recommendations import make_recommendation
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.report.recommendation import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)


def swap_recommendation(policy: str, tree: CellTree, swap: Swap, rule: MoveRule) -> Recommendation:
    """The ``migrate-job`` recommendation of ``swap`` (see the module docstring)."""
    gangs = [j for j in swap.jobs if j.multi_node]
    aside = [j for j in swap.jobs if not j.multi_node]
    first = gangs[0]
    held = sum(j.time_left * j.gpus for j in gangs)
    gain = swap.net_gpu_s / held if held > 0 else 0.0
    where = "; ".join(f"{j.job} onto {j.level_new} {j.cell} ({_nodes(j)})" for j in gangs)
    if aside:
        where += "; aside: " + ", ".join(f"{j.job} to {j.parts[0].node}" for j in aside)
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy=policy,
        target=Target(first.cell, first.job),
        summary=(
            f"move {', '.join(j.job for j in swap.jobs)} at once so that "
            f"{_names(gangs)} each run under one {first.level_new}: {where}; saves about "
            f"{swap.saved_s:.0f} s ({swap.saved_gpu_s:.0f} GPU-s) for {len(swap.jobs)} "
            f"restart(s) of {rule.restart_seconds:.0f} s ({swap.restart_gpu_s:.0f} GPU-s)"
        ),
        current={
            # how the gain was estimated, as job-migration says it (calibration learns apart)
            "communication_share": {"estimate": _basis(gangs)},
            "jobs": {
                j.job: {
                    "nodes": sorted({p.from_node for p in j.parts}),
                    "level": j.level_now,
                    "time_left_s": round(j.time_left, 1),
                    "step_factor": round(j.factor_now, 4),
                    "gpus": j.gpus,
                    "communication_share": j.share.as_json() if j.share is not None else None,
                }
                for j in gangs
            },
        },
        proposed={
            "joint": True,
            "requeue": True,
            "jobs": [_job(j) for j in swap.jobs],
            "nodes": sorted({p.node for j in swap.jobs for p in j.parts}),
            "saved_s": round(swap.saved_s, 1),
            "restart_s": round(swap.restart_s, 1),
            "saved_gpu_s": round(swap.saved_gpu_s, 1),
            "restart_gpu_s": round(swap.restart_gpu_s, 1),
            "helped": {k: round(v, 1) for k, v in sorted(swap.helped.items())},
            "combinations_tried": swap.combinations,
        },
        evidence=[
            *(
                Evidence(
                    "toposcope_job_fabric_top_level",
                    {"workload": j.job, "level": j.level_now},
                    float(tree.levels.index(j.level_now) - 1),
                )
                for j in gangs
            ),
            *(
                Evidence(
                    "toposcope_workload_gpu_info",
                    {"workload": j.job, "node": j.parts[0].from_node},
                    float(len(j.parts[0].from_gpus)),
                )
                for j in aside
            ),
        ],
        estimated_gain=gain,
        gain_model=(
            "step time 1 + a per-level slowdown per level crossed above the tightest "
            "x the uplink's taper over 2:1 x the multi-node jobs sharing it; "
            + ", ".join(
                f"{j.job} {j.factor_now:.3f}x -> {j.factor_new:.3f}x over {j.time_left:.0f} s "
                f"({_priced(j, rule)})"
                for j in gangs
            )
            + f"; less {len(swap.jobs)} restart(s) of {rule.restart_seconds:.0f} s; "
            "saving and restarts weighed by each job's GPUs"
        ),
        confidence=0.4,
        risk=Risk.HIGH,
        claims=[
            *(f"workload:{p.from_node}/{p.workload}" for j in swap.jobs for p in j.parts),
            *(f"node:{n}" for n in sorted({p.node for j in swap.jobs for p in j.parts})),
        ],
    )


def _job(job: MovedJob) -> dict[str, object]:
    """One moved job as ``proposed["jobs"]`` lists it."""
    entry: dict[str, object] = {
        "job": job.job,
        "multi_node": job.multi_node,
        "parts": [
            {
                "part": p.workload,
                "from_node": p.from_node,
                "from_gpus": list(p.from_gpus),
                "node": p.node,
                "gpus": list(p.gpus),
            }
            for p in job.parts
        ],
    }
    if job.multi_node:
        entry.update(
            cell=job.cell,
            level=job.level_new,
            saved_s=round(job.saved_s, 1),
            step_factor=round(job.factor_new, 4),
            communication_share=job.share.as_json() if job.share is not None else None,
        )
    return entry


def _basis(gangs: Sequence[MovedJob]) -> str:
    """``measured`` when every moving multi-node job's NIC load priced it, else ``prior``."""
    return "measured" if all(j.share is not None and j.share.measured for j in gangs) else "prior"


def _priced(job: MovedJob, rule: MoveRule) -> str:
    """What priced ``job``'s step time, for the gain model's text."""
    if job.share is None:
        return f"{rule.per_level:g} per level, the prior"
    return job.share.describe()


def _nodes(job: MovedJob) -> str:
    return ",".join(sorted({p.node for p in job.parts}))


def _names(jobs: list[MovedJob]) -> str:
    names = [j.job for j in jobs]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def joint_moves(
    policy: str,
    tree: CellTree,
    free: Mapping[str, NodeFree],
    model: ClusterModel,
    rule: MoveRule,
    taken: Sequence[Recommendation],
) -> tuple[list[Recommendation], list[Note]]:
    """The joint re-placement worth making after ``taken`` (the policy's other advice this
    round, whose jobs and nodes it leaves alone), as at most one recommendation; when the
    best one found does not pay, a note that says by how much.
    """
    claimed = {c.removeprefix("node:") for r in taken for c in r.claims if c.startswith("node:")}
    busy = {r.target.workload for r in taken}
    jobs = [
        replace(j, time_left=rule.unknown_left_s)
        if j.time_left is None and rule.unknown_left_s > 0
        else j
        for j in running_jobs(model, tree)
        if j.name not in busy
    ]
    found = best_swap(tree, free, model, jobs, rule, claimed)
    if found is None:
        return [], []
    if found.net_gpu_s > 0:
        return [swap_recommendation(policy, tree, found, rule)], []
    gangs = [j for j in found.jobs if j.multi_node]
    steps = ", ".join(
        f"{j.job} {j.factor_now:.3f}x -> {j.factor_new:.3f}x, {_priced(j, rule)}" for j in gangs
    )
    why = (
        f"moving {', '.join(j.job for j in found.jobs)} at once would put {_names(gangs)} "
        f"under one {gangs[0].level_new} ({steps}), saving {found.saved_gpu_s:.0f} GPU-s for "
        f"{found.restart_gpu_s:.0f} GPU-s of restarts: not worth it"
    )
    return [], [Note(policy, gangs[0].job, why)]
