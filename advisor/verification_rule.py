"""The verification rule's kinds and thresholds, and what it reads from a recommendation.

Which recommendation kinds the advisor service verifies after applying them and how each is
judged (by locality on a NUMA node, or by the progress of a job where it went), the
thresholds of the rule (:class:`VerificationRule`), and the parts of a recommendation a
verification rests on: its target NUMA node, where it puts its workload, the gain of the
starts its move makes possible and the job it makes room for. The rule itself is described
in :mod:`toposcope.advisor.outcomes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toposcope.errors import ConfigError
from toposcope.report.recommendation import Recommendation, RecommendationKind

#: recommendation kinds whose effect the service measures after applying them
VERIFIED_KINDS = frozenset(k for k in RecommendationKind if k != RecommendationKind.CONFIG)
#: kinds judged by the workload's locality on a target NUMA node
NUMA_KINDS = frozenset({RecommendationKind.PIN, RecommendationKind.MIGRATE_MEMORY})
#: kinds that put a job on other GPUs, judged by its progress where it went
JOB_KINDS = frozenset({RecommendationKind.MIGRATE_JOB, RecommendationKind.PLACE})
#: kinds the service can undo when judged harmful (a release gave its GPUs back to the pool)
REVERSIBLE_KINDS = frozenset({*NUMA_KINDS, *JOB_KINDS})

#: GPU utilization below which a fall says nothing about a slow-down
MIN_GPU_UTILIZATION = 0.05


@dataclass(frozen=True)
class VerificationRule:
    """The thresholds of the verification rule (see :mod:`toposcope.advisor.outcomes`)."""

    verify_after_seconds: float
    harm_threshold: float = 0.10
    paid_share: float = 0.5
    min_cores: float = 0.05
    give_up_seconds: float = 86400.0
    reuse_window_seconds: float = 3600.0

    def __post_init__(self) -> None:
        problems = []
        if self.verify_after_seconds < 0:
            problems.append("verify-after must be >= 0")
        if not 0 < self.harm_threshold < 1:
            problems.append("harm threshold must be between 0 and 1")
        if not 0 < self.paid_share <= 1:
            problems.append("paid share must be in (0, 1]")
        if self.min_cores < 0:
            problems.append("min cores must be >= 0")
        if self.reuse_window_seconds < 0:
            problems.append("reuse window must be >= 0")
        if self.give_up_seconds < self.verify_after_seconds:
            problems.append("give-up time must not be shorter than verify-after")
        if problems:
            raise ConfigError("; ".join(problems))


def target_numa(rec: Recommendation) -> int | None:
    """The NUMA node a pin or memory migration moves the workload to (``proposed.mems``)."""
    mems = rec.proposed.get("mems")
    if isinstance(mems, list | tuple) and mems:
        return int(mems[0])
    numa = rec.proposed.get("numa_node")
    return int(numa) if numa is not None else None


def destination(rec: Recommendation) -> tuple[str, tuple[int, ...]]:
    """Where ``rec`` puts its workload (node and GPUs: a move's or placement's ``proposed``),
    or, for a release, the node and the GPUs it gives back.
    """
    if rec.kind in JOB_KINDS:
        node = rec.proposed.get("node") or rec.target.node
        gpus = rec.proposed.get("gpus", rec.target.gpus)
    elif rec.kind == RecommendationKind.RELEASE_IDLE:
        node, gpus = rec.target.node, rec.proposed.get("released") or rec.target.gpus
    else:
        node, gpus = rec.target.node, rec.target.gpus
    return str(node), tuple(int(g) for g in gpus) if isinstance(gpus, list | tuple) else ()


def start_gain(rec: Recommendation) -> float:
    """What ``rec``'s estimate counts for the pending jobs whose start its move makes
    possible (``proposed.starts``, each with its ``gain``): the moved job's own progress,
    which verifies the move, does not show it, so verdicts and calibration leave it out.
    """
    starts = rec.proposed.get("starts")
    if not isinstance(starts, list | tuple):
        return 0.0
    return sum(float(s.get("gain", 0.0) or 0.0) for s in starts if isinstance(s, Mapping))


def made_for(rec: Recommendation) -> str | None:
    """The job ``rec`` makes room for without moving it (its ``proposed.for``: a leaf or NIC
    clearing moving other jobs out of that job's way), or ``None``.
    """
    job = rec.proposed.get("for")
    return job if isinstance(job, str) and job else None
