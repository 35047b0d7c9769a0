"""Reads what :func:`~toposcope.kubeapi.claim_advice.propose` needs for one pod, through the
core API client: the pod, each of its ResourceClaims (generated from a template: named in
``status.resourceClaimStatuses``), their templates, the pod's controller (a ReplicaSet is
followed to its Deployment) and the node's published devices.

``resource.k8s.io`` is read in ``v1`` (Kubernetes 1.34+), else ``v1beta2``, whose claims and
templates have the same shape (``exactly`` requests); a cluster serving only ``v1beta1`` is
refused with a clear message rather than advised in the wrong shape. Every name taken from an
answer is checked before it goes into a URL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toposcope.kubeapi.claim_advice import ClaimChange, NoChange, Owner, propose
from toposcope.kubeapi.claim_placement import (
    DeviceFilter,
    Placement,
    class_filter,
    placements,
    requests_of,
)
from toposcope.kubeapi.client import KubeApi, KubeApiError, KubeApiStatusError
from toposcope.kubeapi.nri_advice import NriAdvice, NriPolicy, advise
from toposcope.kubeapi.resourceslices import cluster_devices, devices_of, pages, read_slices

#: a namespace (DNS label) and an object name (DNS subdomain)
_NAMESPACE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
#: the versions of claims and templates advised (v1beta1 has another request shape)
CLAIM_VERSIONS = ("v1", "v1beta2")
_OWNERS = {
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
}


def checked(value: object, pattern: re.Pattern[str], what: str) -> str:
    """``value`` when it matches ``pattern``; :class:`KubeApiError` naming ``what`` otherwise."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise KubeApiError(f"{what} {str(value)[:80]!r} is not a valid Kubernetes name")
    return value


#: placements kept per claim of a pending pod
MAX_PLACEMENTS = 3


@dataclass(frozen=True)
class PodAdvice:
    """For one pod: the change per claim, and why no change for the others; for a pending
    pod, the best placements per claim reference (:mod:`.claim_placement`).
    """

    changes: tuple[ClaimChange, ...]
    skipped: tuple[str, ...]
    placements: tuple[tuple[str, tuple[Placement, ...]], ...] = ()
    nri: NriAdvice | None = None
    owner: Owner | None = None


def _controller(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def read_owner(api: KubeApi, namespace: str, pod: Mapping[str, Any]) -> Owner | None:
    """The pod's controller, a ReplicaSet followed to its Deployment; ``None`` without one.
    A kind toposcope does not patch is returned with an empty object.
    """
    found = _controller(pod.get("metadata") or {})
    for _ in range(2):
        if found is None:
            return None
        kind, name = found
        if kind not in _OWNERS:
            return Owner(kind, name, {})
        path = _OWNERS[kind].format(ns=namespace, name=checked(name, _NAME, f"{kind} name"))
        owner = api.get(path)
        if kind != "ReplicaSet":
            return Owner(kind, name, owner)
        found = _controller(owner.get("metadata") or {}) or ("ReplicaSet", name)
        if found[0] == "ReplicaSet":
            return Owner("ReplicaSet", name, owner)
    return None


def _claims_version(api: KubeApi) -> str:
    for version in CLAIM_VERSIONS:
        try:
            api.get(f"/apis/resource.k8s.io/{version}")
        except KubeApiStatusError as exc:
            if exc.code == 404:
                continue
            raise
        return version
    raise KubeApiError(
        "the API server serves resource.k8s.io in neither v1 nor v1beta2 (Kubernetes 1.33+): "
        "no ResourceClaimTemplate advice"
    )


def _claim_users(pod: Mapping[str, Any], reference: str) -> list[str]:
    """The containers of ``pod`` that use its claim ``reference``."""
    return [
        str(c.get("name"))
        for c in (pod.get("spec") or {}).get("containers") or []
        if any(
            isinstance(u, Mapping) and u.get("name") == reference
            for u in (c.get("resources") or {}).get("claims") or []
        )
    ]


def advise_pod(
    api: KubeApi, namespace: str, pod_name: str, nri: NriPolicy | None = None
) -> PodAdvice:
    """The change for each of the pod's template-made claims (see the module docstring);
    with ``nri``, the pinning annotations of that nri-plugins policy for the containers that
    use the claims.
    """
    ns = checked(namespace, _NAMESPACE, "namespace")
    name = checked(pod_name, _NAME, "pod name")
    pod = api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    node = (pod.get("spec") or {}).get("nodeName")
    version = _claims_version(api)
    if not node:
        return place_pending(api, ns, pod, version)
    _, slices = read_slices(api, str(node))
    devices = devices_of(slices, str(node))
    owner = read_owner(api, ns, pod)
    base = f"/apis/resource.k8s.io/{version}/namespaces/{ns}"
    changes: list[ClaimChange] = []
    skipped: list[str] = []
    pinned: list[tuple[str, str]] = []
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        reference = str(status.get("name"))
        generated = status.get("resourceClaimName")
        if not generated:
            skipped.append(f"claim {reference}: no ResourceClaim made for it")
            continue
        claim = api.get(f"{base}/resourceclaims/{checked(generated, _NAME, 'claim name')}")
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        addresses = [
            found.pci_bus_id
            for r in results
            if isinstance(r, Mapping)
            and (
                found := devices.get(
                    (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
                )
            )
        ]
        address = next((a for a in addresses if a), "")
        pinned.extend((c, address) for c in _claim_users(pod, reference))
        template_name = next(
            (
                e.get("resourceClaimTemplateName")
                for e in (pod.get("spec") or {}).get("resourceClaims") or []
                if isinstance(e, Mapping) and e.get("name") == reference
            ),
            None,
        )
        if not template_name:
            skipped.append(f"claim {reference}: not made from a template")
            continue
        template = api.get(
            f"{base}/resourceclaimtemplates/{checked(template_name, _NAME, 'template name')}"
        )
        try:
            changes.append(propose(pod, reference, claim, template, devices, owner))
        except NoChange as exc:
            skipped.append(f"claim {reference}: {exc}")
    advice = advise(nri, dict.fromkeys(pinned).keys()) if nri is not None and pinned else None
    return PodAdvice(tuple(changes), tuple(skipped), (), advice, owner)


def place_pending(api: KubeApi, namespace: str, pod: Mapping[str, Any], version: str) -> PodAdvice:
    """For a pod not scheduled yet: per template-made claim, the nodes and device groups
    where it fits best (free devices: those no ResourceClaim's allocation names).
    """
    group = f"/apis/resource.k8s.io/{version}"
    _, slices = read_slices(api, None)
    devices, nodes = cluster_devices(slices)
    allocated = [
        (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for claim in pages(api, f"{group}/resourceclaims?")
        for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        )
        or []
        if isinstance(r, Mapping)
    ]
    found: list[tuple[str, tuple[Placement, ...]]] = []
    skipped: list[str] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        reference = str(entry.get("name"))
        template_name = entry.get("resourceClaimTemplateName")
        if not template_name:
            skipped.append(f"claim {reference}: not made from a template")
            continue
        template = api.get(
            f"{group}/namespaces/{namespace}/resourceclaimtemplates/"
            f"{checked(template_name, _NAME, 'template name')}"
        )
        requests = requests_of(template)
        filters: dict[str, DeviceFilter] = {}
        for request in requests:
            device_class = api.get(
                f"{group}/deviceclasses/{checked(request.device_class, _NAME, 'class name')}"
            )
            wanted = class_filter(device_class)
            if wanted is None:
                break
            filters[request.device_class] = wanted
        if len(filters) < len({r.device_class for r in requests}) or not requests:
            skipped.append(f"claim {reference}: a device class names no driver toposcope reads")
            continue
        if any(f.partial for f in filters.values()):
            skipped.append(
                f"claim {reference}: device class selectors beyond driver and type are not "
                "evaluated"
            )
        ranked = placements(requests, filters, devices, allocated, nodes)
        if not ranked:
            skipped.append(f"claim {reference}: no node has the free devices it asks for")
        found.append((reference, tuple(ranked[:MAX_PLACEMENTS])))
    return PodAdvice((), tuple(skipped), tuple(found))


__all__ = [
    "CLAIM_VERSIONS",
    "MAX_PLACEMENTS",
    "PodAdvice",
    "advise_pod",
    "checked",
    "place_pending",
    "read_owner",
]
