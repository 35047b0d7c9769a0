"""The allocations of a job on a node worth scoring: GPU subsets x CPU sets x memory bindings.

CPU sets are each NUMA node, each socket (when it has several nodes) and the whole node;
memory bindings are none (first touch) and each single node with memory. The oracle
(:func:`toposcope.sim.node_oracle.rank_allocations`) scores every one when there are few enough.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from itertools import combinations

from toposcope.rm import Allocation
from toposcope.sim.jobs import JobSpec
from toposcope.sim.nodetemplate import NodeTemplate


def cpu_choices(node: NodeTemplate) -> list[tuple[int, ...]]:
    """CPU sets worth trying: each NUMA node, each socket (when it has several nodes), all."""
    choices: list[tuple[int, ...]] = []
    for numa in node.topology.numa_nodes:
        if numa.cpus:
            choices.append(tuple(sorted(numa.cpus)))
    for package in node.topology.packages:
        cpus = tuple(sorted(c for c in package.cpus if c in set(node.cpus)))
        if cpus and cpus not in choices:
            choices.append(cpus)
    if node.cpus not in choices:
        choices.append(node.cpus)
    return choices


def mem_choices(node: NodeTemplate) -> list[tuple[int, ...]]:
    """Memory bindings worth trying: none (first touch), then each single node with memory."""
    return [(), *((n.id,) for n in node.topology.numa_nodes if n.memory_bytes > 0)]


def candidate_count(job: JobSpec, node: NodeTemplate, gpu_pool: Sequence[int]) -> int:
    """How many allocations :func:`candidate_allocations` yields."""
    gpu_sets = math.comb(len(gpu_pool), job.gpus) if job.gpus else 1
    return gpu_sets * len(cpu_choices(node)) * len(mem_choices(node))


def candidate_allocations(
    job: JobSpec, node_name: str, node: NodeTemplate, gpu_pool: Sequence[int] | None = None
) -> Iterator[Allocation]:
    """Every allocation of ``job`` on the node: GPU subsets of ``gpu_pool`` (default: all
    GPUs) x :func:`cpu_choices` x :func:`mem_choices`.
    """
    pool = sorted(gpu_pool if gpu_pool is not None else (g.index for g in node.gpus))
    gpu_sets: Iterable[tuple[int, ...]] = combinations(pool, job.gpus) if job.gpus else [()]
    cpus_options = cpu_choices(node)
    mems_options = mem_choices(node)
    for gpus in gpu_sets:
        for cpus in cpus_options:
            for mems in mems_options:
                yield Allocation(node_name, list(cpus), list(mems), list(gpus))
