"""memory-migration: move a workload's pages to the NUMA node its threads run on.

Rule. When at least ``min_cpu_share`` of a workload's CPU time is on one NUMA node (its
*home*) but at least ``min_remote_memory_share`` of its memory lives elsewhere, migrate the
remote pages home (``migrate_pages``), provided the home node's lowest free memory over the
window holds them times ``memory_headroom``. Workloads whose home is not their GPUs' NUMA node
are left to numa-pinning (moving memory home would move it further from the GPU). A transfer
longer than ``max_migration_seconds`` at ``migration_bytes_per_second`` is high risk.

Gain model. The same remote-share model as numa-pinning: before, ``1 - c * m`` of (thread,
page) pairs are remote; after, ``1 - c``. The gain is the difference, ``c * (1 - m)``, times
the distance-scaled NUMA penalty (0.5776 at SLIT 21, the CRI-RM calibration). It is never
larger than numa-pinning's gain for the same workload, so when both fire, conflict
resolution keeps the pin (which migrates the memory too).
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.idleness import IdleRule
from toposcope.advisor.locality import (
    CRI_RM_PENALTY,
    GIB,
    distance_penalty,
    gpu_numa_nodes,
    rounded,
    workload_evidence,
)
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.base import Evaluation, Policy, PolicySettings, setting
from toposcope.advisor.recommendations import make_recommendation
from toposcope.catalogue import spec
from toposcope.report.recommendation import Note, Recommendation, RecommendationKind, Risk, Target
from toposcope.rm import ActionKind, ActionRequest


@dataclass(frozen=True)
class MemoryMigrationSettings(PolicySettings):
    """Settings of the memory-migration policy."""

    min_cpu_share: float = setting(
        0.8, gt=0.5, le=1, help="CPU share on one NUMA node for it to count as the home"
    )
    min_remote_memory_share: float = setting(
        0.2, gt=0, le=1, help="recommend when at least this share of memory is off the home node"
    )
    numa_penalty: float = setting(
        CRI_RM_PENALTY, gt=0, le=5, help="speed-up of a fully remote workload made local"
    )
    reference_distance: int = setting(
        21,
        gt=10,
        le=255,
        help="SLIT distance that costs the full numa_penalty when a node publishes no "
        "distances (else its farthest pair does)",
    )
    memory_headroom: float = setting(
        1.1, ge=1, le=4, help="free memory needed on the home node per byte moved"
    )
    migration_bytes_per_second: float = setting(
        2.0 * GIB, gt=0, help="page migration throughput assumed for the cost estimate"
    )
    max_migration_seconds: float = setting(
        60.0, gt=0, help="a longer migration (stalling the workload) is high risk"
    )
    min_memory_bytes: float = setting(
        0.0, ge=0, help="leave workloads with less resident memory than this alone"
    )


class MemoryMigration(Policy[MemoryMigrationSettings]):
    """Migrate pages of workloads whose threads stay on one node but memory does not."""

    name = "memory-migration"
    description = "migrate memory that lives away from the NUMA node a workload runs on"
    settings_type = MemoryMigrationSettings
    requires = (
        spec("toposcope_workload_cpu_seconds_total"),
        spec("toposcope_workload_memory_bytes"),
    )

    def evaluate(self, model: ClusterModel) -> Evaluation:
        """One ``migrate-memory`` recommendation per workload with remote memory and room."""
        if not model.has("toposcope_workload_memory_bytes"):
            return Evaluation(
                undecided=(self.note("*", "no series for toposcope_workload_memory_bytes"),)
            )
        s = self.settings
        recs: list[Recommendation] = []
        notes: list[Note] = []
        planned: dict[tuple[str, int], float] = {}
        rule = IdleRule()
        for workload in model.workloads:
            node = model.node(workload.node)
            if node is None or len(node.numa_nodes) < 2:
                continue
            cpu, memory = workload.cpu_shares(), workload.memory_shares()
            if not cpu or not memory or workload.memory_bytes < s.min_memory_bytes:
                continue
            home = max(sorted(cpu), key=lambda n: cpu[n])
            c, m = cpu[home], memory.get(home, 0.0)
            if c < s.min_cpu_share or 1.0 - m < s.min_remote_memory_share:
                continue
            gpu_nodes = gpu_numa_nodes(node, workload)
            if gpu_nodes and home not in gpu_nodes:
                continue  # numa-pinning moves it next to its GPUs instead
            if workload.gpus and (idleness := rule.judge(model, workload)).quiet:
                notes.append(self.note(workload.key, rule.why_left(model, idleness)))
                continue
            moved = sum(v for n, v in workload.memory_by_numa.items() if n != home)
            home_numa = node.numa(home)
            free = home_numa.memory_free_bytes if home_numa is not None else None
            key = (workload.node, home)
            if free is not None and moved * s.memory_headroom > free - planned.get(key, 0.0):
                notes.append(
                    self.note(
                        workload.key,
                        f"no room on NUMA node {home}: {moved / GIB:.2f} GiB to move, "
                        f"{(free - planned.get(key, 0.0)) / GIB:.2f} GiB free",
                    )
                )
                continue
            planned[key] = planned.get(key, 0.0) + moved
            penalty = distance_penalty(
                node, {home: 1.0}, memory, home, s.numa_penalty, s.reference_distance
            )
            gain = c * (1.0 - m) * penalty
            seconds = moved / s.migration_bytes_per_second
            risk = (
                Risk.HIGH
                if seconds > s.max_migration_seconds
                else Risk.MEDIUM
                if seconds > s.max_migration_seconds / 4
                else Risk.LOW
            )
            confidence = 0.75 * (0.75 if free is None else 1.0)
            if workload.cpu_cumulative or workload.cpu_from_threads():
                confidence *= 0.75
            recs.append(
                make_recommendation(
                    kind=RecommendationKind.MIGRATE_MEMORY,
                    policy=self.name,
                    target=Target(workload.node, workload.name),
                    summary=(
                        f"migrate {moved / GIB:.2f} GiB of {workload.name} on {workload.node} "
                        f"to NUMA node {home}, where {c:.0%} of its CPU time runs"
                    ),
                    current={
                        "cpu_share_by_numa": rounded(cpu),
                        "memory_share_by_numa": rounded(memory),
                    },
                    proposed={
                        "mems": [home],
                        "bytes": round(moved),
                        "estimated_seconds": round(seconds, 2),
                    },
                    evidence=workload_evidence(workload),
                    estimated_gain=gain,
                    gain_model=(
                        f"c*(1-m) = {c:.3f}*(1-{m:.3f}) x NUMA penalty {penalty:.4f} "
                        f"({s.numa_penalty:g} at SLIT {s.reference_distance}, CRI-RM calibration)"
                    ),
                    confidence=confidence,
                    risk=risk,
                    actions=[
                        ActionRequest(
                            "",
                            ActionKind.MIGRATE_MEMORY,
                            workload.name,
                            workload.node,
                            mems=[home],
                        )
                    ],
                    claims=[f"workload:{workload.key}"],
                )
            )
        return Evaluation(tuple(recs), tuple(notes))
