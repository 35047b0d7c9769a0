"""Slurm's running jobs as placements on the fabric, for ``toposcope slurm exporter --fabric-*``.

Each running job becomes a :class:`~toposcope.fabric.spread.JobPlacement` named as the node
exporters name its processes (``workload="slurm-job-<id>"``, so the per-job fabric series join
the node exporters' workload series on ``workload``), with its partition bounded as every
queue label is, and per node the GPU indices Slurm gave it. A job whose allocations name no
GPU index anywhere (a reader that does not say, or a CPU job) has its indices unknown, so its
rail alignment is left out rather than claimed.
"""

from __future__ import annotations

from collections.abc import Iterable

from toposcope.fabric.spread import JobPlacement, NodeShare
from toposcope.identity.workload import bounded_label_value
from toposcope.slurm.records import RunningJob
from toposcope.slurm.views import workload_name

#: the ``scheduler`` label of the per-job fabric series this backend publishes
SCHEDULER = "slurm"


def placement(job: RunningJob) -> JobPlacement:
    """Where one running job runs, per node."""
    known = any(allocation.gpus for allocation in job.allocations)
    shares = tuple(
        NodeShare(
            allocation.node,
            len(allocation.gpus),
            tuple(allocation.gpus) if known else None,
        )
        for allocation in job.allocations
    )
    return JobPlacement(
        SCHEDULER, bounded_label_value(job.partition), workload_name(job.job_id), shares
    )


def placements(running: Iterable[RunningJob]) -> list[JobPlacement]:
    """The placements of the multi-node jobs among ``running`` (one-node jobs left out)."""
    return [placement(job) for job in running if len(set(job.nodes)) > 1]
