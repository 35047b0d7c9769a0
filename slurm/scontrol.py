"""Read the exact per-node allocations out of ``scontrol -d show job`` text.

Slurm 22.05 has no ``scontrol --json``, and ``squeue --json`` only gives cores per socket; the
detailed text gives each node's CPU ids and GPU indices as Slurm tracks them::

    JobId=4 JobName=two node
       ...
       JobState=RUNNING Reason=None Dependency=(null)
       ...
         Nodes=n1 CPU_IDs=2 Mem=0 GRES=gpu:1(IDX:1)
         Nodes=n2 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)

Records are separated by blank lines and start with ``JobId=``; a detail line may name several
nodes at once (``Nodes=n[1-2]``) when their allocations are the same. A detail line must match
as a whole; the reader keeps only the nodes of the job's own node list (from ``squeue``), so
text a user puts in a job's name cannot move the job elsewhere.
"""

from __future__ import annotations

import re

from toposcope.slurm.errors import SlurmFormatError
from toposcope.slurm.gres import gpu_indices, parse_gres
from toposcope.slurm.hostlist import expand_hostlist, parse_indices
from toposcope.slurm.records import JobAllocation

_NO_JOBS = "No jobs in the system"
_JOB_ID_RE = re.compile(r"JobId=([0-9]{1,12})\b")
_STATE_RE = re.compile(r"^\s+JobState=([A-Z_]+)\b", re.MULTILINE)
_DETAIL_RE = re.compile(r"\s+Nodes=(\S+) CPU_IDs=(\S*) Mem=[0-9]+ GRES=(\S*)")


def parse_job_details(text: str) -> dict[int, tuple[str, tuple[JobAllocation, ...]]]:
    """Job id -> (state, allocations per node) for every job in ``scontrol -d show job`` text.

    Jobs without detail lines (pending, finished) get no allocations. Raises
    :class:`SlurmFormatError` on a record that does not start with ``JobId=`` or holds a
    malformed detail line.
    """
    jobs: dict[int, tuple[str, tuple[JobAllocation, ...]]] = {}
    if text.strip() == _NO_JOBS:
        return jobs
    for record in re.split(r"\n\s*\n", text):
        if not record.strip():
            continue
        head = _JOB_ID_RE.match(record.lstrip())
        if head is None:
            raise SlurmFormatError(f"scontrol record does not start with JobId=: {record[:60]!r}")
        job_id = int(head.group(1))
        state = _STATE_RE.search(record)
        allocations: list[JobAllocation] = []
        for line in record.splitlines():
            if not line.lstrip().startswith("Nodes="):
                continue
            detail = _DETAIL_RE.fullmatch(line)
            if detail is None:
                raise SlurmFormatError(f"job {job_id}: malformed detail line {line.strip()[:80]!r}")
            cpus = parse_indices(detail.group(2), f"CPU_IDs of job {job_id}")
            gpus = gpu_indices(parse_gres(detail.group(3)))
            allocations += [
                JobAllocation(node=node, cpus=cpus, gpus=gpus)
                for node in expand_hostlist(detail.group(1))
            ]
        jobs[job_id] = (state.group(1) if state else "", tuple(allocations))
    return jobs
