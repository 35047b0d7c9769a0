"""Where a simulated workload's cgroup lives, so that the exporter names it as a real one.

Most workloads are systemd services (``/system.slice/<unit>``). A workload mirrored from Slurm
is called ``slurm-job-<id>`` and lives where slurmstepd puts a job under cgroup v2
(``/system.slice/slurmstepd.scope/job_<id>``), so the exporter's workload collector names it
``slurm-job-<id>`` with its ``slurm_job_id``, the name Slurm's resource-manager backend uses.
A part of a multi-node Slurm job (``slurm-job-<id>-part<k>``, one per node:
:mod:`toposcope.sim.slurm_gangs`) lives in the same job's cgroup on its own node, so that
every node names its share of the job ``slurm-job-<id>``, as Slurm's nodes do.
"""

from __future__ import annotations

import re

_SLURM_JOB = re.compile(r"slurm-job-([0-9]{1,12})(?:-part[0-9]{1,3})?")


def workload_cgroup(name: str) -> str:
    """The cgroup path (from the hierarchy's root, no leading slash) of workload ``name``."""
    match = _SLURM_JOB.fullmatch(name)
    if match:
        return f"system.slice/slurmstepd.scope/job_{match.group(1)}"
    return f"system.slice/{name}"
