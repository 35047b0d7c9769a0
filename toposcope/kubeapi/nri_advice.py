"""Pinning advice in the terms of the node's nri-plugins resource policy, instead of agent calls.

On nodes that run the containers/nri-plugins ``topology-aware`` or ``balloons`` policy (the
successor of CRI Resource Manager), that policy owns the containers' CPU and memory pinning:
an agent call would be undone at its next rebalance. The advice is then given as the pod
annotations the policy reads (docs/resource-policy/policy/topology-aware.md and
balloons.md of containers/nri-plugins), written into the owner's pod template:

* ``topology-aware``: ``topologyhints.resource-policy.nri.io/container.<name>:
  devices,pod-resources``: the policy generates topology hints from the devices injected into
  the container (a DRA GPU's CDI device nodes) and from the pod-resources API, and picks the
  CPU and memory pool closest to them; a pod that opted out of hints is opted in again.
* ``balloons``: ``balloon.balloons.resource-policy.nri.io/container.<name>: <type>`` puts the
  container into a balloon type whose ``preferCloseToDevices`` lists the sysfs path of its GPU
  (``/sys/bus/pci/devices/<address>``), with ``preferNewBalloons: true`` so that a new balloon
  is made next to that device; the balloon type itself is configuration of the policy, given
  as a snippet for the operator to add.

Annotation keys are checked against Kubernetes' rule for qualified names (a name part of at
most 63 characters) before they are proposed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: the annotation domain of nri-plugins' resource policies
DOMAIN = "resource-policy.nri.io"
HINTS = f"topologyhints.{DOMAIN}"
BALLOON = f"balloon.balloons.{DOMAIN}"
_NAME_PART = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class NriPolicy(StrEnum):
    """The nri-plugins resource policies toposcope advises for."""

    TOPOLOGY_AWARE = "topology-aware"
    BALLOONS = "balloons"


class NriAdviceError(ValueError):
    """The advice cannot be written (a container name too long for an annotation key...)."""


@dataclass(frozen=True)
class NriAdvice:
    """Annotations for the pod template, and balloon types to add to the policy's config."""

    policy: NriPolicy
    annotations: dict[str, str]
    balloon_types: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def owner_patch(self, resource_version: str = "") -> dict[str, Any]:
        """A JSON merge patch adding the annotations to an owner's pod template."""
        patch: dict[str, Any] = {
            "spec": {"template": {"metadata": {"annotations": dict(self.annotations)}}}
        }
        if resource_version:
            patch["metadata"] = {"resourceVersion": resource_version}
        return patch


def container_key(base: str, container: str) -> str:
    """``<base>/container.<container>``; :class:`NriAdviceError` when not a valid key."""
    name = f"container.{container}"
    if not _NAME_PART.fullmatch(name):
        raise NriAdviceError(
            f"container {container[:80]!r}: annotation key name {name[:80]!r} is not a "
            "Kubernetes qualified name (at most 63 characters)"
        )
    return f"{base}/{name}"


def balloon_type_name(address: str) -> str:
    """The balloon type proposed for the GPU at PCI ``address`` (``toposcope-gpu-3b-00-0``)."""
    bus = address.split(":", 1)[1] if address.count(":") == 2 else address
    return "toposcope-gpu-" + re.sub(r"[^0-9a-z]+", "-", bus.lower()).strip("-")


def advise(policy: NriPolicy, placements: Iterable[tuple[str, str]]) -> NriAdvice:
    """The advice for containers and the PCI address of the GPU each should sit next to
    (``(container, address)``; an empty address where unknown).
    """
    annotations: dict[str, str] = {}
    types: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for container, given in placements:
        if policy is NriPolicy.TOPOLOGY_AWARE:
            annotations[container_key(HINTS, container)] = "devices,pod-resources"
            continue
        address = given.lower()
        if not _ADDRESS.fullmatch(address):
            notes.append(
                f"container {container}: no PCI address of its device is published: "
                "choose the balloon type by hand"
            )
            continue
        name = balloon_type_name(address)
        annotations[container_key(BALLOON, container)] = name
        types[name] = {
            "name": name,
            "preferCloseToDevices": [f"/sys/bus/pci/devices/{address}"],
            "preferNewBalloons": True,
        }
    if policy is NriPolicy.TOPOLOGY_AWARE:
        notes.append(
            "pod-resources hints need the policy's agent option podResourceAPI: true; device "
            "hints come from the device nodes the DRA driver injects"
        )
    elif types:
        notes.append(
            "add the balloon types to the balloons policy's configuration (balloonTypes) "
            "before the annotations take effect"
        )
    return NriAdvice(policy, annotations, tuple(types[n] for n in sorted(types)), tuple(notes))


__all__ = [
    "BALLOON",
    "DOMAIN",
    "HINTS",
    "NriAdvice",
    "NriAdviceError",
    "NriPolicy",
    "advise",
    "balloon_type_name",
    "container_key",
]
