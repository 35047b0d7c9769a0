"""numa-pinning's settings: the bounds of a pin (the target's load and memory headroom) and
the figures that price it, the prior's and the measured basis' (:mod:`.numa_pinning`).
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.locality import CRI_RM_PENALTY
from toposcope.advisor.numa_share import CORE_STREAM_GBPS, REMOTE_COST, THREAD_SPREAD
from toposcope.advisor.policies.base import PolicySettings, setting
from toposcope.advisor.policies.pin_capacity import PinLimits


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
    gpu_job_share: float = setting(
        0.4,
        gt=0,
        le=1,
        help="share of numa_penalty a workload holding GPUs pays (its step is mostly GPU "
        "time; prior from verified outcomes: pins of GPU jobs gained 12-33% where the CPU "
        "figure said 43%)",
    )
    remote_cost: float = setting(
        REMOTE_COST,
        gt=0,
        le=5,
        help="with measured memory traffic: what a byte from the farthest node's memory costs "
        "on top of a local one (local / remote bandwidth - 1; remote STREAM at about 60% of "
        "local across a socket link)",
    )
    core_stream_gbps: float = setting(
        CORE_STREAM_GBPS,
        gt=0,
        le=1000,
        help="GB/s one busy core streams from local memory (single-thread STREAM, about 11): the "
        "measured memory-bound share is the workload's traffic against its busy cores' figure",
    )
    thread_spread: float = setting(
        THREAD_SPREAD,
        ge=0,
        le=1,
        help="with measured memory bandwidths (--memory-bandwidth): the share of a remote "
        "page's cost that a pair of its threads on different NUMA nodes pays for the cache "
        "lines they share (an assumption; calibration corrects it)",
    )
    reference_distance: int = setting(
        21,
        gt=10,
        le=255,
        help="SLIT distance that costs the full numa_penalty when a node publishes no "
        "distances (else its farthest pair does)",
    )
    max_cpu_load: float = setting(
        1.0, gt=0, le=1, help="share of the target's online CPUs that may be busy after pinning"
    )
    saturated_load: float = setting(
        0.95,
        gt=0,
        le=1,
        help="busy share of a NUMA node's CPUs above which more threads than CPUs there "
        "count as contention",
    )
    memory_headroom: float = setting(
        1.1, ge=1, le=4, help="free memory needed on the target per byte moved"
    )
    min_memory_bytes: float = setting(
        0.0, ge=0, help="leave workloads with less resident memory than this alone"
    )
    min_cores: float = setting(
        0.1,
        ge=0,
        help="leave workloads that kept fewer cores (but some) busy than this alone",
    )
    migrate_memory: bool = setting(
        True, help="also migrate the workload's remote pages (else only new allocations)"
    )

    def limits(self) -> PinLimits:
        """What bounds a plan of pins made with these settings (capacity and pricing)."""
        return PinLimits(
            self.max_cpu_load,
            self.memory_headroom,
            self.numa_penalty,
            self.reference_distance,
            self.gpu_job_share,
        )
