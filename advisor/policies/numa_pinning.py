"""numa-pinning: pin a workload's threads and memory to one NUMA node.

Rule. A workload whose CPU time and memory are spread over NUMA nodes, or that runs away
from the NUMA node its GPUs hang off, is pinned (cpuset.cpus and cpuset.mems, with its pages
migrated) to its target node: the NUMA node of most of its GPUs, or, without GPUs, the node
holding most of its CPU time and memory. It is recommended when the remote share is at least
``min_remote_share`` and the target has room: the cores the workload moves must fit under
``max_cpu_load`` of the target's online CPUs with what already runs there (and what earlier
pins of this run moved there), and the memory it moves (times ``memory_headroom``) must fit in
the target's lowest free memory over the window. A target without room is skipped for the next
best one (never for GPU workloads, whose target is fixed by the GPU); with no room anywhere the
policy says so. Unknown capacity (no free-memory series, CPU use without a rate) lowers the
confidence instead of blocking.

Gain model. With ``c`` the workload's CPU share and ``m`` its memory share on the target
node, the *remote share* is ``1 - c * m``: the part of (thread, page) pairs that are not both
on the target. The gain is ``remote share x numa_penalty x (d - 10) / (reference_distance -
10)``, ``d`` the SLIT distance from where the remote part sits. ``numa_penalty`` defaults to
0.5776: CRI-RM pinning a TensorFlow CNN training job's threads and memory on a 2-socket Xeon
Gold 6132 (SLIT 21) made it up to 57.76 % faster, read here as "fully remote at distance 21
costs 57.76 %" (the best-vs-worst figure of the design docs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from toposcope.advisor.model import ClusterModel, NodeModel, WorkloadModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.recommendations import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
    make_recommendation,
)
from toposcope.catalogue import spec
from toposcope.cpulist import format_cpulist
from toposcope.resources import ActionKind, ActionRequest

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
    """``penalty x (d - 10) / (reference - 10)``, ``d`` the remote part's mean distance."""
    weights: dict[int, float] = defaultdict(float)
    for shares in (cpu, memory):
        for numa, share in shares.items():
            if numa != target:
                weights[numa] += share
    total = sum(weights.values())
    if total <= 0:
        distance = float(reference_distance)
    else:
        distance = sum(w * node.distance(n, target) for n, w in weights.items()) / total
    return max(0.0, penalty * (distance - 10.0) / (reference_distance - 10.0))


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


@dataclass(frozen=True)
class NumaPinningSettings(PolicySettings):
    """Settings of the numa-pinning policy."""

    min_remote_share: float = setting(
        0.2, ge=0, le=1, help="recommend only when at least this share is remote (1 - c*m)"
    )
    numa_penalty: float = setting(
        CRI_RM_PENALTY,
        gt=0,
        le=5,
        help="speed-up of pinning a fully remote workload at reference_distance (CRI-RM: 0.5776)",
    )
    reference_distance: int = setting(
        21, gt=10, le=255, help="SLIT distance numa_penalty was measured at"
    )
    max_cpu_load: float = setting(
        0.9, gt=0, le=1, help="share of the target's online CPUs that may be busy after pinning"
    )
    memory_headroom: float = setting(
        1.1, ge=1, le=4, help="free memory needed on the target per byte moved"
    )
    min_memory_bytes: float = setting(
        0.0, ge=0, help="leave workloads with less resident memory than this alone"
    )
    migrate_memory: bool = setting(
        True, help="also migrate the workload's remote pages (else only new allocations)"
    )


class NumaPinning(Policy[NumaPinningSettings]):
    """Pin spread-out or GPU-remote workloads' CPUs and memory to their target NUMA node."""

    name = "numa-pinning"
    description = "pin workloads spread over NUMA nodes, or far from their GPUs, to one node"
    settings_type = NumaPinningSettings
    requires = (
        spec("toposcope_numa_node_info"),
        spec("toposcope_workload_cpu_seconds_total"),
        spec("toposcope_workload_memory_bytes"),
    )

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """Pins in order of gain, each checked against capacity left by earlier ones."""
        if not model.has("toposcope_numa_node_info"):
            return Evaluation(undecided=(self.note("*", "no series for toposcope_numa_node_info"),))
        notes: list[Note] = []
        plans: list[tuple[float, WorkloadModel, list[int]]] = []
        for workload in model.workloads:
            node = model.node(workload.node)
            if node is None or len(node.cpu_numa_nodes()) < 2:
                continue  # one NUMA node: nothing to pin to
            cpu, memory = workload.cpu_shares(), workload.memory_shares()
            if not cpu and not memory:
                notes.append(self.note(workload.key, "no CPU or memory placement series"))
                continue
            if memory and workload.memory_bytes < self.settings.min_memory_bytes:
                continue
            targets = self._targets(node, workload, cpu, memory, notes)
            if not targets:
                continue
            first = targets[0]
            gain = remote_share(cpu, memory, first) * distance_penalty(
                node,
                cpu,
                memory,
                first,
                self.settings.numa_penalty,
                self.settings.reference_distance,
            )
            plans.append((gain, workload, targets))
        recs: list[Recommendation] = []
        planned_cores: dict[tuple[str, int], float] = defaultdict(float)
        planned_bytes: dict[tuple[str, int], float] = defaultdict(float)
        for _, workload, targets in sorted(plans, key=lambda p: (-p[0], p[1].key)):
            rec = self._pin(model, workload, targets, planned_cores, planned_bytes, notes)
            if rec is not None:
                recs.append(rec)
        return Evaluation(tuple(recs), tuple(notes))

    def _targets(
        self,
        node: NodeModel,
        workload: WorkloadModel,
        cpu: Mapping[int, float],
        memory: Mapping[int, float],
        notes: list[Note],
    ) -> list[int]:
        cpu_nodes = {n.id for n in node.cpu_numa_nodes()}
        if workload.gpus:
            gpu_nodes = [n for n in gpu_numa_nodes(node, workload) if n in cpu_nodes]
            if gpu_nodes:
                target = gpu_nodes[0]
                if remote_share(cpu, memory, target) < self.settings.min_remote_share:
                    return []
                return [target]
            notes.append(
                self.note(workload.key, "NUMA node of its GPUs unknown; judged without GPUs")
            )
        ranked = sorted(cpu_nodes, key=lambda n: (-(cpu.get(n, 0.0) + memory.get(n, 0.0)), n))
        if remote_share(cpu, memory, ranked[0]) < self.settings.min_remote_share:
            return []
        return ranked

    def _pin(
        self,
        model: ClusterModel,
        workload: WorkloadModel,
        targets: list[int],
        planned_cores: dict[tuple[str, int], float],
        planned_bytes: dict[tuple[str, int], float],
        notes: list[Note],
    ) -> Recommendation | None:
        node = model.nodes[workload.node]
        capacity = model.numa_capacity(workload.node)
        cpu = workload.cpu_shares()
        cores = workload.cores_used()
        refusals = []
        for target in targets:
            cap = capacity.get(target)
            numa = node.numa(target)
            if cap is None or numa is None:
                continue
            moved_cores = cores * (1.0 - cpu.get(target, 0.0)) if cores is not None else None
            moved_bytes = sum(v for n, v in workload.memory_by_numa.items() if n != target)
            known = moved_cores is not None and cap.cores_known
            key = (workload.node, target)
            if moved_cores is not None:
                busy = cap.cores_used + planned_cores[key] + moved_cores
                limit = cap.cpus * self.settings.max_cpu_load
                if busy > limit:
                    refusals.append(
                        f"NUMA node {target}: {busy:.1f} busy cores would exceed {limit:.1f}"
                    )
                    continue
            if cap.memory_free_bytes is not None:
                room = cap.memory_free_bytes - planned_bytes[key]
                if moved_bytes * self.settings.memory_headroom > room:
                    refusals.append(
                        f"NUMA node {target}: {moved_bytes / GIB:.2f} GiB to move, "
                        f"{room / GIB:.2f} GiB free"
                    )
                    continue
            else:
                known = False
            planned_cores[key] += moved_cores or 0.0
            planned_bytes[key] += moved_bytes
            return self._recommend(model, workload, target, moved_bytes, known)
        if refusals:
            notes.append(self.note(workload.key, "no capacity: " + "; ".join(refusals)))
        return None

    def _recommend(
        self,
        model: ClusterModel,
        workload: WorkloadModel,
        target: int,
        moved_bytes: float,
        capacity_known: bool,
    ) -> Recommendation:
        s = self.settings
        node = model.nodes[workload.node]
        cpu, memory = workload.cpu_shares(), workload.memory_shares()
        remote = remote_share(cpu, memory, target)
        penalty = distance_penalty(node, cpu, memory, target, s.numa_penalty, s.reference_distance)
        numa = node.numa(target)
        cpus = list(numa.cpus) if numa else []
        confidence = 0.8
        if workload.cpu_cumulative or workload.cpu_from_threads():
            confidence *= 0.75
        if not capacity_known:
            confidence *= 0.75
        risk = Risk.MEDIUM if moved_bytes > 4 * GIB or not capacity_known else Risk.LOW
        why = "its GPUs' NUMA node" if workload.gpus else "its dominant NUMA node"
        evidence = workload_evidence(workload)
        for index in workload.gpus:
            gpu = node.gpu(index)
            if gpu is not None and gpu.numa_node is not None:
                evidence.append(
                    Evidence(
                        "toposcope_gpu_info",
                        {"node": node.name, "gpu": str(index), "numa_node": str(gpu.numa_node)},
                        1.0,
                    )
                )
        actions = [ActionRequest("", ActionKind.PIN, workload.name, workload.node, cpus, [target])]
        if s.migrate_memory and moved_bytes > 0:
            actions.append(
                ActionRequest(
                    "", ActionKind.MIGRATE_MEMORY, workload.name, workload.node, mems=[target]
                )
            )
        return make_recommendation(
            kind=RecommendationKind.PIN,
            policy=self.name,
            target=Target(workload.node, workload.name),
            summary=(
                f"pin {workload.name} on {workload.node} to NUMA node {target} ({why}); "
                f"{remote:.0%} of its CPU/memory pairs are remote"
            ),
            current={
                "cpu_share_by_numa": rounded(cpu),
                "memory_share_by_numa": rounded(memory),
                "gpus": list(workload.gpus),
            },
            proposed={
                "numa_node": target,
                "cpus": format_cpulist(cpus),
                "mems": [target],
                "migrate_memory_bytes": round(moved_bytes) if s.migrate_memory else 0,
            },
            evidence=evidence,
            estimated_gain=remote * penalty,
            gain_model=(
                f"remote share {remote:.3f} (1 - c*m on node {target}) x NUMA penalty "
                f"{penalty:.4f} ({s.numa_penalty:g} at SLIT {s.reference_distance}, "
                "CRI-RM 57.76% calibration)"
            ),
            confidence=confidence,
            risk=risk,
            actions=actions,
            claims=[f"workload:{workload.key}"],
        )
