"""Pending multi-node jobs of Kueue, as the resource-manager contract's pending workloads.

A job Kueue has not admitted is suspended and has no pods yet, so the pods the backend lists
(:mod:`.views`) do not show it. Its Kueue ``Workload`` does: each PodSet has a ``count`` of
pods and a pod template whose containers ask for GPUs. :func:`pending_jobs` turns each
Workload without quota reserved, owned by one of the job kinds the fabric placement steers
(:data:`~toposcope.kube.fabric_steer.JOB_LABELS`; a pod group's Workload is its own), into a
``pending`` workload named ``NAMESPACE:KIND:NAME`` (as :mod:`toposcope.fabric.kube_jobs` names
running jobs) asking for the PodSets' GPUs in all. Only jobs asking for more GPUs than the
largest node has are listed: a job that fits one node is Kueue's to place, and its pods
are placed one by one once they exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toposcope.kube.fabric_kueue import quota_reserved
from toposcope.kube.fabric_steer import JOB_LABELS
from toposcope.kube.views import gpus_requested, split_workload
from toposcope.rm import ResourceManagerError, WorkloadState, WorkloadView

#: the most GPUs one pending workload may ask for (the contract's bound)
MAX_GPUS = 4095
#: the Workload condition of a finished one
FINISHED = "Finished"


def _condition(workload: Mapping[str, Any], kind: str) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
        for c in conditions
    )


def job_name(workload: Mapping[str, Any]) -> str | None:
    """``NAMESPACE:KIND:NAME`` of the job a Workload stands for (``None``: not one steered)."""
    meta = workload.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    refs = [
        r
        for r in meta.get("ownerReferences") or []
        if isinstance(r, Mapping) and r.get("controller") is True
    ]
    if refs:
        kind, name = str(refs[0].get("kind") or ""), str(refs[0].get("name") or "")
    else:
        kind, name = "Workload", str(meta.get("name") or "")
    if kind not in JOB_LABELS:
        return None
    try:
        split_workload(f"{namespace}/{name}")
    except ResourceManagerError:
        return None
    return f"{namespace}:{kind}:{name}"


def workload_gpus(workload: Mapping[str, Any]) -> int:
    """The GPUs all pods of a Workload's PodSets ask for."""
    total = 0
    for podset in (workload.get("spec") or {}).get("podSets") or []:
        if not isinstance(podset, Mapping):
            continue
        count = podset.get("count")
        template = podset.get("template")
        if isinstance(count, int) and not isinstance(count, bool) and isinstance(template, dict):
            total += max(0, count) * gpus_requested(template)
    return total


def pending_jobs(workloads: list[dict[str, Any]], largest_node: int) -> list[WorkloadView]:
    """The pending multi-node jobs among Kueue ``workloads`` (module docstring)."""
    found: dict[str, WorkloadView] = {}
    for workload in workloads:
        if quota_reserved(workload) or _condition(workload, FINISHED):
            continue
        name = job_name(workload)
        gpus = workload_gpus(workload)
        if name is None or gpus <= largest_node:
            continue
        found[name] = WorkloadView(
            name, "kubernetes", WorkloadState.PENDING, None, gpus_requested=min(gpus, MAX_GPUS)
        )
    return [found[name] for name in sorted(found)]


__all__ = ["job_name", "pending_jobs", "workload_gpus"]
