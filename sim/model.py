"""The performance model: how fast a job runs for a given allocation, and an oracle.

:func:`evaluate` is a pure function of ``(job, allocation, node template, co-runners)``:
the same arguments always give the same :class:`Performance`, nothing else is read, so an
oracle can score any alternative allocation. A job's slowdown (>= 1; throughput is the
job's best-case throughput divided by it) is the product of five factors:

``numa``
    ``1 + s * (r + W_spread * p)``: ``s`` the job's NUMA sensitivity, ``r`` the cost of its
    memory accesses that go to another NUMA node (every thread reads the whole working set,
    as data-parallel training threads share their tensors: threads' nodes vs. memory nodes,
    each pair costing ``local / remote bandwidth - 1`` at its SLIT distance), ``p`` the same
    cost over pairs of its threads on different nodes.
``contention``
    CPU oversubscription: the mean load of the CPUs the job may run on (busy threads of the
    job and of co-runners per CPU), when above 1; it slows CPU training fully and GPU jobs
    in proportion to their input weight.
``link``
    ``step(B) / step(B_nvswitch)`` with ``step(B) = 1 - c + c * B_pcie_switch / B``: ``c``
    the job's communication fraction (on one PCIe switch) and ``B`` the effective bandwidth
    of the worst link among its GPUs.
``interference``
    GPU sharing: ``1 + (1 + o) * d`` where ``d`` is the GPU demand of the co-runners on its
    busiest GPU and ``o`` the job's sharing overhead (time-slicing plus context switches).
``input``
    the input pipeline's CPU-side locality for GPU jobs: ``1 + i * (W_threads * rc +
    W_memory * rm)`` with ``i`` the input weight and ``rc`` / ``rm`` the remote-memory cost
    of its threads / memory away from its GPUs' NUMA nodes.

Every figure comes from the simulator's truth (``sim/truth.yaml``,
:mod:`toposcope.sim.truth_params`), with its sources; jobs carry their own draws of the
per-class ones (:mod:`toposcope.sim.jobs`).

Where threads run and memory lives follows from the allocation alone
(:mod:`toposcope.sim.placement`): threads spread evenly over the allowed CPUs, and each
thread's pages go to its own node when ``mems`` allows it, else to the nearest allowed node
(first touch under a memory binding). Each NUMA node holds its ``memory_bytes``: pages
first touched on a full node spill to the nearest node with room (counted with co-runners'
memory, :func:`~toposcope.sim.placement.memory_layout`) and pay the remote-memory cost there.

The oracle for one job on one node (:mod:`toposcope.sim.node_oracle`) scores allocations
with :func:`evaluate`. docs/sim-model.md gives the sources and the assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from toposcope.rm import Allocation
from toposcope.sim.jobs import JobKind, JobSpec
from toposcope.sim.nodetemplate import (
    LINK_CLASSES,
    LINK_SWITCH,
    TIER_NVLINK,
    TIER_NVSWITCH,
    NodeTemplate,
)
from toposcope.sim.placement import (
    Footprint,
    memory_fits,
    memory_flows,
    memory_layout,
    placement,
    thread_shares,
)
from toposcope.sim.truth_params import truth

#: The model's names, and the placement functions the cluster reads through it.
__all__ = [
    "CoRunner",
    "Performance",
    "cross_node_slowdown",
    "evaluate",
    "exchange_rate",
    "footprints",
    "job_memory_flows",
    "link_class_of",
    "memory_fits",
    "memory_flows",
    "pair_bandwidth",
    "placement",
    "thread_shares",
    "worst_pair",
]

#: A co-runner: another job on the same node with its allocation.
CoRunner = tuple[JobSpec, Allocation]


@dataclass(frozen=True)
class Performance:
    """How a job runs under one allocation.

    ``slowdown`` is ``inf`` (and ``throughput`` 0) for a GPU job without its GPUs.
    ``gpu_busy`` is the share of time one or more of the job's kernels runs on each of its
    GPUs, what NVML's ``utilization.gpu`` counts: its compute kernels plus the collective
    (NCCL) kernels that wait on slow links, not the time the GPU waits for its input or
    its CPU side. ``gpu_compute`` is the compute kernels' share alone (what power, memory
    bandwidth and PCIe traffic follow). ``cpu_rate`` is the CPU seconds per second its
    threads use; ``factors`` the five factors by name.
    """

    throughput: float
    slowdown: float
    factors: dict[str, float] = field(default_factory=dict)
    link_class: str = ""
    gpu_busy: float = 0.0
    gpu_compute: float = 0.0
    cpu_rate: float = 0.0

    @property
    def stalled(self) -> bool:
        """True when the job cannot make progress (a GPU job without its GPUs)."""
        return math.isinf(self.slowdown)


def _remote_cost(node: NodeTemplate, a: int, b: int) -> float:
    """What memory on NUMA node ``b`` costs threads on ``a``: ``local / remote - 1``."""
    if a == b:
        return 0.0
    return truth().remote_cost(node.distance(a, b))


def pair_bandwidth(node: NodeTemplate, a: int, b: int) -> float:
    """Effective GB/s between GPUs ``a`` and ``b``: the truth's bandwidth of their link tier
    (:meth:`~toposcope.sim.nodetemplate.NodeTemplate.link_tier`); ``n`` direct NVLinks get
    ``n`` links' worth, at most an NVSwitch's (an unknown count is an NVSwitch's).
    """
    t = truth()
    tier, count = node.link_tier(a, b)
    if tier == TIER_NVLINK:
        top = t.link_bandwidth(TIER_NVSWITCH)
        return top if count is None else min(top, count * t.link_bandwidth(TIER_NVLINK))
    return t.link_bandwidth(tier)


def _link_factor(job: JobSpec, bandwidth: float) -> float:
    """Step time on a link of ``bandwidth`` relative to an NVSwitch (see the docstring)."""
    t = truth()
    reference = t.link_bandwidth("pcie-switch")
    c = job.comm_intensity

    def step(b: float) -> float:
        return 1.0 - c + c * reference / b

    return step(bandwidth) / step(t.link_bandwidth("nvswitch"))


def exchange_rate(job: JobSpec, slowdown: float) -> float:
    """GB/s each GPU of a multi-GPU job sends (and receives), averaged over its run at
    ``slowdown``: ``c B_pcie-switch / (step(B_nvswitch) x slowdown)``.

    The link factor's step spends ``c B_pcie-switch / B`` exchanging gradients at ``B`` (the
    truth's bandwidths are nccl-tests bus bandwidths, what each GPU's link carries), so a
    step moves ``c B_pcie-switch`` whatever the link; a job slowed down (by its link or
    anything else) runs fewer steps per second and so moves fewer bytes per second.
    """
    if math.isinf(slowdown) or job.gpus < 2:
        return 0.0
    t = truth()
    c = job.comm_intensity
    reference = t.link_bandwidth("pcie-switch")
    best = 1.0 - c + c * reference / t.link_bandwidth("nvswitch")
    return c * reference / (best * slowdown)


# -- the model ------------------------------------------------------------------------------------


def worst_pair(gpus: Sequence[int], node: NodeTemplate) -> tuple[float, str]:
    """(bandwidth, link class) of the slowest pair of a GPU set (one GPU: no traffic)."""
    worst: tuple[float, int, str] | None = None
    for a, b in combinations(sorted(gpus), 2):
        cls = node.link_class(a, b)
        found = (pair_bandwidth(node, a, b), -LINK_CLASSES.index(cls), cls)
        if worst is None or found < worst:
            worst = found
    return (worst[0], worst[2]) if worst is not None else (math.inf, LINK_SWITCH)


def link_class_of(gpus: Sequence[int], node: NodeTemplate) -> str:
    """The link class of the slowest pair of a GPU set (``same-switch`` for one GPU)."""
    return worst_pair(gpus, node)[1]


def _cpu_loads(
    job: JobSpec, allocation: Allocation, node: NodeTemplate, co_runners: Iterable[CoRunner]
) -> float:
    """Mean load (busy threads per CPU) over the CPUs the job may use."""
    mine = placement(allocation, node, job.threads)[0]
    mine_set = set(mine)
    total = job.threads * job.cpu_busy
    for other, other_alloc in co_runners:
        if other_alloc.node != allocation.node:
            continue
        theirs = placement(other_alloc, node, other.threads)[0]
        overlap = len(mine_set.intersection(theirs))
        if overlap:
            total += other.threads * other.cpu_busy * overlap / len(theirs)
    return total / len(mine)


def footprints(
    job: JobSpec, allocation: Allocation, co_runners: Iterable[CoRunner]
) -> list[Footprint]:
    """The memory footprints of a job and of its co-runners on its node, the job first."""
    found: list[Footprint] = [(job.memory_bytes, allocation, job.threads)]
    for other, other_alloc in co_runners:
        if other_alloc.node == allocation.node:
            found.append((other.memory_bytes, other_alloc, other.threads))
    return found


def job_memory_flows(
    job: JobSpec, allocation: Allocation, node: NodeTemplate, co_runners: Iterable[CoRunner]
) -> dict[tuple[int, int], float]:
    """(thread node, memory node) -> share of the job's pages, after the node's NUMA nodes
    filled up with its co-runners' memory (:func:`~toposcope.sim.placement.memory_layout`).
    """
    return memory_layout(footprints(job, allocation, co_runners), node)[0]


def evaluate(
    job: JobSpec,
    allocation: Allocation,
    node: NodeTemplate,
    co_runners: Sequence[CoRunner] = (),
) -> Performance:
    """The job's performance under ``allocation`` on a node of ``node``'s shape.

    ``co_runners`` are the other jobs on the same node (others are ignored). Pure: see the
    module docstring for the formula.
    """
    t = truth()
    shares = placement(allocation, node, job.threads)[1]
    flows = job_memory_flows(job, allocation, node, co_runners)
    mem: dict[int, float] = {}
    for (_, target), weight in flows.items():
        mem[target] = mem.get(target, 0.0) + weight

    remote = sum(shares[a] * mem[b] * _remote_cost(node, a, b) for a in shares for b in mem)
    spread = sum(
        shares[a] * shares[b] * _remote_cost(node, a, b) for a in shares for b in shares if a != b
    )
    numa = 1.0 + job.numa_sensitivity * (remote + t.weight("thread_spread") * spread)

    load = _cpu_loads(job, allocation, node, co_runners)
    cpu_bound = 1.0 if job.kind is JobKind.CPU_TRAIN else job.input_intensity
    contention = 1.0 + cpu_bound * (max(load, 1.0) - 1.0)

    link = interference = input_factor = 1.0
    link_cls = ""
    gpus = sorted(set(allocation.gpus))
    if job.gpus > 0:
        if len(gpus) < job.gpus:
            return Performance(
                throughput=0.0,
                slowdown=math.inf,
                factors={"numa": numa, "contention": contention},
                cpu_rate=0.0,
            )
        bandwidth, worst = worst_pair(gpus, node)
        link = _link_factor(job, bandwidth) if len(gpus) > 1 else 1.0
        link_cls = worst if len(gpus) > 1 else ""
        overhead = job.sharing_overhead
        if overhead is None:
            overhead = t.classes[job.kind.value]["sharing_overhead"].value
        for gpu in gpus:
            demand = sum(
                other.gpu_demand
                for other, other_alloc in co_runners
                if other_alloc.node == allocation.node and gpu in other_alloc.gpus
            )
            interference = max(interference, 1.0 + (1.0 + overhead) * demand)
        gpu_nodes = {g.numa_node for g in node.gpus if g.index in gpus and g.numa_node is not None}
        if gpu_nodes:
            remote_threads = sum(
                w * min(_remote_cost(node, n, g) for g in gpu_nodes) for n, w in shares.items()
            )
            remote_memory = sum(
                w * min(_remote_cost(node, n, g) for g in gpu_nodes) for n, w in mem.items()
            )
            input_factor = 1.0 + job.input_intensity * (
                t.weight("input_threads") * remote_threads
                + t.weight("input_memory") * remote_memory
            )
    slowdown = numa * contention * link * interference * input_factor
    compute = job.gpu_demand / slowdown if job.gpus else 0.0
    return Performance(
        throughput=job.base_throughput / slowdown,
        slowdown=slowdown,
        factors={
            "numa": numa,
            "contention": contention,
            "link": link,
            "interference": interference,
            "input": input_factor,
        },
        link_class=link_cls,
        gpu_busy=min(compute + (link - 1.0) / slowdown, 1.0) if job.gpus else 0.0,
        gpu_compute=compute,
        cpu_rate=job.threads * job.cpu_busy / max(load, 1.0),
    )


def cross_node_slowdown(job: JobSpec) -> float:
    """The link factor of a job whose GPUs span nodes (the truth's ``cross-node`` tier).

    The simulator places each job on one node; this is what the oracle weighs a split
    placement against.
    """
    return _link_factor(job, truth().link_bandwidth("cross-node"))
