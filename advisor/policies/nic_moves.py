"""nic-affinity's moves: a multi-node job whose parts sit on NIC-far GPUs, moved onto the
NIC-near GPUs of the same nodes.

No NCCL setting helps a rank whose GPU has no RDMA NIC nearer than the host bridge or the
socket link: only other GPUs do. A running multi-node job (one workload name on several
nodes, or the parts the fabric exporter joins: :func:`~toposcope.advisor.fabric_jobs.job_parts`)
runs at the pace of its slowest rank, so it gains only when every far part moves. A part is
*far* when the nearest usable NIC of one of its GPUs is at a worse tier than the best tier of
any GPU of its node; its *near* GPUs are those whose nearest usable NIC is at that best tier.

* When every far part's node has enough near GPUs free (its own count as free), the job is
  moved whole (kind ``migrate-job``, no action: the simulator's ``gang-moves`` route carries
  it out with ``proposed["places"]``, one restart of every rank), each moved part pinned to
  the NUMA node of its new GPUs where their CPUs have room.
* When near GPUs are held by single-node jobs that use no RDMA NIC (no
  ``toposcope_workload_nic_used_info``) and are not about to end, those jobs are moved first
  (one ``migrate-job`` per job, a plain ``migrate`` with GPU indices, CPUs and memory nodes)
  onto free GPUs elsewhere that no NIC-near rank needs, whose dearest link is no worse than
  the one they have, on GPUs of the same model; the job itself moves in a later round, once
  the metrics show its near GPUs free (two rounds, not an apply order to rely on). A job
  whose blockers have nowhere to go gets a note.

Gain model (nic-affinity's): a rank's inter-node transfers get a share ``f(t)`` of the line
rate at tier ``t`` (1 up to a PCIe switch, ``host_bridge_share``, ``cross_socket_share``); a
job's share is its slowest rank's, so its step shrinks by ``network_share x (1 - f_now /
f_after)``. Over its time left (``toposcope_queue_job_time_left_seconds``, else
``unknown_time_left_s``; a job with neither gets a note) that saves ``left x`` the shrink; the
move pays when the GPU-seconds saved beat one restart of every rank plus one of each job moved
out of the way (``restart_seconds`` each, weighted by their GPUs). A job with less than
``min_time_left_s`` left is never moved, nor is a job in its way (it ends soon enough).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from toposcope.advisor.fabric_jobs import job_parts
from toposcope.advisor.gpu_sets import Placement, rank_sets
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.nic_state import NicState, NodeNics, tier_rank
from toposcope.advisor.policies.migration_recommendations import gpu_numa_pin
from toposcope.advisor.policies.nic_move_recs import (
    Clearing,
    GangPlan,
    NicMoveRule,
    PartMove,
    clearing_recommendation,
    gang_recommendation,
)
from toposcope.report.recommendation import Note, Recommendation


@dataclass
class _Round:
    """What this run's earlier decisions took: GPUs claimed (``node`` -> indexes)."""

    taken: dict[str, set[int]] = field(default_factory=dict)
    reserved: dict[str, dict[int, float]] = field(default_factory=dict)

    def take(self, node: str, gpus: Iterable[int]) -> None:
        """Count ``gpus`` of ``node`` as claimed."""
        self.taken.setdefault(node, set()).update(gpus)

    def free(self, model: ClusterModel, node: str) -> set[int]:
        """The GPUs of ``node`` free in the metrics and not claimed this run."""
        return set(model.free_gpus(node)) - self.taken.get(node, set())

    def copy(self) -> _Round:
        """A copy to plan one job on, adopted only when the job gets recommendations."""
        return _Round(
            {n: set(g) for n, g in self.taken.items()},
            {n: dict(r) for n, r in self.reserved.items()},
        )


def multi_node_jobs(model: ClusterModel) -> dict[str, list[WorkloadModel]]:
    """Job name -> its parts, for every job holding GPUs on more than one node."""
    held = ((w.node, w.name, len(w.gpus)) for w in model.workloads if w.gpus)
    part_of = job_parts(model.fabric_jobs, held)
    by_job: dict[str, list[WorkloadModel]] = {}
    for workload in model.workloads:
        if workload.gpus:
            by_job.setdefault(part_of.get(workload.key, workload.name), []).append(workload)
    return {
        name: sorted(parts, key=lambda p: p.node)
        for name, parts in sorted(by_job.items())
        if len({p.node for p in parts}) >= 2
    }


def _tier(nics: NodeNics, gpus: Iterable[int]) -> str:
    """The worst of the nearest tiers of ``gpus`` (``""`` when one is unknown)."""
    tiers = [nics.nearest(g)[0] for g in gpus]
    if not tiers or "" in tiers:
        return ""
    return max(tiers, key=tier_rank)


def near_gpus(model: ClusterModel, nics: NodeNics, node: str) -> tuple[str, frozenset[int]]:
    """The best nearest tier of ``node``'s GPUs and the GPUs at it (``""``: none known)."""
    node_model = model.nodes.get(node)
    tiers = {g.index: nics.nearest(g.index)[0] for g in (node_model.gpus if node_model else ())}
    known = {g: t for g, t in tiers.items() if t}
    if not known:
        return "", frozenset()
    best = min(known.values(), key=tier_rank)
    return best, frozenset(g for g, t in known.items() if t == best)


def nic_moves(
    policy: str, model: ClusterModel, state: NicState, rule: NicMoveRule
) -> tuple[list[Recommendation], list[Note]]:
    """The moves of NIC-far multi-node jobs worth making this round, and notes for those that
    cannot be made or priced (see the module docstring).
    """
    recs: list[Recommendation] = []
    notes: list[Note] = []
    done = _Round()
    jobs = multi_node_jobs(model)
    in_jobs = {p.key for parts in jobs.values() for p in parts}
    for name, parts in jobs.items():
        trial = done.copy()
        found = _job(policy, model, state, rule, trial, name, parts, in_jobs)
        if isinstance(found, str):
            if found:
                notes.append(Note(policy, name, found))
            continue
        done = trial
        recs += found
    return recs, notes


def _job(
    policy: str,
    model: ClusterModel,
    state: NicState,
    rule: NicMoveRule,
    done: _Round,
    name: str,
    parts: list[WorkloadModel],
    in_jobs: set[str],
) -> list[Recommendation] | str:
    """The recommendations for one job, or a note (``""``: nothing to say)."""
    nodes = {p.node: state.node(p.node) for p in parts}
    if any(n is None for n in nodes.values()):
        return ""
    now = {p.key: _tier(nodes[p.node] or NodeNics(), p.gpus) for p in parts}
    if "" in now.values():
        return ""
    best = {p.node: near_gpus(model, nodes[p.node] or NodeNics(), p.node) for p in parts}
    far = [p for p in parts if tier_rank(now[p.key]) > tier_rank(best[p.node][0])]
    if not far:
        return ""
    tier_now = max(now.values(), key=tier_rank)
    kept = [now[p.key] for p in parts if p not in far]
    tier_after = max([*kept, *(best[p.node][0] for p in far)], key=tier_rank)
    ratio = rule.share(tier_now) / rule.share(tier_after)
    if ratio >= 1.0:
        return ""
    left = _left(parts, rule)
    if left is None:
        return (
            f"its ranks on {far[0].node} are {tier_now} from their NIC, but its time left is "
            "unknown, so a move onto near GPUs cannot be priced"
        )
    if left < rule.min_left_s:
        return f"{left:.0f} s left, under min_time_left_s {rule.min_left_s:g}: not moved"
    moves: list[PartMove] = []
    clearings: list[Clearing] = []
    for part in far:
        near = best[part.node][1]
        if len(near) < len(part.gpus):
            return (
                f"its part on {part.node} holds {len(part.gpus)} GPUs, more than the "
                f"{len(near)} near a NIC there: no GPUs of that node are nearer"
            )
        free = (done.free(model, part.node) | set(part.gpus)) & near
        if len(free) >= len(part.gpus):
            move = _part_move(model, done, part, free)
            if move is None:
                return f"the free GPUs near a NIC on {part.node} are worse linked than its own"
            moves.append(move)
            continue
        clearing = _clear(model, state, rule, done, part, near, free, in_jobs)
        if isinstance(clearing, str):
            return clearing
        clearings.append(clearing)
    plan = GangPlan(name, parts, tuple(moves), tier_now, tier_after, ratio, left, rule)
    if plan.net_gpu_seconds(clearings) <= 0:
        return (
            f"NIC-near GPUs would save about {plan.saved:.0f} s of its {left:.0f} s left: "
            "not worth the restarts"
        )
    if clearings:
        for clearing in clearings:
            for move in clearing.moves:
                done.take(move.node, move.gpus)
        return [
            clearing_recommendation(policy, plan, c, move, clearings)
            for c in clearings
            for move in c.moves
        ]
    for move in moves:
        done.take(move.node, move.gpus)
    return [gang_recommendation(policy, plan)]


def _left(parts: list[WorkloadModel], rule: NicMoveRule) -> float | None:
    """The job's time left: its parts' least, else the assumed one (``None``: unknown)."""
    lefts = [p.time_left_seconds for p in parts if p.time_left_seconds is not None]
    if lefts:
        return min(lefts)
    return rule.unknown_left_s if rule.unknown_left_s > 0 else None


def _part_move(
    model: ClusterModel, done: _Round, part: WorkloadModel, free: set[int]
) -> PartMove | None:
    """``part`` onto the best-linked of ``free`` (its own GPUs first on a tie), pinned to the
    NUMA node of its new GPUs where their CPUs have room; ``None`` when every set is linked
    worse than its own GPUs.
    """
    node = model.nodes[part.node]
    now = node.prices.worst(part.gpus).factor
    own = tuple(sorted(part.gpus))
    ranked = [p for p in rank_sets(node, free, len(part.gpus)) if p.price.factor <= now + 1e-9]
    if not ranked:
        return None
    best = min(ranked, key=lambda p: (p.score()[:2], p.gpus != own))
    cpus, mems = gpu_numa_pin(
        model, part.node, best.gpus, True, part, done.reserved.setdefault(part.node, {})
    )
    return PartMove(part, part.node, best.gpus, tuple(cpus), tuple(mems))


def _clear(
    model: ClusterModel,
    state: NicState,
    rule: NicMoveRule,
    done: _Round,
    part: WorkloadModel,
    near: frozenset[int],
    free: set[int],
    in_jobs: set[str],
) -> Clearing | str:
    """The single-node jobs to move off ``part``'s near GPUs, each with its destination, or
    a note saying why they cannot be moved.
    """
    need = len(part.gpus) - len(free)
    holders = [
        w
        for w in model.workloads_on(part.node)
        if w.key not in in_jobs and set(w.gpus) & near and w.key != part.key
    ]
    movable = [w for w in holders if _movable(state, rule, w)]
    movable.sort(key=lambda w: (-len(set(w.gpus) & near), len(w.gpus), w.name))
    chosen: list[WorkloadModel] = []
    gained = 0
    for workload in movable:
        if gained >= need:
            break
        chosen.append(workload)
        gained += len(set(workload.gpus) & near)
    if gained < need:
        return (
            f"the GPUs near a NIC on {part.node} are held by jobs that use a NIC, share "
            "their GPUs or end soon: not moved"
        )
    moves: list[PartMove] = []
    claimed = done.copy()
    for workload in chosen:
        dest = _destination(model, state, claimed, workload, part.node)
        if dest is None:
            return (
                f"{workload.name} holds GPUs near a NIC on {part.node} but no free GPUs as "
                "well linked and NIC-far elsewhere can take it now"
            )
        claimed.take(dest.node, dest.gpus)
        cpus, mems = gpu_numa_pin(
            model, dest.node, dest.gpus, True, workload, done.reserved.setdefault(dest.node, {})
        )
        moves.append(PartMove(workload, dest.node, dest.gpus, tuple(cpus), tuple(mems)))
    return Clearing(part, tuple(moves))


def _movable(state: NicState, rule: NicMoveRule, workload: WorkloadModel) -> bool:
    """A single-node job that may make room: no RDMA NIC in use, GPUs its own, not ending."""
    if state.uses(workload.key) or workload.gpus_shared:
        return False
    left = workload.time_left_seconds
    return left is None or left >= rule.min_left_s


def _destination(
    model: ClusterModel,
    state: NicState,
    done: _Round,
    workload: WorkloadModel,
    avoid: str,
) -> Placement | None:
    """The best free GPU set for ``workload`` that takes no NIC-near GPU of a node with NIC
    tiers, links no worse than it has now, on GPUs of its model; ``None`` when none is.
    """
    node = model.nodes[workload.node]
    now = node.prices.worst(workload.gpus).factor
    models = {g.model for g in node.gpus if g.index in workload.gpus}
    found: list[Placement] = []
    for name in sorted(model.nodes):
        other = model.nodes[name]
        nics = state.node(name)
        near = near_gpus(model, nics, name)[1] if nics is not None else frozenset()
        free = done.free(model, name) - near
        if name == avoid:
            free -= set(workload.gpus)
        same = {g.index for g in other.gpus if g.model in models}
        for placement in rank_sets(other, free & same, len(workload.gpus))[:1]:
            if placement.price.factor <= now + 1e-9:
                found.append(placement)
    return min(found, key=lambda p: (p.score(), p.node)) if found else None
