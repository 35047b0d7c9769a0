"""Pods and nodes as the resource-manager contract's workloads and nodes.

A workload is a pod, named ``namespace/name``. Pending pods (gated ones included) are
``pending`` with the GPUs they request (``nvidia.com/gpu`` limits), so the advisor's
placement policy sees them; running pods hold an allocation on their node. The GPU device
ids are the device plugin's and are not read here.
"""

from __future__ import annotations

import re
from typing import Any

from toposcope.identity.names import is_node_name
from toposcope.rm import Allocation, NodeView, ResourceManagerError, WorkloadState, WorkloadView

#: the extended resource NVIDIA's device plugin advertises
GPU_RESOURCE = "nvidia.com/gpu"
#: a namespace or pod name: an RFC 1123 subdomain (pods) or label (namespaces)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

_STATES = {"Pending": WorkloadState.PENDING, "Running": WorkloadState.RUNNING}


def split_workload(workload: str) -> tuple[str, str]:
    """``namespace/name`` of a pod, checked before it goes into a URL (400 otherwise)."""
    namespace, slash, name = workload.partition("/")
    if (
        not slash
        or len(namespace) > 63
        or not _DNS_LABEL.fullmatch(namespace)
        or len(name) > 253
        or not _DNS_SUBDOMAIN.fullmatch(name)
    ):
        raise ResourceManagerError(
            f"workload {workload[:120]!r} is not namespace/pod (RFC 1123 names)", 400, "workload"
        )
    return namespace, name


def workload_name(pod: dict[str, Any]) -> str:
    """``namespace/name`` of ``pod``."""
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def gpus_requested(pod: dict[str, Any]) -> int:
    """The GPUs the pod's containers ask for (their ``nvidia.com/gpu`` limits)."""
    total = 0
    for container in pod.get("spec", {}).get("containers") or []:
        value = ((container.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE, 0)
        try:
            total += int(value)
        except (TypeError, ValueError):
            continue
    return total


def workload_view(pod: dict[str, Any]) -> WorkloadView | None:
    """The pod as a workload (``None`` for one whose names the contract cannot carry)."""
    node = pod.get("spec", {}).get("nodeName")
    phase = pod.get("status", {}).get("phase", "")
    state = _STATES.get(phase, WorkloadState.DONE)
    try:
        split_workload(workload_name(pod))
    except ResourceManagerError:
        return None
    allocation = Allocation(node) if isinstance(node, str) and is_node_name(node) else None
    return WorkloadView(
        workload_name(pod),
        "kubernetes",
        state,
        allocation if state is not WorkloadState.PENDING else None,
        gpus_requested=min(gpus_requested(pod), 4095),
    )


def node_view(node: dict[str, Any]) -> NodeView | None:
    """A node with its labels and allocatable GPUs (``None`` for an invalid name)."""
    name = node.get("metadata", {}).get("name")
    if not is_node_name(name):
        return None
    labels = node.get("metadata", {}).get("labels") or {}
    allocatable = (node.get("status", {}).get("allocatable") or {}).get(GPU_RESOURCE, "0")
    gpus = int(allocatable) if str(allocatable).isdigit() else 0
    return NodeView(str(name), {"gpus": gpus}, {str(k): str(v) for k, v in labels.items()})
