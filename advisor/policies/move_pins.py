"""Pinning a moved job next to its new GPUs, making room there when CPU work blocks it.

A job that job-migration moves restarts on its new GPUs; pinned to their NUMA node it keeps
its threads and pages next to them, unpinned it spreads over the whole machine. The pin is
made when the node's CPUs have room for the job's busy cores (:func:`gpu_numa_pin`): the
cores of what stays there, of the earlier moves of the same recommendation pinned there, and
the job's. What the same recommendation moves away (the jobs a defragmentation moves out of
the way, the job itself) no longer counts there.

When the node is full of work without GPUs, confined there though it could run on any node,
that work moves first, in the same recommendation, the way numa-pinning makes room for a
GPU workload's pin (:func:`~toposcope.advisor.policies.pin_room.room_makers`, checked
against the machine's capacity by :func:`~toposcope.advisor.policies.pin_capacity.
assign_targets` with numa-pinning's default limits): otherwise a job that was pinned next to
one of its GPUs would restart unpinned, and lose more locality than the better link gains.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from toposcope.advisor.capacity_ledger import RATE_SLACK
from toposcope.advisor.locality import unpinned_shares
from toposcope.advisor.model import ClusterModel, NodeModel, NumaNodeState, WorkloadModel
from toposcope.advisor.policies.numa_pinning import NumaPinningSettings
from toposcope.advisor.policies.pin_capacity import (
    PinCandidate,
    PinPlan,
    assign_targets,
    crowding,
)
from toposcope.advisor.policies.pin_room import (
    busy_cores,
    moved_bytes_of,
    moved_summary,
    pin_actions,
    room_makers,
)
from toposcope.rm import ActionRequest


@dataclass(frozen=True)
class MovePin:
    """Where a moved job is pinned (``cpus`` and ``mems``, empty: unpinned) and the pins of
    the CPU work that moves off its new GPUs' NUMA node first to make room (``room``, on
    ``node``).
    """

    cpus: list[int]
    mems: list[int]
    room: tuple[PinPlan, ...] = ()
    node: NodeModel | None = None

    def actions(self) -> list[ActionRequest]:
        """The pins (and page migrations) that make room, to run before the job's move."""
        if self.node is None:
            return []
        migrate = NumaPinningSettings().migrate_memory
        node = self.node
        return [a for p in self.room for a in pin_actions(node, p, moved_bytes_of(p), migrate)]

    def claims(self) -> list[str]:
        """The workloads moved to make room."""
        return [f"workload:{p.candidate.workload.key}" for p in self.room]

    def summary(self) -> list[dict[str, object]]:
        """What the moves that make room propose, for the report."""
        if self.node is None:
            return []
        return [moved_summary(self.node, p) for p in self.room]

    def text(self) -> str:
        """The moves that make room, in words (empty when none)."""
        return "".join(f"; {p.candidate.gain_model}" for p in self.room)


def unpinned_loss(
    model: ClusterModel, job: WorkloadModel, node_name: str, gpus: tuple[int, ...]
) -> tuple[float, str]:
    """The step-time factor (at least 1) ``job`` pays for restarting unpinned on ``gpus`` of
    ``node_name``, and why: numa-pinning's price of its placement now against its GPUs' NUMA
    node (:meth:`~toposcope.advisor.policies.pin_capacity.PinLimits.cost`, numa-pinning's
    default settings) and of threads and pages spread over the new node
    (:func:`~toposcope.advisor.locality.unpinned_shares`) against the new GPUs' node. 1 when
    it is no more local now than it would be.
    """
    here, there = model.nodes.get(job.node), model.nodes.get(node_name)
    if here is None or there is None:
        return 1.0, ""
    home_now, home_new = gpu_home(here, job.gpus), gpu_home(there, gpus)
    shares = (job.cpu_shares(), job.memory_shares())
    if home_now is None or home_new is None or not (shares[0] or shares[1]):
        return 1.0, ""
    limits = NumaPinningSettings().limits()
    now = limits.cost(here, True, shares, home_now.id)
    after = limits.cost(there, True, unpinned_shares(there), home_new.id)
    if after <= now:
        return 1.0, ""
    factor = (1.0 + after) / (1.0 + now)
    return factor, (
        f"no room to pin it next to its new GPUs: it restarts unpinned, NUMA cost {now:.3f} "
        f"-> {after:.3f} (numa-pinning's remote share x penalty x gpu_job_share, threads and "
        f"pages spread over the node), step time x {factor:.3f}"
    )


def gpu_home(node: NodeModel, gpus: tuple[int, ...]) -> NumaNodeState | None:
    """The NUMA node holding most of ``gpus`` (the lowest on a tie), when it has CPUs."""
    counts: dict[int, int] = {}
    for index in gpus:
        g = node.gpu(index)
        if g is not None and g.numa_node is not None:
            counts[g.numa_node] = counts.get(g.numa_node, 0) + 1
    home = min(counts, key=lambda n: (-counts[n], n)) if counts else None
    numa = node.numa(home) if home is not None else None
    return numa if numa is not None and numa.cpus else None


def _busy(
    model: ClusterModel, node_name: str, numa_id: int, away: Collection[WorkloadModel]
) -> float:
    """Cores the workloads of ``node_name`` keep busy on ``numa_id``, less those of the
    workloads in ``away`` (moved elsewhere by the same recommendation; each counted once).
    """
    used = model.numa_capacity(node_name)[numa_id].cores_used
    gone = {w.key: w for w in away if w.node == node_name}
    return used - busy_cores(gone.values(), (), numa_id)


def gpu_numa_pin(
    model: ClusterModel,
    node_name: str,
    gpus: tuple[int, ...],
    enabled: bool,
    job: WorkloadModel | None = None,
    reserved: dict[int, float] | None = None,
    away: Collection[WorkloadModel] = (),
) -> tuple[list[int], list[int]]:
    """CPUs and memory nodes for a job on ``gpus`` of ``node_name``: the NUMA node holding
    most of them, when its CPUs have room for the job's busy cores (empty when not
    ``enabled``, without locality, or without room).

    The capacity check is numa-pinning's: the cores the node's workloads keep busy there
    (the job's own and those of the workloads in ``away``, which the same recommendation
    moves elsewhere, not counted), those ``reserved`` by earlier moves of the same
    recommendation, and the job's must fit its CPUs. A pin that does not fit is left out;
    ``reserved`` is updated with the cores of a pin made.
    """
    if not enabled:
        return [], []
    numa = gpu_home(model.nodes[node_name], gpus)
    if numa is None:
        return [], []
    cores = job.cores_used() if job is not None else None
    if cores is not None and job is not None:
        used = _busy(model, node_name, numa.id, [job, *away])
        held = (reserved or {}).get(numa.id, 0.0)
        if used + held + cores > numa.cpu_count * (1.0 + RATE_SLACK):
            return [], []
        if reserved is not None:
            reserved[numa.id] = held + cores
    return list(numa.cpus), [numa.id]


def pin_or_make_room(
    model: ClusterModel,
    node_name: str,
    gpus: tuple[int, ...],
    enabled: bool,
    job: WorkloadModel | None,
    reserved: dict[int, float],
    away: Collection[WorkloadModel] = (),
) -> MovePin:
    """:func:`gpu_numa_pin`, and when the job does not fit its new GPUs' NUMA node, the
    same pin after the work without GPUs confined there moves to other nodes (module
    docstring); unpinned when even that leaves no room. ``reserved`` is updated with the
    cores of the pins made, the job's and the movers' on their new nodes; a caller pinning
    more moves of the same recommendation passes the movers in ``away`` from then on.
    """
    cpus, mems = gpu_numa_pin(model, node_name, gpus, enabled, job, reserved, away)
    if cpus or not enabled or job is None or job.cores_used() is None:
        return MovePin(cpus, mems)
    node = model.nodes[node_name]
    numa = gpu_home(node, gpus)
    if numa is None:
        return MovePin([], [])
    cores = job.cores_used() or 0.0
    held = reserved.get(numa.id, 0.0)
    room = _make_room(model, node, numa, job, cores + held, away)
    if room is None:
        return MovePin([], [])
    reserved[numa.id] = held + cores
    for plan in room:
        reserved[plan.target] = reserved.get(plan.target, 0.0) + (plan.candidate.cores or 0.0)
    return MovePin(list(numa.cpus), [numa.id], tuple(room), node)


def _make_room(
    model: ClusterModel,
    node: NodeModel,
    numa: NumaNodeState,
    job: WorkloadModel,
    needed: float,
    away: Collection[WorkloadModel],
) -> list[PinPlan] | None:
    """Pins that move work without GPUs off ``numa`` so that ``needed`` cores fit there,
    each to a node with room after the move (``None``: no such set of pins).
    """
    skip = {job.key, *(w.key for w in away)}
    workloads = [w for w in model.workloads_on(node.name) if w.key not in skip]
    settings = NumaPinningSettings()
    blocked = PinCandidate(0.0, job, [numa.id], needed, "")
    movers = room_makers(
        node,
        workloads,
        [blocked],
        {job.key: [f"NUMA node {numa.id}: no room"]},
        settings.max_cpu_load,
        crowding(workloads),
    )
    if not movers:
        return None
    # on its own node the job is planned with them: the pages it takes off the node it
    # leaves make room there for theirs
    own = [blocked] if job.node == node.name else []
    chosen, stuck = assign_targets(node, workloads, [*own, *movers], settings.limits())
    if stuck:
        return None
    left = busy_cores(workloads, {m.workload.key for m in movers}, numa.id)
    limit = numa.cpu_count * settings.max_cpu_load * (1.0 + RATE_SLACK)
    if left + needed > limit:
        return None
    return [p for p in chosen if p.candidate.makes_room_for is not None]
