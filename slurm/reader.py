"""Read a Slurm cluster's nodes, running jobs and pending jobs, from slurmrestd or the commands.

Two readers give the same :class:`~toposcope.slurm.records.ClusterState`:

* :class:`RestReader` asks slurmrestd (``GET /slurm/v0.0.38/nodes`` and ``/jobs``) and takes a
  running job's CPUs from ``job_resources`` (sockets x cores) and its GPUs from
  ``gres_detail``;
* :class:`CommandReader` runs ``sinfo --json`` and ``squeue --json`` (the same schema), then
  ``scontrol -d show job`` for the exact ``CPU_IDs`` and ``GRES=gpu:N(IDX:...)`` of each node.
  ``squeue --json`` in Slurm 22.05 ignores ``-j`` and ``-t``, so jobs are filtered here.

Jobs that are neither running nor pending (completing, suspended, finished) are kept with
their state only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.decode import (
    decode_node,
    decode_pending,
    decode_running,
    job_id_of,
    job_state,
    records_of,
)
from toposcope.slurm.records import ClusterState, JobAllocation, RunningJob
from toposcope.slurm.rest import SlurmRestClient
from toposcope.slurm.scontrol import parse_job_details


class SlurmReader(Protocol):
    """Anything that reads the cluster's state."""

    @property
    def source(self) -> str:
        """Where the state comes from, for reports."""

    def read(self) -> ClusterState:
        """The nodes, running jobs and pending jobs now."""


def build_state(
    node_records: Sequence[object],
    job_records: Sequence[object],
    *,
    now: float,
    source: str,
    details: Mapping[int, tuple[JobAllocation, ...]] | None = None,
) -> ClusterState:
    """A cluster state from v0.0.38 node and job records.

    With ``details`` (``scontrol -d show job``'s allocations by job id), a running job's
    allocation on each of its nodes is taken from there; nodes the details do not cover keep
    the allocation derived from ``job_resources``.
    """
    nodes = tuple(sorted((decode_node(r) for r in node_records), key=lambda n: n.name))
    by_name = {n.name: n for n in nodes}
    running: list[RunningJob] = []
    pending = []
    others: list[tuple[int, str]] = []
    for record in job_records:
        state = job_state(record)
        if state == "RUNNING":
            job = decode_running(record, by_name, now)
            if details and job.job_id in details:
                job = _with_details(job, details[job.job_id])
            running.append(job)
        elif state == "PENDING":
            pending.append(decode_pending(record, now))
        else:
            others.append((job_id_of(record), state))
    return ClusterState(
        nodes=nodes,
        running=tuple(sorted(running, key=lambda j: j.job_id)),
        pending=tuple(sorted(pending, key=lambda j: j.job_id)),
        read_at=now,
        source=source,
        other_jobs=len(others),
        other_states=tuple(sorted(others)),
    )


def _with_details(job: RunningJob, detailed: tuple[JobAllocation, ...]) -> RunningJob:
    """``job`` with the allocations of ``detailed`` on the nodes it runs on (others ignored)."""
    exact = {a.node: a for a in detailed}
    allocations = tuple(exact.get(a.node, a) for a in job.allocations)
    return dataclasses.replace(job, allocations=allocations)


class RestReader:
    """Reads through slurmrestd."""

    def __init__(self, client: SlurmRestClient, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self._clock = clock

    @property
    def source(self) -> str:
        """``slurmrestd <URL>``."""
        return f"slurmrestd {self.client.url}"

    def read(self) -> ClusterState:
        """Nodes and jobs from ``/nodes`` and ``/jobs``."""
        nodes = records_of(self.client.get("nodes"), "nodes", "slurmrestd /nodes")
        jobs = records_of(self.client.get("jobs"), "jobs", "slurmrestd /jobs")
        return build_state(nodes, jobs, now=self._clock(), source=self.source)


class CommandReader:
    """Reads through ``sinfo``, ``squeue`` and ``scontrol``."""

    def __init__(self, commands: SlurmCommands, clock: Callable[[], float] = time.time) -> None:
        self.commands = commands
        self._clock = clock

    @property
    def source(self) -> str:
        """``commands`` (and the SLURM_CONF used)."""
        return self.commands.source

    def read(self) -> ClusterState:
        """Nodes from ``sinfo --json``, jobs from ``squeue --json``, CPU ids from scontrol."""
        nodes = records_of(self.commands.json("sinfo", "--json"), "nodes", "sinfo --json")
        jobs = records_of(self.commands.json("squeue", "--json"), "jobs", "squeue --json")
        text = self.commands.run("scontrol", "-d", "show", "job")
        details = {
            job_id: allocations for job_id, (_, allocations) in parse_job_details(text).items()
        }
        return build_state(nodes, jobs, now=self._clock(), source=self.source, details=details)
