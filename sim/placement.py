"""Where a job's threads run and its memory lives, from its allocation alone.

Threads spread evenly over the allowed CPUs (:func:`thread_cpus`), and each thread's pages
go to its own node when ``mems`` allows it, else to the nearest allowed node (first touch
under a memory binding, :func:`memory_flows`). The performance model
(:mod:`toposcope.sim.model`) and the cluster's ground truth both start from here.
"""

from __future__ import annotations

from collections.abc import Sequence

from toposcope.resources import Allocation
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
