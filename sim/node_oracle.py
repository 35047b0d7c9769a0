"""The best allocation of one job on one node, or over several nodes, by the performance
model (:func:`toposcope.sim.model.evaluate`).

:func:`rank_allocations` scores every candidate allocation (GPU subsets x CPU sets x memory
bindings, :mod:`toposcope.sim.candidates`); :func:`best_allocation` does so when there are
at most ``exhaustive_limit`` of them and takes :func:`greedy_allocation` otherwise. The
cluster-wide oracle is :mod:`toposcope.sim.oracle`.
"""

from __future__ import annotations

from collections.abc import Sequence

from toposcope.rm import Allocation
from toposcope.sim.candidates import candidate_allocations, candidate_count
from toposcope.sim.jobs import JobSpec
from toposcope.sim.model import CoRunner, Performance, evaluate, pair_bandwidth, worst_pair
from toposcope.sim.nodetemplate import NodeTemplate


def rank_allocations(
    job: JobSpec,
    node_name: str,
    node: NodeTemplate,
    co_runners: Sequence[CoRunner] = (),
    gpu_pool: Sequence[int] | None = None,
) -> list[tuple[Allocation, Performance]]:
    """Every candidate allocation scored, best (lowest slowdown) first; ties keep the
    enumeration order, so the result is deterministic.
    """
    scored = [
        (alloc, evaluate(job, alloc, node, co_runners))
        for alloc in candidate_allocations(job, node_name, node, gpu_pool)
    ]
    scored.sort(key=lambda item: item[1].slowdown)
    return scored


def greedy_allocation(
    job: JobSpec, node_name: str, node: NodeTemplate, gpu_pool: Sequence[int] | None = None
) -> Allocation:
    """A good allocation without search: the GPU set with the best worst link (grown from
    each GPU by adding the best-linked, same-NUMA-node GPU next), then the CPUs and memory
    of the NUMA node holding most of those GPUs (its socket, or the whole node, when the
    threads do not fit).
    """
    pool = sorted(gpu_pool if gpu_pool is not None else (g.index for g in node.gpus))
    chosen: list[int] = []
    if job.gpus:
        best: tuple[float, list[int]] | None = None
        for seed in pool:
            group = [seed]
            while len(group) < job.gpus:
                rest = [g for g in pool if g not in group]
                if not rest:
                    break

                def cost(g: int, group: list[int] = group) -> tuple[float, int, int]:
                    worst = min(pair_bandwidth(node, g, m) for m in group)
                    same = node.gpu(g).numa_node == node.gpu(group[0]).numa_node
                    return (-worst, 0 if same else 1, g)

                group.append(min(rest, key=cost))
            if len(group) < job.gpus:
                continue
            score = -worst_pair(group, node)[0]
            if best is None or score < best[0]:
                best = (score, sorted(group))
        chosen = best[1] if best is not None else []
    home: int
    if chosen:
        counts: dict[int, int] = {}
        for g in chosen:
            numa = node.gpu(g).numa_node
            if numa is not None:
                counts[numa] = counts.get(numa, 0) + 1
        home = max(sorted(counts), key=lambda n: counts[n]) if counts else node.numa_ids[0]
    else:
        home = next(n.id for n in node.topology.numa_nodes if n.cpus)
    cpus = node.node_cpus(home)
    if len(cpus) < job.threads:
        package = node.package_of_node(home)
        cpus = tuple(c for n in node.topology.numa_nodes if n.package == package for c in n.cpus)
        if len(cpus) < job.threads:
            cpus = node.cpus
    return Allocation(node_name, sorted(cpus), [home], chosen)


def best_allocation(
    job: JobSpec,
    node_name: str,
    node: NodeTemplate,
    co_runners: Sequence[CoRunner] = (),
    gpu_pool: Sequence[int] | None = None,
    exhaustive_limit: int = 20_000,
) -> tuple[Allocation, Performance]:
    """The best allocation on this node: exhaustive when
    :func:`~toposcope.sim.candidates.candidate_count` is at most ``exhaustive_limit``, else
    the greedy one (an achievable lower bound on the best).
    """
    pool = list(gpu_pool) if gpu_pool is not None else [g.index for g in node.gpus]
    if job.gpus > len(pool):
        raise ValueError(f"{job.name} needs {job.gpus} GPUs, only {len(pool)} available")
    if candidate_count(job, node, pool) <= exhaustive_limit:
        return rank_allocations(job, node_name, node, co_runners, pool)[0]
    alloc = greedy_allocation(job, node_name, node, pool)
    return alloc, evaluate(job, alloc, node, co_runners)


def best_over_nodes(
    job: JobSpec,
    nodes: Sequence[tuple[str, NodeTemplate, Sequence[CoRunner], Sequence[int]]],
    exhaustive_limit: int = 20_000,
) -> tuple[Allocation, Performance] | None:
    """The best allocation over several nodes, each given as ``(name, template, co-runners,
    free GPUs)``; ``None`` when no node has enough free GPUs.
    """
    best: tuple[Allocation, Performance] | None = None
    for name, template, co_runners, free in nodes:
        if job.gpus > len(free):
            continue
        found = best_allocation(job, name, template, co_runners, free, exhaustive_limit)
        if best is None or found[1].slowdown < best[1].slowdown:
            best = found
    return best
