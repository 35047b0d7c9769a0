"""Making room for a GPU workload's pin: work without GPUs moves off its GPUs' NUMA node.

A workload holding GPUs has one pin target, the NUMA node of its GPUs. When that node's CPUs
are taken by workloads without GPUs, which could run on any node, the pin is blocked although
the machine has room elsewhere: on machines with small NUMA nodes (a socket of 8 cores, say)
one CPU job is enough. The workloads without GPUs that run (almost) only there then move to
their best other node, the busiest first, until the GPU workload's cores fit; the plan is
checked against capacity like any other (:func:`~toposcope.advisor.policies.pin_capacity.
assign_targets`), and each move goes in the GPU workload's recommendation, before its pin.
A mover gains nothing itself (its threads and pages move together, staying local): the gain
is the GPU workload's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from toposcope.advisor.capacity_ledger import RATE_SLACK
from toposcope.advisor.model import NodeModel, WorkloadModel
from toposcope.advisor.policies.pin_capacity import PinCandidate, PinPlan, rank_cpu_targets
from toposcope.cpulist import format_cpulist
from toposcope.rm import ActionKind, ActionRequest

#: the least share of a workload's CPU time on the blocked node for it to move off it
CONFINED_SHARE = 0.9


def room_makers(
    node: NodeModel,
    workloads: list[WorkloadModel],
    candidates: list[PinCandidate],
    stuck: Mapping[str, list[str]],
    max_cpu_load: float,
    crowd: Mapping[int, float],
) -> list[PinCandidate]:
    """Candidates that move workloads without GPUs off the NUMA node of each GPU workload
    left out (``stuck``) for want of CPUs there, each naming the workload it makes room for
    (``makes_room_for``); empty when nothing confined there could go elsewhere.
    """
    moving = {c.workload.key for c in candidates}
    taken: set[str] = set()
    found: list[PinCandidate] = []
    for blocked in candidates:
        key = blocked.workload.key
        if key not in stuck or not blocked.workload.gpus or blocked.crowded is not None:
            continue
        target = blocked.targets[0]
        numa = node.numa(target)
        if numa is None or blocked.cores is None:
            continue
        over = busy_cores(workloads, moving, target) + blocked.cores
        over -= numa.cpu_count * max_cpu_load * (1.0 + RATE_SLACK)
        for mover in _confined(workloads, moving | taken, target):
            if over <= 0:
                break
            cpu, memory = mover.cpu_shares(), mover.memory_shares()
            targets = [
                n for n in rank_cpu_targets(node, mover, (cpu, memory), crowd) if n != target
            ]
            cores = mover.cores_used() or 0.0
            if not targets:
                continue
            taken.add(mover.key)
            over -= cores * cpu.get(target, 0.0)
            found.append(
                PinCandidate(
                    0.0,
                    mover,
                    targets,
                    cores,
                    f"makes room on NUMA node {target} for {blocked.workload.name}, whose "
                    f"GPUs hang off it: {cores:.1f} busy cores move to NUMA node {targets[0]} "
                    "with their pages (no gain of their own)",
                    makes_room_for=key,
                )
            )
    return found


def busy_cores(workloads: Iterable[WorkloadModel], moving: Collection[str], numa_id: int) -> float:
    """Cores busy on ``numa_id`` from the workloads the plan does not move."""
    return sum(
        (w.cores_used() or 0.0) * w.cpu_shares().get(numa_id, 0.0)
        for w in workloads
        if w.key not in moving
    )


def _confined(workloads: list[WorkloadModel], skip: set[str], numa_id: int) -> list[WorkloadModel]:
    """Workloads without GPUs running (almost) only on ``numa_id``, the busiest first."""
    found = [
        w
        for w in workloads
        if w.key not in skip
        and not w.gpus
        and (w.cores_used() or 0.0) > 0
        and w.cpu_shares().get(numa_id, 0.0) >= CONFINED_SHARE
    ]
    return sorted(found, key=lambda w: (-(w.cores_used() or 0.0), w.key))


def joined(chosen: list[PinPlan]) -> tuple[list[PinPlan], dict[str, list[PinPlan]]]:
    """The plans to recommend and, per GPU workload key, the moves that make room for it;
    a move whose GPU workload was not planned after all is dropped.
    """
    planned = {p.candidate.workload.key for p in chosen if p.candidate.makes_room_for is None}
    moves: dict[str, list[PinPlan]] = {}
    own: list[PinPlan] = []
    for plan in chosen:
        beneficiary = plan.candidate.makes_room_for
        if beneficiary is None:
            own.append(plan)
        elif beneficiary in planned:
            moves.setdefault(beneficiary, []).append(plan)
    return own, moves


def pin_actions(
    node: NodeModel, plan: PinPlan, moved_bytes: float, migrate_memory: bool
) -> list[ActionRequest]:
    """The pin of ``plan``'s workload, then its pages' migration when any move."""
    workload = plan.candidate.workload
    numa = node.numa(plan.target)
    cpus = list(numa.cpus) if numa else []
    mems = list(plan.mems)
    actions = [ActionRequest("", ActionKind.PIN, workload.name, workload.node, cpus, mems)]
    if migrate_memory and moved_bytes > 0:
        moved_to = [plan.target] if plan.unbound else mems
        actions.append(
            ActionRequest(
                "", ActionKind.MIGRATE_MEMORY, workload.name, workload.node, mems=moved_to
            )
        )
    return actions


def moved_bytes_of(plan: PinPlan) -> float:
    """The bytes a pin moves: those that fit the target when its memory is left unbound,
    else all of the workload's pages off the target.
    """
    if plan.unbound:
        return plan.moved_bytes
    workload = plan.candidate.workload
    return sum(v for n, v in workload.memory_by_numa.items() if n != plan.target)


def moved_summary(node: NodeModel, move: PinPlan) -> dict[str, object]:
    """What a move that makes room proposes, for the report."""
    numa = node.numa(move.target)
    return {
        "workload": move.candidate.workload.name,
        "numa_node": move.target,
        "cpus": format_cpulist(list(numa.cpus) if numa else []),
        "mems": list(move.mems),
    }
