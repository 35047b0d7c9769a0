"""The NUMA locality model shared by the locality policies and outcome verification.

A workload's *remote share* on a NUMA node is ``1 - c * m``, with ``c`` its CPU share and
``m`` its memory share there: the part of (thread, page) pairs that are not both on that
node (:func:`remote_share`). What being remote costs grows with the SLIT distance
(:func:`distance_penalty`), calibrated by CRI-RM's measurement (:data:`CRI_RM_PENALTY`):
pinning a TensorFlow CNN training job's threads and memory on a 2-socket Xeon Gold 6132
(SLIT 21) made it up to 57.76 % faster. numa-pinning and memory-migration price their
recommendations with it, and the advisor's outcome verification measures remote shares
before and after an applied change. The evidence functions name the series a locality
decision rests on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from toposcope.advisor.model import NodeModel, WorkloadModel
from toposcope.report.recommendation import Evidence

GIB = 1024**3
#: the CRI-RM / AIStation figure: up to 57.76 % faster CNN training once pinned
CRI_RM_PENALTY = 0.5776


def remote_share(cpu: Mapping[int, float], memory: Mapping[int, float], target: int) -> float:
    """``1 - c * m`` on ``target`` (one side alone when the other has no data)."""
    if cpu and memory:
        return 1.0 - cpu.get(target, 0.0) * memory.get(target, 0.0)
    if cpu:
        return 1.0 - cpu.get(target, 0.0)
    if memory:
        return 1.0 - memory.get(target, 0.0)
    return 0.0


def distance_penalty(
    node: NodeModel,
    cpu: Mapping[int, float],
    memory: Mapping[int, float],
    target: int,
    penalty: float,
    reference_distance: int,
) -> float:
    """``penalty x min(1, (d - 10) / (reference - 10))``, ``d`` the remote part's mean
    distance and ``reference`` the node's farthest published distance (``reference_distance``
    when the node publishes none): the farthest pair costs the full penalty, as on the
    2-socket machine CRI-RM measured, nearer pairs in proportion.
    """
    weights: dict[int, float] = defaultdict(float)
    for shares in (cpu, memory):
        for numa, share in shares.items():
            if numa != target:
                weights[numa] += share
    published = [d for n in node.numa_nodes for p, d in n.distances.items() if p != n.id]
    farthest = max(published) if published and max(published) > 10 else reference_distance
    total = sum(weights.values())
    if total <= 0:
        distance = float(farthest)
    else:
        distance = sum(w * node.distance(n, target) for n, w in weights.items()) / total
    return max(0.0, penalty * min(1.0, (distance - 10.0) / (farthest - 10.0)))


def locality_cost(
    node: NodeModel,
    shares: tuple[Mapping[int, float], Mapping[int, float]],
    target: int,
    penalty: float,
    reference_distance: int,
) -> float:
    """What a placement (CPU and memory ``shares`` per NUMA node) costs a workload against
    ``target``, as a share of its step time: the remote share times the distance penalty
    (:func:`remote_share`, :func:`distance_penalty`), what pinning it to ``target`` would
    gain.
    """
    cpu, memory = shares
    return remote_share(cpu, memory, target) * distance_penalty(
        node, cpu, memory, target, penalty, reference_distance
    )


def unpinned_shares(node: NodeModel) -> tuple[dict[int, float], dict[int, float]]:
    """Where an unpinned workload's threads and pages end up on ``node``: spread over the
    NUMA nodes with CPUs in proportion to their CPUs, and over those with memory in proportion
    to their memory (the kernel's load balancing; pages follow the threads that touch them).
    """
    cpus = {n.id: float(n.cpu_count) for n in node.cpu_numa_nodes()}
    sizes = {n.id: float(n.memory_total_bytes or 0) for n in node.numa_nodes}
    sizes = {k: v for k, v in sizes.items() if v > 0} or cpus

    def shares(weights: Mapping[int, float]) -> dict[int, float]:
        total = sum(weights.values())
        return {k: v / total for k, v in weights.items()} if total > 0 else {}

    return shares(cpus), shares(sizes)


def workload_evidence(workload: WorkloadModel) -> list[Evidence]:
    """The series behind a locality decision: CPU and memory per NUMA node, locality ratios."""
    base = {"node": workload.node, "workload": workload.name}
    evidence = [
        Evidence("toposcope_workload_cpu_seconds_total", {**base, "numa_node": str(n)}, v)
        for n, v in sorted(workload.cpu_by_numa.items())
    ]
    if not workload.cpu_by_numa or sum(workload.cpu_by_numa.values()) <= 0:
        evidence += [
            Evidence("toposcope_workload_threads", {**base, "numa_node": str(n)}, float(v))
            for n, v in sorted(workload.threads_by_numa.items())
        ]
    evidence += [
        Evidence("toposcope_workload_memory_bytes", {**base, "numa_node": str(n)}, v)
        for n, v in sorted(workload.memory_by_numa.items())
    ]
    evidence += [
        Evidence("toposcope_workload_locality_ratio", {**base, "resource": r}, v)
        for r, v in sorted(workload.locality.items())
    ]
    return evidence


def gpu_numa_nodes(node: NodeModel, workload: WorkloadModel) -> list[int]:
    """NUMA nodes of the workload's GPUs, the one with most of its GPUs first."""
    counts: dict[int, int] = defaultdict(int)
    for index in workload.gpus:
        gpu = node.gpu(index)
        if gpu is not None and gpu.numa_node is not None:
            counts[gpu.numa_node] += 1
    return sorted(counts, key=lambda n: (-counts[n], n))


def rounded(shares: Mapping[int, float]) -> dict[str, float]:
    """Shares keyed by NUMA node text, rounded for reports."""
    return {str(k): round(v, 4) for k, v in sorted(shares.items())}
