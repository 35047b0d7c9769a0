"""A cluster state as text for people, or as JSON for programs (``toposcope slurm show``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from toposcope.cpulist import format_cpulist
from toposcope.slurm.records import ClusterState


def _duration(seconds: float | None) -> str:
    """``1d02:03:04`` style, or ``unlimited`` for ``None``."""
    if seconds is None:
        return "unlimited"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{days}d" if days else "") + f"{hours:02d}:{minutes:02d}:{secs:02d}"


def state_to_json(state: ClusterState) -> dict[str, Any]:
    """The state as plain JSON types (field names as in :mod:`toposcope.slurm.records`)."""
    return dataclasses.asdict(state)


def state_to_text(state: ClusterState) -> str:
    """Nodes, running jobs (with CPU ids and GPU indices per node) and pending jobs."""
    lines = [f"Slurm from {state.source}"]
    lines.append(f"Nodes ({len(state.nodes)}):")
    for node in state.nodes:
        flags = f" [{','.join(node.flags)}]" if node.flags else ""
        gpus = f", GPUs in use {format_cpulist(node.gpus_used) or '-'} of {node.gpus}"
        lines.append(
            f"  {node.name}: {node.state}{flags}, {node.sockets} sockets x "
            f"{node.cores_per_socket} cores x {node.threads_per_core} threads"
            + (gpus if node.gpus else "")
        )
    lines.append(f"Running jobs ({len(state.running)}):")
    for job in state.running:
        lines.append(
            f"  {job.job_id} {job.name!r} user {job.user} account {job.account or '-'} "
            f"partition {job.partition}, time left {_duration(job.time_left_s)}"
        )
        for allocation in job.allocations:
            lines.append(
                f"    {allocation.node}: CPUs {format_cpulist(allocation.cpus) or '-'}, "
                f"GPUs {format_cpulist(allocation.gpus) or '-'}"
            )
    lines.append(f"Pending jobs ({len(state.pending)}):")
    for pending in state.pending:
        gpus = (
            f"{pending.gpus_per_node} GPUs/node"
            if pending.gpus_per_node
            else f"{pending.gpus_per_job} GPUs"
        )
        lines.append(
            f"  {pending.job_id} {pending.name!r} user {pending.user} partition "
            f"{pending.partition}: {pending.nodes} nodes, {pending.cpus} CPUs, {gpus}; "
            f"{pending.reason}, waiting {_duration(pending.wait_s)}"
        )
    return "\n".join(lines)
