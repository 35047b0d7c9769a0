"""job-migration's settings: which jobs it considers, what a move costs and saves, and what it
leaves alone.

A job is considered when it holds at least ``min_gpus`` GPUs and is busy (``min_utilization``);
a move pays when what it saves over ``remaining_seconds`` beats ``checkpoint_restore_seconds``;
``sensitivity`` scales the link slowdown of the prior. The rules that read them are in
:mod:`~toposcope.advisor.policies.job_migration` and the modules it names.
"""

from __future__ import annotations

from dataclasses import dataclass

from toposcope.advisor.policies.base import PolicySettings, setting


@dataclass(frozen=True)
class JobMigrationSettings(PolicySettings):
    """Settings of the job-migration policy."""

    min_gpus: int = setting(2, ge=2, le=64, help="only jobs with at least this many GPUs")
    min_utilization: float = setting(
        0.05, ge=0, le=1, help="only busy jobs: mean GPU utilization over the window"
    )
    checkpoint_restore_seconds: float = setting(
        600.0, ge=0, help="what a checkpoint, move and restore costs the job"
    )
    remaining_seconds: float = setting(
        6 * 3600.0, gt=0, help="expected remaining run time of a job (not in the metrics)"
    )
    sensitivity: float = setting(
        1.0, ge=0, le=2, help="how communication-bound jobs are (scales the link slowdown)"
    )
    allow_cross_node: bool = setting(True, help="also consider free GPUs on other nodes")
    min_shared_utilization: float = setting(
        0.3,
        ge=0,
        le=1,
        help="a GPU held by several workloads is worth separating when its mean utilization "
        "is at least this",
    )
    pin_to_gpu_numa: bool = setting(
        True, help="also restrict a moved job's CPUs and memory to its new GPUs' NUMA node"
    )
    min_time_left_seconds: float = setting(
        1800.0,
        ge=0,
        le=7 * 86400.0,
        help="leave a job alone (plain move, defragmentation, moved out of the way) whose "
        "scheduler says it ends sooner than this (toposcope_queue_job_time_left_seconds; "
        "without the series every job counts as having time)",
    )
    move_between_pcie_tiers: bool = setting(
        False,
        help="also move a job whose worst link only goes from one PCIe path of a socket to "
        "another (PXB, PHB or NODE to PIX or PXB): a gap that varies by platform, so a "
        "note by default unless both pairs' bandwidths are measured (--p2p-bandwidth)",
    )
