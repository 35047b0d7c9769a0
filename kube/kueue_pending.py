"""Pending multi-node jobs (Kueue's, and gated pods'), as the contract's pending workloads.

A job Kueue has not admitted is suspended and has no pods yet, so the pods the backend lists
(:mod:`.views`) do not show it. Its Kueue ``Workload`` does: each PodSet has a ``count`` of
pods and a pod template whose containers ask for GPUs. :func:`pending_jobs` turns each
Workload without quota reserved, owned by one of the job kinds the fabric placement steers
(:data:`~toposcope.kube.fabric_steer.JOB_LABELS`; a pod group's Workload is its own), into a
``pending`` workload named ``NAMESPACE:KIND:NAME`` (as :mod:`toposcope.fabric.kube_jobs` names
running jobs) asking for the PodSets' GPUs in all. Only jobs asking for more GPUs than the
largest node has are listed: a job that fits one node is Kueue's to place, and its pods
are placed one by one once they exist.

Without Kueue, the pods of a multi-node job exist and wait behind the ``toposcope.io/placement``
gate; :func:`gated_jobs` groups them by their job label into one pending job, so that the
fabric placement places them together rather than pod by pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toposcope.kube.annotations import PLACEMENT_GATE
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


def job_name(workload: Mapping[str, Any], kind: str = "") -> str | None:
    """``NAMESPACE:KIND:NAME`` of the job a Workload stands for, by its controller (an
    object of ``kind`` is named by itself); ``None``: not one steered.
    """
    meta = workload.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    refs = [
        r
        for r in meta.get("ownerReferences") or []
        if isinstance(r, Mapping) and r.get("controller") is True
    ]
    if kind:
        name = str(meta.get("name") or "")
    elif refs:
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


def gated_jobs(pods: list[dict[str, Any]], largest_node: int) -> dict[str, tuple[int, set[str]]]:
    """The multi-node jobs whose pods wait behind the ``toposcope.io/placement`` gate without
    Kueue: ``NAMESPACE:KIND:NAME`` (by the kind's job label, :data:`JOB_LABELS`) -> the GPUs
    of its gated pods and their ``namespace/pod`` names; only jobs asking for more GPUs than
    the largest node has (one that fits a node is placed pod by pod).
    """
    found: dict[str, tuple[int, set[str]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
        if PLACEMENT_GATE not in gates:
            continue
        labels = meta.get("labels") or {}
        for kind, label in JOB_LABELS.items():
            value = labels.get(label)
            if not isinstance(value, str):
                continue
            name = job_name({"metadata": {"namespace": meta.get("namespace"), "name": value}}, kind)
            if name is not None:
                gpus, members = found.get(name, (0, set()))
                members.add(f"{meta.get('namespace')}/{meta.get('name')}")
                found[name] = (gpus + gpus_requested(pod), members)
            break
    return {name: job for name, job in found.items() if job[0] > largest_node}


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


__all__ = ["gated_jobs", "job_name", "pending_jobs", "workload_gpus"]
