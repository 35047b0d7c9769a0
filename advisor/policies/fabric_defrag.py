"""fabric-placement's third part: clear a leaf for a pending multi-node job by moving the small
jobs that sit on it.

Beside :mod:`.fabric_placement`: when a pending job would run above the tightest level it
could fit under and waiting does not pay, :func:`toposcope.fabric.celldefrag.clear_cell`
finds the cell of that level cleared with the fewest moves of single-node jobs (a workload
holding GPUs on one node only; every such job counts as movable here, and the resource manager
refuses to move one that did not opt in), except a job about to end; each goes where it runs no
slower and the move names the GPUs it takes (:mod:`.fabric_aside`). The clearing is
recommended when the pending job's
faster run, ``run_seconds x (f_now / f_tight - 1)``, is worth more than one restart per
moved job (``restart_seconds`` each). It becomes two recommendations: a ``migrate-job`` whose
actions move the small jobs (one contract ``migrate`` action each, applied as job-migration's
are), and the pending job's ``place`` on the cleared cell's nodes, to apply after it.
"""

from __future__ import annotations

from collections.abc import Mapping

from toposcope.advisor.fabric_jobs import job_parts
from toposcope.advisor.fabric_wait import level_factor
from toposcope.advisor.gpu_sets import gpu_claims
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.fabric_aside import ending_soon
from toposcope.advisor.recommendations import CHECKPOINT_RESTORE_S, make_recommendation
from toposcope.fabric.celldefrag import CellClearing, Occupant
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest


def occupants_of(
    model: ClusterModel, tree: CellTree, restart_seconds: float = CHECKPOINT_RESTORE_S
) -> dict[str, list[Occupant]]:
    """Node -> the jobs holding GPUs on it; single-node jobs are the movable ones (a part of a
    multi-node job named apart from its siblings, :mod:`~toposcope.advisor.fabric_jobs`, is not,
    nor a job about to end, :func:`~.fabric_aside.ending_soon`).
    """
    nodes_of: dict[str, set[str]] = {}
    for workload in model.workloads:
        if workload.gpus:
            nodes_of.setdefault(workload.name, set()).add(workload.node)
    held = ((w.node, w.name, len(w.gpus)) for w in model.workloads if w.gpus)
    parts = job_parts(model.fabric_jobs, held)
    result: dict[str, list[Occupant]] = {}
    for workload in model.workloads:
        if workload.gpus and workload.node in tree.path:
            part = f"{workload.node}/{workload.name}" in parts
            movable = (
                len(nodes_of[workload.name]) == 1
                and not part
                and not ending_soon(workload.time_left_seconds, restart_seconds)
            )
            result.setdefault(workload.node, []).append(
                Occupant(workload.name, len(workload.gpus), movable, tuple(sorted(workload.gpus)))
            )
    return result


def clearing_pays(
    clearing: CellClearing,
    levels_saved: int,
    run_seconds: float,
    per_level: float,
    restart_seconds: float,
) -> float:
    """Seconds the clearing nets (the pending job's faster run less the restarts; <= 0: no)."""
    faster = run_seconds * (level_factor(levels_saved, per_level) - 1.0)
    return faster - len(clearing.moves) * restart_seconds


def defrag_recommendation(
    policy: str, job: str, clearing: CellClearing, net_seconds: float, run_seconds: float
) -> Recommendation:
    """The ``migrate-job`` recommendation that moves the small jobs out of the cell."""
    moves = clearing.moves
    listed = ", ".join(f"{m.job} to {m.to_node}" for m in moves)
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy=policy,
        target=Target(clearing.cell, job),
        summary=f"clear {clearing.cell} for {job}: move {listed}",
        current={"for": job, "cell": clearing.cell},
        proposed={
            "cell": clearing.cell,
            "for": job,
            "nodes_for_job": list(clearing.nodes),
            "moves": [
                {
                    "workload": m.job,
                    "from_node": m.from_node,
                    "to_node": m.to_node,
                    "gpus": m.gpus,
                    "to_gpus": list(m.to_gpus),
                }
                for m in moves
            ],
        },
        evidence=[
            Evidence(
                "toposcope_workload_gpu_info",
                {"workload": m.job, "node": m.from_node},
                float(m.gpus),
            )
            for m in moves
        ],
        estimated_gain=net_seconds / run_seconds if run_seconds > 0 else 0.0,
        gain_model=(
            f"{job} runs under one {clearing.cell} instead of higher up over "
            f"{run_seconds:.0f} s (a prior per level), less one restart per moved job: "
            f"{net_seconds:.0f} s net"
        ),
        confidence=0.3,
        risk=Risk.HIGH,
        actions=[
            ActionRequest("", ActionKind.MIGRATE, m.job, m.to_node, gpus=list(m.to_gpus))
            for m in moves
        ],
        claims=[
            *(f"workload:{m.from_node}/{m.job}" for m in moves),
            *(f"node:{m.to_node}" for m in moves),
            *(c for m in moves for c in gpu_claims(m.to_node, m.to_gpus)),
        ],
    )


def take_after_clearing(
    free: dict[str, NodeFree], clearing: CellClearing, share: int, moved: Mapping[str, int]
) -> None:
    """Count the cleared nodes as the job's and the destinations as holding the moved jobs."""
    for move in clearing.moves:
        state = free[move.to_node]
        left = None
        if state.free_indices is not None and move.to_gpus:
            left = tuple(i for i in state.free_indices if i not in move.to_gpus)
        free[move.to_node] = NodeFree(state.node, state.total, max(0, state.free - move.gpus), left)
    for node in clearing.nodes:
        state = free[node]
        freed = state.free + moved.get(node, 0)
        free[node] = NodeFree(state.node, state.total, max(0, freed - share))


def moved_gpus(clearing: CellClearing) -> dict[str, int]:
    """GPUs freed per node of the cell by the clearing's moves."""
    freed: dict[str, int] = {}
    for move in clearing.moves:
        freed[move.from_node] = freed.get(move.from_node, 0) + move.gpus
    return freed
