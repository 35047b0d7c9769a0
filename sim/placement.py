"""Where a job's threads run and its memory lives, from its allocation alone.

Threads spread evenly over the allowed CPUs (:func:`thread_cpus`), and each thread's pages
go to its own node when ``mems`` allows it, else to the nearest allowed node (first touch
under a memory binding, :func:`memory_flows`). The performance model
(:mod:`toposcope.sim.model`) and the cluster's ground truth both start from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from toposcope.rm import Allocation
from toposcope.sim.nodetemplate import NodeTemplate, Placement


def effective_cpus(allocation: Allocation, node: NodeTemplate) -> tuple[int, ...]:
    """The CPUs the job may use: its cpuset, or every CPU of the node when it has none."""
    known = node.cpu_set
    cpus = tuple(sorted(c for c in allocation.cpus if c in known))
    return cpus or node.cpus


def effective_mems(allocation: Allocation, node: NodeTemplate) -> tuple[int, ...]:
    """The NUMA nodes memory may come from: its binding, or every node with memory."""
    known = {n.id for n in node.topology.numa_nodes}
    mems = tuple(sorted(m for m in allocation.mems if m in known))
    if mems:
        return mems
    return tuple(n.id for n in node.topology.numa_nodes if n.memory_bytes > 0) or node.numa_ids


def thread_cpus(cpus: Sequence[int], threads: int, node: NodeTemplate) -> list[int]:
    """The CPU each thread last ran on: the allowed CPUs taken in turn across their NUMA
    nodes (in proportion to each node's share of them), lowest-numbered first, wrapping
    around when there are more threads than CPUs. Like the kernel's load balancing, an
    unpinned job ends up spread over every node.
    """
    by_node: dict[int, list[int]] = {}
    for cpu in sorted(cpus):
        by_node.setdefault(node.numa_of_cpu(cpu), []).append(cpu)
    if not by_node:
        return []
    ordered = [
        cpu
        for _, _, cpu in sorted(
            (i / len(members), numa, cpu)
            for numa, members in by_node.items()
            for i, cpu in enumerate(members)
        )
    ]
    return [ordered[i % len(ordered)] for i in range(max(threads, 1))]


_PLACEMENT_CACHE_SIZE = 4096


def placement(allocation: Allocation, node: NodeTemplate, threads: int) -> Placement:
    """(effective CPUs, thread share per NUMA node, each thread's CPU), memoised per
    template; callers must not modify the returned values.
    """
    cache = node.placement_cache()
    key = (tuple(allocation.cpus), threads)
    found = cache.get(key)
    if found is not None:
        return found
    cpus = effective_cpus(allocation, node)
    placed = thread_cpus(cpus, threads, node)
    shares: dict[int, float] = {}
    for cpu in placed:
        numa = node.numa_of_cpu(cpu)
        shares[numa] = shares.get(numa, 0.0) + 1.0 / len(placed)
    if len(cache) >= _PLACEMENT_CACHE_SIZE:
        cache.clear()
    cache[key] = (cpus, shares, tuple(placed))
    return cache[key]


def thread_shares(allocation: Allocation, node: NodeTemplate, threads: int) -> dict[int, float]:
    """Share of the job's threads on each NUMA node."""
    return dict(placement(allocation, node, threads)[1])


def memory_flows(
    shares: dict[int, float], mems: Sequence[int], node: NodeTemplate
) -> dict[tuple[int, int], float]:
    """(thread node, memory node) -> share of the job's pages (first touch under ``mems``).

    A thread's pages go to its own node when allowed, else are split evenly between the
    nearest allowed nodes.
    """
    flows: dict[tuple[int, int], float] = {}
    for source, weight in shares.items():
        if source in mems:
            targets = [source]
        else:
            nearest = min(node.distance(source, m) for m in mems)
            targets = [m for m in mems if node.distance(source, m) == nearest]
        for target in targets:
            key = (source, target)
            flows[key] = flows.get(key, 0.0) + weight / len(targets)
    return flows


def memory_shares(allocation: Allocation, node: NodeTemplate, threads: int) -> dict[int, float]:
    """Share of the job's memory on each NUMA node."""
    flows = memory_flows(
        thread_shares(allocation, node, threads), effective_mems(allocation, node), node
    )
    shares: dict[int, float] = {}
    for (_, target), weight in flows.items():
        shares[target] = shares.get(target, 0.0) + weight
    return shares


#: (thread node, memory node) -> share of one job's pages.
Flows = dict[tuple[int, int], float]
#: One job's memory on a node: (footprint in bytes, allocation, threads).
Footprint = tuple[int, Allocation, int]


def _capacity(node: NodeTemplate, numa: int) -> float:
    """Bytes NUMA node ``numa`` holds; unlimited when the topology does not say (0)."""
    found = node.topology.numa_node(numa)
    size = found.memory_bytes if found is not None else 0
    return float(size) if size > 0 else math.inf


def memory_layout(jobs: Sequence[Footprint], node: NodeTemplate) -> list[Flows]:
    """Where each job's pages live on a node once NUMA nodes fill up, aligned with ``jobs``.

    Pages go where first touch puts them (:func:`memory_flows`); a NUMA node asked for more
    than its ``memory_bytes`` keeps what fits and every job on it spills the same share of
    its pages there to the nearest nodes (by SLIT distance, then id) with room, as the
    kernel's zone fallback does, over-committed nodes taken in id order. What no node has
    room for stays put (swap, which is not modelled). The spilled pages are remote to the
    threads that touched them, so the model charges them the truth's remote-memory cost.
    """
    flows = [
        memory_flows(thread_shares(alloc, node, threads), effective_mems(alloc, node), node)
        for _, alloc, threads in jobs
    ]
    demand: dict[int, float] = dict.fromkeys(node.numa_ids, 0.0)
    for (size, _, _), flow in zip(jobs, flows, strict=True):
        for (_, target), weight in flow.items():
            demand[target] = demand.get(target, 0.0) + size * weight
    for full in sorted(demand):
        excess = demand[full] - _capacity(node, full)
        if excess <= 0:
            continue
        moves: list[tuple[int, float]] = []
        for other in sorted(demand, key=lambda m: (node.distance(full, m), m)):
            room = _capacity(node, other) - demand[other]
            if other == full or room <= 0:
                continue
            amount = min(room, excess - sum(a for _, a in moves))
            moves.append((other, amount))
            if sum(a for _, a in moves) >= excess:
                break
        total = demand[full]
        for to, amount in moves:
            demand[to] += amount
            demand[full] -= amount
            for flow in flows:
                for (source, target), weight in list(flow.items()):
                    if target == full:
                        key = (source, to)
                        flow[key] = flow.get(key, 0.0) + weight * amount / total
        kept = demand[full] / total
        for flow in flows:
            for key in [k for k in flow if k[1] == full]:
                flow[key] *= kept
    return flows


def memory_use(jobs: Sequence[Footprint], node: NodeTemplate) -> dict[int, float]:
    """Bytes the jobs hold on each NUMA node of ``node`` (after spilling)."""
    use = dict.fromkeys(node.numa_ids, 0.0)
    for (size, _, _), flow in zip(jobs, memory_layout(jobs, node), strict=True):
        for (_, target), weight in flow.items():
            use[target] = use.get(target, 0.0) + size * weight
    return use


def memory_fits(
    size: int, allocation: Allocation, node: NodeTemplate, use: dict[int, float]
) -> bool:
    """Whether a job of ``size`` bytes bound to ``allocation.mems`` fits in what the other
    jobs (``use``: their :func:`memory_use`) leave free on those NUMA nodes. An unbound job
    always fits (it may use any node); a bound one that does not would be reclaimed or
    killed under its binding on a real node, so the oracle does not choose it.
    """
    if not allocation.mems or size <= 0:
        return True
    room = sum(_capacity(node, m) - use.get(m, 0.0) for m in set(allocation.mems))
    return room >= size
