"""Which pods toposcope may evict: the descheduler's default evictor, then toposcope's opt-in.

:func:`eviction_blockers` follows the ``DefaultEvictor`` filter of the Kubernetes descheduler
(sigs.k8s.io/descheduler ``pkg/framework/plugins/defaultevictor/defaultevictor.go`` with the
helpers of ``pkg/utils/pod.go``), with its defaults (``evictLocalStoragePods``,
``evictSystemCriticalPods`` and ``evictFailedBarePods`` false):

* a pod annotated ``descheduler.alpha.kubernetes.io/evict`` passes every check below;
* no owner reference: a bare pod, never evicted (nothing would recreate it);
* a mirror pod (annotation ``kubernetes.io/config.mirror``) or a static pod
  (``kubernetes.io/config.source`` other than ``api``);
* owned by a DaemonSet;
* terminating (``metadata.deletionTimestamp`` set);
* system-critical priority (``spec.priority`` >= 2000000000);
* local storage: ``IsPodWithLocalStorage`` is true for any ``hostPath`` volume and for any
  ``emptyDir`` volume, whatever its ``medium`` (memory-backed ones included).

``descheduler.alpha.kubernetes.io/prefer-no-eviction`` (descheduler >= 0.32, evicted only as
a last resort) is honoured as "do not": toposcope's moves are never a last resort.

Then :func:`migration_blockers` adds toposcope's own rule: the pod (or its template, which its
labels and annotations come from) opted in with ``toposcope.io/migratable: "true"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toposcope.kube.annotations import (
    CONFIG_SOURCE,
    DESCHEDULER_EVICT,
    DESCHEDULER_PREFER_NO_EVICTION,
    MIGRATABLE,
    MIRROR_POD,
    SYSTEM_CRITICAL_PRIORITY,
    truthy,
)


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    found = pod.get("metadata", {}).get("annotations") or {}
    return found if isinstance(found, Mapping) else {}


def owner_references(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's owner references (an empty list for a bare pod)."""
    refs = pod.get("metadata", {}).get("ownerReferences") or []
    return [ref for ref in refs if isinstance(ref, Mapping)]


def has_local_storage(pod: Mapping[str, Any]) -> bool:
    """The descheduler's ``IsPodWithLocalStorage``: any hostPath or emptyDir volume."""
    volumes = pod.get("spec", {}).get("volumes") or []
    return any(
        isinstance(v, Mapping) and (v.get("hostPath") is not None or v.get("emptyDir") is not None)
        for v in volumes
    )


def eviction_blockers(pod: Mapping[str, Any]) -> list[str]:
    """Why the descheduler's default evictor would not evict ``pod`` (empty: it would)."""
    annotations = _annotations(pod)
    if DESCHEDULER_EVICT in annotations:
        return []
    why = []
    owners = owner_references(pod)
    if not owners:
        why.append("it is a bare pod without a controller (nothing would recreate it)")
    if MIRROR_POD in annotations:
        why.append("it is a mirror pod")
    source = annotations.get(CONFIG_SOURCE)
    if source is not None and source != "api":
        why.append("it is a static pod")
    if any(ref.get("kind") == "DaemonSet" for ref in owners):
        why.append("it belongs to a DaemonSet")
    if pod.get("metadata", {}).get("deletionTimestamp"):
        why.append("it is terminating")
    priority = pod.get("spec", {}).get("priority")
    if isinstance(priority, int) and priority >= SYSTEM_CRITICAL_PRIORITY:
        why.append("it has system-critical priority")
    if has_local_storage(pod):
        why.append("it has local storage (an emptyDir or hostPath volume)")
    if DESCHEDULER_PREFER_NO_EVICTION in annotations:
        why.append(f"it is annotated {DESCHEDULER_PREFER_NO_EVICTION}")
    return why


def migration_blockers(pod: Mapping[str, Any]) -> list[str]:
    """Why toposcope may not evict ``pod`` to move it (empty: it may)."""
    why = eviction_blockers(pod)
    if not truthy(_annotations(pod).get(MIGRATABLE)):
        why.append(f'it did not opt in ({MIGRATABLE}: "true" on its pod template)')
    return why
