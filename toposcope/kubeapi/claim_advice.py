"""Advice in DRA's own terms: the ResourceClaimTemplate change that aligns a pod's devices.

A pod whose DRA devices sit far from each other or from its CPUs
(:mod:`toposcope.host.device_alignment`) was allocated that way because its claim asked for
nothing better: the scheduler allocates every device of a claim independently unless a
constraint ties them. The fix is a ``spec.devices.constraints`` entry
``{matchAttribute: resource.kubernetes.io/pcieRoot}`` (or ``.../numaNode``) across the claim's
requests, so the scheduler picks devices that share the attribute's value.

What can be constrained is decided from what the devices *publish*: ``matchAttribute``
fails for a device without the attribute, so an attribute is only proposed across the
requests whose allocated devices all carry it (NVIDIA's GPUs publish ``pcieRoot``, not
``numaNode``; dra-driver-cpu's CPU groups publish ``numaNode``, and ``pcieRoot`` with
``--expose-pcie-roots``). ``pcieRoot`` is preferred (a PCIe root is narrower than a NUMA
node); a constraint naming no requests is written when it covers all of them.

A ResourceClaimTemplate's ``spec`` is immutable (k8s.io/kubernetes
``ValidateResourceClaimTemplateUpdate``), so the change is a *new* template, a copy with the
constraint, and a JSON merge patch of the pod's owner (Deployment, StatefulSet) pointing its
``spec.template.spec.resourceClaims`` entry at it: the rollout recreates the pods, whose new
claims the scheduler allocates under the constraint (toposcope never writes an allocation).
A bare pod, or a Job (whose pod template is immutable), is recreated by its owner's user.

CPUs follow the devices only where the node runs kubernetes-sigs ``dra-driver-cpu`` (driver
``dra.cpu``) and the pod asks for its CPUs through the claim; otherwise the kubelet's CPU
Manager (``static``), Memory Manager (``Static``) and Topology Manager place them, and the
Topology Manager does not see DRA devices: the advice says which applies.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toposcope.kubeapi.resourceslices import NUMA_NODE, PCIE_ROOT, SliceDevice

Devices = Mapping[tuple[str, str, str], SliceDevice]
#: the attributes a constraint may name, narrowest first
ATTRIBUTES = (PCIE_ROOT, NUMA_NODE)
#: dra-driver-cpu's driver and device class
CPU_DRIVER = "dra.cpu"
#: owners whose pod template can be patched, by kind: (API group path, plural)
PATCHABLE = {
    "Deployment": ("/apis/apps/v1", "deployments"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
}
#: the longest object name
MAX_NAME = 253
_SUFFIX = {PCIE_ROOT: "pcieroot", NUMA_NODE: "numanode"}


@dataclass(frozen=True)
class Owner:
    """The controller whose pod template makes the pod (``object`` as the API server has it)."""

    kind: str
    name: str
    object: Mapping[str, Any]


@dataclass(frozen=True)
class ClaimChange:
    """The change for one of a pod's claims (see the module docstring).

    ``template`` is the new ResourceClaimTemplate (a full object to create), ``owner_patch``
    the JSON merge patch of the owner (``None`` when the pod has no patchable owner),
    ``constraint`` the entry added, ``notes`` what else the operator should know.
    """

    namespace: str
    pod: str
    claim: str
    old_template: str
    template: dict[str, Any]
    constraint: dict[str, Any]
    owner: Owner | None = None
    owner_patch: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def new_template(self) -> str:
        """The new template's name."""
        return str(self.template["metadata"]["name"])


class NoChange(Exception):
    """No constraint can be proposed for this claim; the message says why."""


def _has(device: SliceDevice, attribute: str) -> bool:
    value = device.attributes.get(attribute)
    return value is not None and value != ()


def _allocated(claim: Mapping[str, Any], devices: Devices) -> dict[str, list[SliceDevice | None]]:
    """The claim's allocated devices per request (a subrequest ``r/s`` counts for ``r``)."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    found: dict[str, list[SliceDevice | None]] = {}
    for result in results:
        if not isinstance(result, Mapping):
            continue
        request = str(result.get("request") or "").split("/", 1)[0]
        key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
        found.setdefault(request, []).append(devices.get(key))
    return found


def _requests(template: Mapping[str, Any]) -> list[str]:
    devices = ((template.get("spec") or {}).get("spec") or {}).get("devices") or {}
    return [str(r.get("name")) for r in devices.get("requests") or [] if isinstance(r, Mapping)]


def _constraints(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    devices = ((template.get("spec") or {}).get("spec") or {}).get("devices") or {}
    return [dict(c) for c in devices.get("constraints") or [] if isinstance(c, Mapping)]


def choose(
    requests: list[str], allocated: Mapping[str, list[SliceDevice | None]]
) -> tuple[str, list[str]]:
    """``(attribute, requests it can cover)``: the attribute every allocated device of the
    most requests publishes (``pcieRoot`` first on a tie); :class:`NoChange` when none helps.
    """
    best: tuple[str, list[str]] | None = None
    for attribute in ATTRIBUTES:
        covered = [
            r
            for r in requests
            if allocated.get(r) and all(d is not None and _has(d, attribute) for d in allocated[r])
        ]
        count = sum(len(allocated[r]) for r in covered)
        if count >= 2 and (best is None or len(covered) > len(best[1])):
            best = (attribute, covered)
    if best is None:
        raise NoChange(
            "no two allocated devices of the claim publish resource.kubernetes.io/pcieRoot "
            "or numaNode: a matchAttribute constraint would leave it unallocatable"
        )
    return best


def _claim_reference(pod: Mapping[str, Any], claim: str) -> tuple[int, Mapping[str, Any]]:
    for index, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
        if isinstance(entry, Mapping) and entry.get("name") == claim:
            return index, entry
    raise NoChange(f"the pod has no resourceClaims entry {claim!r}")


def _new_name(old: str, attribute: str) -> str:
    suffix = f"-{_SUFFIX[attribute]}"
    return old[: MAX_NAME - len(suffix)].rstrip("-.") + suffix


def _template_copy(
    template: Mapping[str, Any], name: str, constraint: dict[str, Any]
) -> dict[str, Any]:
    """A new template object: ``template``'s spec plus ``constraint``, fresh metadata."""
    meta = template.get("metadata") or {}
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": meta.get("namespace")},
        "spec": copy.deepcopy(dict(template.get("spec") or {})),
    }
    for key in ("labels", "annotations"):
        if meta.get(key):
            body["metadata"][key] = dict(meta[key])
    devices = body["spec"].setdefault("spec", {}).setdefault("devices", {})
    devices["constraints"] = [*_constraints(template), constraint]
    return body


def _owner_patch(owner: Owner, index: int, new_template: str) -> dict[str, Any]:
    """A merge patch of ``owner`` giving resourceClaims[index] the new template (a merge
    patch replaces a list whole, so the list is written out; resourceVersion guards it).
    """
    spec = ((owner.object.get("spec") or {}).get("template") or {}).get("spec") or {}
    claims = copy.deepcopy(list(spec.get("resourceClaims") or []))
    if index >= len(claims):
        raise NoChange(f"{owner.kind} {owner.name} has no resourceClaims entry {index}")
    claims[index] = {"name": claims[index]["name"], "resourceClaimTemplateName": new_template}
    version = (owner.object.get("metadata") or {}).get("resourceVersion")
    patch: dict[str, Any] = {"spec": {"template": {"spec": {"resourceClaims": claims}}}}
    if version:
        patch["metadata"] = {"resourceVersion": str(version)}
    return patch


def cpu_note(devices: Devices, attribute: str, node: str) -> str:
    """What aligns the pod's CPUs with the constrained devices on ``node``."""
    cpus = [d for d in devices.values() if d.driver == CPU_DRIVER]
    if not cpus:
        return (
            f"{node} runs no dra-driver-cpu: the pod's CPUs come from the kubelet (CPU Manager "
            "static, Memory Manager Static), whose Topology Manager does not see DRA devices; "
            "run dra-driver-cpu to claim CPUs next to the devices"
        )
    if all(_has(d, attribute) for d in cpus):
        return (
            f"{node} runs dra-driver-cpu and its CPU groups publish {attribute}: ask for the "
            f"CPUs in this claim (deviceClassName dra.cpu, capacity dra.cpu/cpu) and add the "
            "request to the constraint to place them with the devices"
        )
    return (
        f"{node} runs dra-driver-cpu but its CPU groups do not publish {attribute} (start it "
        "with --expose-pcie-roots for pcieRoot): CPUs cannot join this constraint"
    )


def propose(
    pod: Mapping[str, Any],
    claim_name: str,
    claim: Mapping[str, Any],
    template: Mapping[str, Any],
    devices: Devices,
    owner: Owner | None = None,
) -> ClaimChange:
    """The change aligning ``pod``'s claim ``claim_name`` (module docstring); :class:`NoChange`
    when the claim is not from a template, is constrained already, or cannot be constrained.
    """
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    index, reference = _claim_reference(pod, claim_name)
    old = reference.get("resourceClaimTemplateName")
    if not old:
        raise NoChange(
            f"claim {claim_name!r} of pod {namespace}/{name} names a ResourceClaim, not a "
            "template: add the constraint to that claim's manifest and recreate it"
        )
    requests = _requests(template)
    attribute, covered = choose(requests, _allocated(claim, devices))
    for existing in _constraints(template):
        if existing.get("matchAttribute") == attribute and set(covered) <= set(
            existing.get("requests") or requests
        ):
            raise NoChange(f"template {old} already constrains {attribute}")
    constraint: dict[str, Any] = {"matchAttribute": attribute}
    if set(covered) != set(requests):
        constraint = {"requests": covered, "matchAttribute": attribute}
    new = _template_copy(template, _new_name(str(old), attribute), constraint)
    node = str((pod.get("spec") or {}).get("nodeName") or "the node")
    notes = [cpu_note(devices, attribute, node)]
    patch = None
    if owner is not None and owner.kind in PATCHABLE:
        patch = _owner_patch(owner, index, new["metadata"]["name"])
    else:
        what = f"{owner.kind} {owner.name}" if owner is not None else "no controller"
        notes.append(
            f"pod {namespace}/{name} has {what}, whose pod template cannot be patched: "
            f"recreate it with resourceClaimTemplateName {new['metadata']['name']}"
        )
    return ClaimChange(
        namespace, name, claim_name, str(old), new, constraint, owner, patch, tuple(notes)
    )


__all__ = [
    "ATTRIBUTES",
    "CPU_DRIVER",
    "PATCHABLE",
    "ClaimChange",
    "NoChange",
    "Owner",
    "choose",
    "cpu_note",
    "propose",
]
