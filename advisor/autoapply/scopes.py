"""Who each recommendation's workload belongs to, for the loop's include and exclude rules.

Kubernetes facts come from the model the recommendations were made from (the metrics
carry a workload's ``namespace``, ``pod``, ``container`` and ``comm``; the report filter's
labels, :func:`toposcope.advisor.workload_filter.workload_labels`). Slurm's partition and
account come from the resource manager, when it is the Slurm backend: it reads the
cluster's jobs (running and pending) and each carries both. A resource manager that cannot
tell leaves them empty, so that a rule naming partitions or accounts keeps such workloads
out rather than guessing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from toposcope.advisor.autoapply.limits import WorkloadScope
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.workload_filter import workload_labels
from toposcope.report.recommendation import Recommendation
from toposcope.rm import ResourceManager, ResourceManagerError

LOG = logging.getLogger("toposcope.advisor.autoapply")

#: the workload name of a Slurm job, as every part names it (:mod:`toposcope.identity.workload`)
SLURM_WORKLOAD = "slurm-job-{}"
#: workload name -> (partition, account), as a resource manager told
JobGroups = Mapping[str, tuple[str, str]]


def slurm_groups(manager: ResourceManager) -> dict[str, tuple[str, str]]:
    """Each Slurm job's (partition, account) by workload name, read through ``manager``
    when it is the Slurm backend (anything else: none).
    """
    read = getattr(manager, "read", None)
    if read is None or not callable(read):
        return {}
    try:
        state: Any = read()
    except (ResourceManagerError, AdvisorConnectionError, OSError) as exc:
        LOG.warning("the jobs' partitions and accounts could not be read: %s", exc)
        return {}
    jobs = [*getattr(state, "running", ()), *getattr(state, "pending", ())]
    return {SLURM_WORKLOAD.format(int(j.job_id)): (str(j.partition), str(j.account)) for j in jobs}


def scope_of(
    rec: Recommendation,
    model: ClusterModel | None,
    groups: JobGroups,
    labels: Mapping[str, Mapping[str, str]] | None = None,
) -> WorkloadScope:
    """The scope of ``rec``'s workload from ``model`` (or precomputed ``labels``) and the
    Slurm ``groups``.
    """
    name = rec.target.workload or ""
    if labels is None:
        labels = workload_labels(model) if model is not None else {}
    known = dict(
        labels.get(f"{rec.target.node}/{name}", {"workload": name, "node": rec.target.node})
    )
    partition, account = groups.get(name, ("", ""))
    return WorkloadScope(known.get("namespace", ""), partition, account, known)
