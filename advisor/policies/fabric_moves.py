"""fabric-placement's second part: running multi-node jobs spread over more of the fabric than
they need, moved onto a tighter cell where the time saved beats the restart.

Beside :mod:`.fabric_placement` (which places pending jobs first, so that a move never takes
GPUs a pending job was given). A running job is multi-node when one workload name (Slurm's
``slurm-job-<id>``) holds GPUs on several nodes of the fabric. Its GPUs count as free for its
own move; :func:`~toposcope.fabric.cellfit.choose` then says where it would go. When that
cell is on a lower level than the level its traffic crosses now, each level saved shortens
the rest of its run by its per-level slowdown (from its measured NIC load where the
exporters publish it, :mod:`toposcope.advisor.gang_share`, else the prior of
:mod:`toposcope.advisor.fabric_wait`): over the time it has left
(``toposcope_queue_job_time_left_seconds``), ``left x (1 - f_new / f_now)`` seconds. The
move costs one checkpoint, requeue and restart of every rank (``restart_seconds``, all ranks
at once); it is recommended when the time saved is larger. A job whose time left is
unknown (no limit, or no scheduler publishing it) cannot be priced and gets a note.

The recommendation (kind ``migrate-job``) carries no resource-manager action: the contract's
move names one node. On Slurm it is applied by requeueing the job held, steering it
(``ReqNodeList`` and ``Switches=N``) and releasing it
(:func:`toposcope.slurm.fabric_steer.requeue_steps`), only for a job that opted in
(``--comment=toposcope:migratable``), which the backend checks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from toposcope.advisor.fabric_jobs import job_parts
from toposcope.advisor.fabric_wait import level_factor
from toposcope.advisor.gang_share import GangShare, gang_share
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.policies.fabric_advice import leaves_spanned
from toposcope.advisor.recommendations import make_recommendation
from toposcope.fabric.cellfit import Choice, choose, lowest_level_possible, span_level
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.report.recommendation import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)


@dataclass(frozen=True)
class MoveRule:
    """What prices a move: the per-level slowdown prior and one restart's cost, in seconds."""

    per_level: float
    restart_seconds: float
    #: the time left assumed for a job whose time left is unknown (0: such a job is not priced)
    unknown_left_s: float = 0.0


@dataclass(frozen=True)
class RunningJob:
    """A running multi-node job as the metrics show it: GPUs held and time left per node."""

    name: str
    gpus: Mapping[str, tuple[int, ...]]
    time_left: float | None
    #: each part as ``node/workload`` (one name on every node for a Slurm job)
    parts: tuple[str, ...] = ()


def running_jobs(model: ClusterModel, tree: CellTree) -> Iterator[RunningJob]:
    """The jobs holding GPUs on more than one node of the fabric: one workload name on
    several nodes (Slurm), or the parts the fabric exporter names as one job
    (:func:`~toposcope.advisor.fabric_jobs.job_parts`: a JobSet's pods, the simulator's gangs).
    """
    held = ((w.node, w.name, len(w.gpus)) for w in model.workloads if w.gpus)
    part_of = job_parts(model.fabric_jobs, held)
    by_name: dict[str, list[WorkloadModel]] = {}
    for workload in model.workloads:
        if workload.gpus and workload.node in tree.path:
            job = part_of.get(f"{workload.node}/{workload.name}", workload.name)
            by_name.setdefault(job, []).append(workload)
    for name, parts in sorted(by_name.items()):
        nodes = {p.node for p in parts}
        if len(nodes) < 2:
            continue
        lefts = [p.time_left_seconds for p in parts if p.time_left_seconds is not None]
        held_on: dict[str, set[int]] = {}
        for part in parts:
            held_on.setdefault(part.node, set()).update(part.gpus)
        yield RunningJob(
            name,
            {node: tuple(sorted(g)) for node, g in sorted(held_on.items())},
            min(lefts) if lefts else None,
            tuple(sorted(f"{p.node}/{p.name}" for p in parts)),
        )


def spread_moves(
    policy: str,
    tree: CellTree,
    free: dict[str, NodeFree],
    model: ClusterModel,
    rule: MoveRule,
) -> tuple[list[Recommendation], list[Note]]:
    """A ``migrate-job`` recommendation for each running multi-node job worth moving, and a
    note for each that could move but cannot be priced; ``free`` loses the GPUs moved onto.
    """
    recs: list[Recommendation] = []
    notes: list[Note] = []
    for found in running_jobs(model, tree):
        job = found
        if found.time_left is None and rule.unknown_left_s > 0:
            job = replace(found, time_left=rule.unknown_left_s)
        nodes = tuple(job.gpus)
        share = max(len(g) for g in job.gpus.values())
        now = span_level(tree, nodes)
        if now is None or now <= 1:
            continue
        own = _with_own(free, job)
        choice = choose(tree, own, len(nodes), share)
        if choice is None or choice.level >= now:
            continue
        tightest = lowest_level_possible(tree, own, len(nodes), share) or choice.level
        if job.time_left is None:
            notes.append(
                Note(
                    policy,
                    job.name,
                    f"spread over the {tree.levels[now]} but its time left is unknown, so a "
                    f"move to {choice.level_name} {choice.cell} cannot be priced",
                )
            )
            continue
        priced = gang_share(model, job.gpus, float(now - tightest), rule.per_level)
        f_now = level_factor(now - tightest, priced.per_level)
        f_new = level_factor(choice.level - tightest, priced.per_level)
        saved = job.time_left * (1.0 - f_new / f_now)
        if saved <= rule.restart_seconds:
            continue
        recs.append(
            _recommend(policy, tree, job, now, choice, (saved, f_now / f_new, priced), rule)
        )
        for node in choice.nodes:
            state = own[node]
            free[node] = NodeFree(node, state.total, max(0, state.free - share), None)
    return recs, notes


def _with_own(free: Mapping[str, NodeFree], job: RunningJob) -> dict[str, NodeFree]:
    """``free`` with the job's own GPUs counted free (where it runs now is a candidate too)."""
    own = dict(free)
    for node, gpus in job.gpus.items():
        state = own.get(node)
        if state is None:
            continue
        indices = None
        if state.free_indices is not None:
            indices = tuple(sorted(set(state.free_indices) | set(gpus)))
        held = min(state.total, state.free + len(gpus))
        own[node] = NodeFree(node, state.total, held, indices)
    return own


def _recommend(
    policy: str,
    tree: CellTree,
    job: RunningJob,
    now: int,
    choice: Choice,
    price: tuple[float, float, GangShare],
    rule: MoveRule,
) -> Recommendation:
    saved, ratio, priced = price
    left = job.time_left or 0.0
    gain = (saved - rule.restart_seconds) / left if left > 0 else 0.0
    current = list(job.gpus)
    evidence = [
        Evidence(
            "toposcope_job_fabric_top_level",
            {"workload": job.name, "level": tree.levels[now]},
            float(now - 1),
        ),
        *(
            Evidence(
                "toposcope_fabric_node_info",
                {"node": node, "leaf": _leaf(tree, node), "role": "now"},
                1.0,
            )
            for node in current
        ),
    ]
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy=policy,
        target=Target(choice.cell, job.name),
        summary=(
            f"move {job.name} from {len(current)} nodes across the {tree.levels[now]} onto "
            f"{choice.level_name} {choice.cell} ({','.join(choice.nodes)}): saves about "
            f"{saved:.0f} s of its {left:.0f} s left for one restart"
        ),
        current={
            "nodes": current,
            "level": tree.levels[now],
            "time_left_s": left,
            "communication_share": priced.as_json(),
        },
        proposed={
            "level": choice.level_name,
            "cell": choice.cell,
            "nodes": list(choice.nodes),
            "gpus_per_node": choice.gpus_per_node,
            "switches": leaves_spanned(tree, choice.nodes),
            "requeue": True,
            "saved_s": round(saved, 1),
            "restart_s": rule.restart_seconds,
            "cells_kept_whole": list(choice.kept_whole),
            "cells_kept_whole_count": choice.kept_whole_count,
        },
        evidence=evidence,
        estimated_gain=gain,
        gain_model=(
            f"step time {ratio:.3f}x faster on the {choice.level_name} than across the "
            f"{tree.levels[now]} ({priced.describe()}) over the "
            f"{left:.0f} s left, less one restart of {rule.restart_seconds:.0f} s"
        ),
        confidence=0.4,
        risk=Risk.HIGH,
        claims=[
            *(f"workload:{part}" for part in job.parts or (f"{n}/{job.name}" for n in current)),
            *(f"node:{node}" for node in choice.nodes),
        ],
    )


def _leaf(tree: CellTree, node: str) -> str:
    at = tree.cell_of(node, 1)
    return tree.cells[at].name if at is not None else ""
