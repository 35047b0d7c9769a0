"""Capacity planning for numa-pinning: which candidate goes to which NUMA node of a node.

Candidates (workloads the policy would pin, each with its targets best first) are assigned
in order of gain, each to its first target with room: the cores it brings must fit under
``max_cpu_load`` of the target's online CPUs with what already runs there and what earlier
assignments brought (within :data:`RATE_SLACK`: a rate over a window is an estimate), and
the memory it moves must fit in the target's room: its free memory over ``memory_headroom``
plus what the plan's other workloads take off it (pages replacing pages that leave make the
node no fuller), or, failing that, in the target and its nearest NUMA nodes of the same
socket (the gain is then priced again for the part left on them). Only when no target can
hold it that way is the memory left unbound (:func:`_memory_plan` with ``unbound``): the
threads go to the target, the pages that fit move there and the rest stay where they are,
across the socket if need be, the gain priced for what stays remote; such a plan must bring
its threads nearer their pages (:data:`LOCALITY_STEP`). Capacity is that of the node
after the plan: a candidate's cores and memory count where the plan puts it, not where it is
now, so two spread workloads can swap halves. A candidate that fits nowhere stays where it
is, its cores counted there, and the plan is made again (:func:`assign_targets`). The
targets of a workload without GPUs come ranked by :func:`rank_cpu_targets`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from toposcope.advisor.capacity_ledger import RATE_SLACK
from toposcope.advisor.locality import GIB, locality_cost
from toposcope.advisor.model import NodeModel, NumaNodeState, WorkloadModel
from toposcope.advisor.numa_share import MatrixPricing

#: the least rise of the share of a workload's pages on its threads' node that a pin with its
#: memory left unbound must bring (the shares are estimates over a window)
LOCALITY_STEP = 0.05
#: CPU plus memory shares of two pin targets closer than this rank as a tie (a rate over a
#: window is an estimate)
SHARE_TIE = 0.05


@dataclass(frozen=True)
class PinCandidate:
    """A workload the policy would pin: gain, targets best first, cores it would bring
    (``None``: unknown), the gain's explanation, the NUMA node it leaves when the
    reason is CPU contention there (``crowded``), and the key of the GPU workload whose pin
    it makes room for (``makes_room_for``, :mod:`~toposcope.advisor.policies.pin_room`).
    """

    gain: float
    workload: WorkloadModel
    targets: list[int]
    cores: float | None
    gain_model: str
    crowded: int | None = None
    makes_room_for: str | None = None
    #: the NUMA penalty per unit of remote share it was priced with, where its own measured
    #: memory traffic set it (``None``: the limits' prior)
    penalty: float | None = None
    #: how the node's measured memory bandwidths priced it pair by pair
    #: (``--memory-bandwidth``; ``None``: not so priced)
    matrix: MatrixPricing | None = None


@dataclass(frozen=True)
class PinPlan:
    """A candidate assigned to a target: the memory binding, the gain for it, whether the
    capacity behind the decision was known, the bytes it holds on each NUMA node after the
    plan, the bytes its pages move, and whether its memory is left unbound (pages that do not
    fit stay where they are).
    """

    candidate: PinCandidate
    target: int
    mems: list[int]
    gain: float
    gain_model: str
    capacity_known: bool
    placed: dict[int, float]
    moved_bytes: float = 0.0
    unbound: bool = False


@dataclass(frozen=True)
class PinLimits:
    """What bounds a plan: the busy share of a target's CPUs allowed, the free memory
    needed per byte moved, and the gain model's terms (to price a plan whose memory spills
    over to nearby nodes).
    """

    max_cpu_load: float
    memory_headroom: float
    numa_penalty: float
    reference_distance: int
    gpu_job_share: float = 1.0

    def cost(
        self,
        node: NodeModel,
        gpus: bool,
        shares: tuple[Mapping[int, float], Mapping[int, float]],
        target: int,
        penalty: float | None = None,
        matrix: MatrixPricing | None = None,
    ) -> float:
        """What a placement (CPU and memory ``shares`` per NUMA node) costs a workload
        against ``target`` (:func:`~toposcope.advisor.locality.locality_cost`), the penalty
        scaled by ``gpu_job_share`` for a workload holding GPUs; ``penalty`` in its place
        where the workload's measured traffic gave one, and the placement's cost pair by pair
        where the node's measured memory bandwidths priced it (``matrix``).
        """
        if matrix is not None and (found := matrix.cost(node, *shares)) is not None:
            return found
        if penalty is None:
            penalty = self.numa_penalty * (self.gpu_job_share if gpus else 1.0)
        return locality_cost(node, shares, target, penalty, self.reference_distance)


def assign_targets(
    node: NodeModel,
    workloads: list[WorkloadModel],
    candidates: list[PinCandidate],
    limits: PinLimits,
) -> tuple[list[PinPlan], dict[str, list[str]]]:
    """Assign ``candidates`` (best gain first) of ``node``'s ``workloads`` to targets, so
    that the cores of every workload that stays plus those pinned there fit under
    ``max_cpu_load``: the plans made, and per workload key left out, why.

    A candidate that fits nowhere stays where it is (its cores and memory count where they
    are now) and the plan is made again.
    """
    moving = {c.workload.key for c in candidates}
    fixed: dict[int, float] = defaultdict(float)
    cores_known = True
    for w in workloads:
        if w.key in moving:
            continue
        cores = w.cores_used()
        if cores is None:
            cores_known = False
            continue
        for numa, share in w.cpu_shares().items():
            fixed[numa] += share * cores
    stuck: dict[str, list[str]] = {}
    while True:
        load = dict(fixed)
        for c in candidates:
            if c.workload.key in stuck and c.cores is not None:
                for numa, share in c.workload.cpu_shares().items():
                    load[numa] = load.get(numa, 0.0) + share * c.cores
        chosen, newly = _assign(node, candidates, stuck, load, cores_known, limits)
        if not newly:
            break
        stuck.update(newly)
    return chosen, stuck


def _assign(
    node: NodeModel,
    candidates: list[PinCandidate],
    stuck: Mapping[str, list[str]],
    load: Mapping[int, float],
    cores_known: bool,
    limits: PinLimits,
) -> tuple[list[PinPlan], dict[str, list[str]]]:
    """One planning pass, candidates in order of gain, each to the first target with
    room. Capacity is that of the node after the plan: the cores and memory of the
    candidates count where the plan puts them, not where they are now (two spread
    workloads can swap halves); the rest are returned with their refusals.
    """
    assigned: dict[int, float] = defaultdict(float)
    placed: dict[int, float] = defaultdict(float)
    vacated: dict[int, float] = defaultdict(float)
    for c in candidates:
        if c.workload.key not in stuck:
            for numa_id, size in c.workload.memory_by_numa.items():
                vacated[numa_id] += size
    chosen: list[PinPlan] = []
    refused: dict[str, list[str]] = {}
    for c in candidates:
        if c.workload.key in stuck:
            continue
        reasons: list[str] = []
        plan: PinPlan | None = None
        for target, unbound in [(t, u) for u in (False, True) for t in c.targets]:
            numa = node.numa(target)
            if numa is None:
                continue
            if c.cores is not None:
                busy = load.get(target, 0.0) + assigned[target] + c.cores
                limit = numa.cpu_count * limits.max_cpu_load
                if busy > limit * (1.0 + RATE_SLACK):
                    if not unbound:
                        reasons.append(
                            f"NUMA node {target}: {busy:.1f} busy cores would exceed {limit:.1f}"
                        )
                    continue
            found = _memory_plan(node, c, target, placed, vacated, limits, unbound)
            if isinstance(found, str):
                reasons.append(found)
                continue
            plan = replace(found, capacity_known=found.capacity_known and cores_known)
            break
        if plan is None:
            refused[c.workload.key] = reasons
            continue
        assigned[plan.target] += c.cores or 0.0
        for numa_id, size in plan.placed.items():
            placed[numa_id] += size
        chosen.append(plan)
    return chosen, refused


def _memory_plan(
    node: NodeModel,
    c: PinCandidate,
    target: int,
    placed: Mapping[int, float],
    vacated: Mapping[int, float],
    limits: PinLimits,
    unbound: bool = False,
) -> PinPlan | str:
    """Where the workload's memory goes when pinned to ``target``: the target when it
    has room (``memory_headroom`` per byte moved), else the target and its nearest
    nodes of the same socket until the memory fits (the gain then counts the part left
    on them); a refusal text when even that does not fit. With ``unbound``, every NUMA node
    is allowed: the pages that fit move to the target and the others stay where they are,
    on whichever node (what a memory-full machine leaves a pin; "no gain" when nothing
    would get better).
    """
    w = c.workload
    total = w.memory_bytes

    def room(numa_id: int) -> float | None:
        """The bytes the node can take: its free memory less the headroom, plus what the
        plan's workloads leave, less what the plan put there already.
        """
        numa = node.numa(numa_id)
        if numa is None or numa.memory_free_bytes is None:
            return None
        free = numa.memory_free_bytes / limits.memory_headroom
        return free + vacated.get(numa_id, 0.0) - placed.get(numa_id, 0.0)

    order = [
        target,
        *sorted(
            (n.id for n in node.numa_nodes if n.id != target and n.memory_total_bytes != 0),
            key=lambda n: (node.distance(target, n), n),
        ),
    ]
    if unbound:
        return _unbound_plan(node, c, target, order, room(target), limits)
    mems: list[int] = []
    here: dict[int, float] = {}
    to_move = total - w.memory_by_numa.get(target, 0.0)
    moved = 0.0
    known = True
    for numa_id in order:
        if numa_id != target and node.package_of(numa_id) != node.package_of(target):
            break  # never spill memory to another socket: that is what a pin undoes
        own = w.memory_by_numa.get(numa_id, 0.0)
        if numa_id != target:
            to_move -= own  # what already sits on a node of the binding stays
        free = room(numa_id)
        mems.append(numa_id)
        if free is None:
            known = False
            here[numa_id] = own + max(0.0, to_move)
            moved += max(0.0, to_move)
            to_move = 0.0
            break
        take = min(max(0.0, to_move), max(0.0, free - own))
        here[numa_id] = own + take
        moved += take
        to_move -= take
        if to_move <= 1.0:
            break
    if to_move > 1.0:
        need = total - w.memory_by_numa.get(target, 0.0)
        free = (room(target) or 0.0) - w.memory_by_numa.get(target, 0.0)
        return f"NUMA node {target}: {need / GIB:.2f} GiB to move, {free / GIB:.2f} GiB free"
    if mems == [target] or total <= 0:
        return PinPlan(c, target, [target], c.gain, c.gain_model, known, here, moved)
    where = f"the rest goes to the nearest nodes {mems[1:]}"
    return _priced(node, c, (target, mems), (here, moved, known), limits, where)


def _unbound_plan(
    node: NodeModel,
    c: PinCandidate,
    target: int,
    order: list[int],
    free: float | None,
    limits: PinLimits,
) -> PinPlan | str:
    """The plan of a pin whose memory is left unbound: as many pages as the target has
    room for (``memory_headroom`` per byte) move there, taken from the farthest nodes
    first; the rest stay put.
    """
    w = c.workload
    total = w.memory_bytes
    if free is None or total <= 0:
        return f"NUMA node {target}: free memory unknown"
    own = w.memory_by_numa.get(target, 0.0)
    take = min(total - own, max(0.0, free - own))
    here = {n: w.memory_by_numa.get(n, 0.0) for n in order}
    here[target] = own + take
    left = take
    for numa_id in reversed(order[1:]):
        taken = min(left, here[numa_id])
        here[numa_id] -= taken
        left -= taken
    here = {n: v for n, v in here.items() if v > 0 or n == target}
    cpu, memory = w.cpu_shares(), w.memory_shares()
    local_now = sum(share * memory.get(n, 0.0) for n, share in cpu.items())
    if here[target] / total <= local_now + LOCALITY_STEP:
        return (
            f"NUMA node {target}: room for {take / GIB:.2f} GiB of its memory would not bring "
            "its threads nearer their pages"
        )
    kept = [n for n in order[1:] if here.get(n, 0.0) > 0]
    where = f"memory left unbound, {(total - here[target]) / GIB:.2f} GiB stay on {kept}"
    plan = _priced(node, c, (target, order), (here, take, True), limits, where)
    if plan.gain <= 0:
        return f"NUMA node {target}: no gain with its memory unbound"
    return replace(plan, unbound=True)


def _priced(
    node: NodeModel,
    c: PinCandidate,
    binding: tuple[int, list[int]],
    pages: tuple[dict[int, float], float, bool],
    limits: PinLimits,
    where: str,
) -> PinPlan:
    """The plan with its gain priced again for the memory left off the target: the cost
    now less the cost with every thread on the target and the pages as planned.
    ``binding`` is the target and the memory nodes allowed; ``pages`` the bytes per node
    after the plan, the bytes moved, and whether the free memory behind it was known.
    """
    target, mems = binding
    here, moved, known = pages
    w = c.workload
    total = w.memory_bytes
    cpu, memory = w.cpu_shares(), w.memory_shares()
    after = {n: v / total for n, v in here.items()}
    before_cost = limits.cost(node, bool(w.gpus), (cpu, memory), target, c.penalty, c.matrix)
    after_cost = limits.cost(
        node, bool(w.gpus), ({target: 1.0}, after), target, c.penalty, c.matrix
    )
    text = (
        f"{c.gain_model}; NUMA node {target} holds only part of its memory, {where}: "
        f"estimated cost {before_cost:.4f} -> {after_cost:.4f}"
    )
    gain = max(0.0, before_cost - after_cost)
    return PinPlan(c, target, mems, gain, text, known, here, moved)


def crowding(workloads: Iterable[WorkloadModel]) -> dict[int, float]:
    """Per NUMA node, the threads the ``workloads`` run there (cores where threads are
    unknown): what :func:`rank_cpu_targets` weighs, summed once per machine.
    """
    crowd: dict[int, float] = defaultdict(float)
    for workload in workloads:
        for numa_id, count in _presence(workload).items():
            crowd[numa_id] += count
    return crowd


def _presence(workload: WorkloadModel) -> Mapping[int, float]:
    return workload.threads_by_numa or workload.cpu_by_numa


def rank_cpu_targets(
    node: NodeModel,
    workload: WorkloadModel,
    shares: tuple[Mapping[int, float], Mapping[int, float]],
    crowd: Mapping[int, float],
) -> list[int]:
    """The NUMA nodes with CPUs of ``node``, best pin target first for a workload without
    GPUs: the most of its CPU time plus memory (``shares``: its CPU and memory shares per
    NUMA node); on a tie (shares within :data:`SHARE_TIE`), the node whose CPUs the machine's
    other workloads crowd least (their threads per CPU, or cores where threads are unknown:
    ``crowd`` is :func:`crowding` of all the machine's workloads, this one's own taken out
    here), then the one already holding more of its memory (fewer pages to move). A workload
    whose threads sit on one node and whose memory on another is pinned where it will not
    share CPUs, not by NUMA number.
    """
    cpu, memory = shares
    own = _presence(workload)

    def rank(numa: NumaNodeState) -> tuple[int, float, float, int]:
        share = cpu.get(numa.id, 0.0) + memory.get(numa.id, 0.0)
        others = crowd.get(numa.id, 0.0) - own.get(numa.id, 0.0)
        return (
            -round(share / SHARE_TIE),
            others / max(numa.cpu_count, 1),
            -memory.get(numa.id, 0.0),
            numa.id,
        )

    return [n.id for n in sorted(node.cpu_numa_nodes(), key=rank)]
