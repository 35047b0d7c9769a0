"""Who picks a placed pod's devices inside its node, and the DRA constraint that pins them.

toposcope chooses the node only. For a pod asking for ``nvidia.com/gpu``, the kubelet's
device plugin picks the device ids on that node (NVIDIA's plugin prefers a topology-aligned
set through ``GetPreferredAllocation``). Where Dynamic Resource Allocation is in use, the
node's drivers publish ResourceSlices whose devices carry locality attributes: the standard
``resource.kubernetes.io/pcieRoot`` (k8s.io/dynamic-resource-allocation ``deviceattribute``)
and, from some drivers, a ``numaNode`` attribute of their own domain. A ResourceClaim
constraint ``matchAttribute: <attribute>`` (``spec.devices.constraints``) then makes the
scheduler allocate every device of the claim under one PCIe root (or NUMA node):
:func:`placement_detail` says which to add, and whether the node can satisfy it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

#: the standard attribute naming a device's PCIe root complex
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
#: the unqualified name drivers give a device's NUMA node attribute
NUMA_NODE = "numaNode"
#: what the recommendation says about the device ids
DEVICE_PLUGIN_NOTE = (
    "the device plugin picks the device ids inside the node (NVIDIA's plugin prefers a "
    "topology-aligned set)"
)


@dataclass(frozen=True)
class LocalityGroups:
    """A node's DRA devices of one driver grouped by one locality attribute's values."""

    driver: str
    attribute: str
    sizes: dict[str, int]

    @property
    def largest(self) -> int:
        """The devices of the largest group (0 when none)."""
        return max(self.sizes.values(), default=0)


def _attributes(device: dict[str, Any]) -> dict[str, Any]:
    """A device's attributes: ``attributes`` (resource.k8s.io v1, v1beta2) or
    ``basic.attributes`` (v1beta1).
    """
    found = device.get("attributes")
    if found is None:
        found = (device.get("basic") or {}).get("attributes")
    return found if isinstance(found, dict) else {}


def _value(attribute: object) -> str | None:
    """A DeviceAttribute's value (its one ``string``/``int``/``bool``/``version`` field)."""
    if not isinstance(attribute, dict):
        return None
    for key in ("string", "int", "version", "bool"):
        if key in attribute and attribute[key] is not None:
            return str(attribute[key])
    return None


def _is_locality(name: str) -> bool:
    return name == PCIE_ROOT or name.rpartition("/")[2] == NUMA_NODE


def locality_groups(slices: list[dict[str, Any]], node: str) -> list[LocalityGroups]:
    """Per (driver, locality attribute), how many of ``node``'s devices share each value."""
    counts: dict[tuple[str, str], Counter[str]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("nodeName") != node:
            continue
        driver = str(spec.get("driver") or "")
        for device in spec.get("devices") or []:
            for name, attribute in _attributes(device).items():
                value = _value(attribute)
                if _is_locality(str(name)) and value is not None:
                    counts.setdefault((driver, str(name)), Counter())[value] += 1
    return [
        LocalityGroups(driver, attribute, dict(sorted(sizes.items())))
        for (driver, attribute), sizes in sorted(counts.items())
    ]


def claim_constraint(attribute: str) -> dict[str, Any]:
    """The ResourceClaim ``spec.devices.constraints`` entry pinning a claim's devices to one
    value of ``attribute`` (no ``requests``: it covers every request of the claim).
    """
    return {"matchAttribute": attribute}


def _choose(groups: list[LocalityGroups], wanted: int) -> LocalityGroups | None:
    """The narrowest grouping that still fits ``wanted`` devices (PCIe root before NUMA)."""
    fitting = [g for g in groups if g.largest >= max(wanted, 1)]
    fitting.sort(key=lambda g: (g.attribute != PCIE_ROOT, g.driver, g.attribute))
    return fitting[0] if fitting else None


def placement_detail(slices: list[dict[str, Any]], node: str, wanted: int) -> str:
    """What the placement leaves to the node, and the DRA constraint to add where DRA runs."""
    groups = locality_groups(slices, node)
    if not groups:
        return f"placed on {node}; {DEVICE_PLUGIN_NOTE}"
    chosen = _choose(groups, wanted)
    drivers = ", ".join(sorted({g.driver for g in groups}))
    if chosen is None:
        sizes = "; ".join(f"{g.attribute}: at most {g.largest}" for g in groups)
        return (
            f"placed on {node}; {DEVICE_PLUGIN_NOTE}. {node} publishes DRA devices "
            f"({drivers}), but no PCIe root or NUMA node there holds {wanted} of them "
            f"({sizes}): a matchAttribute constraint would leave such a claim unallocatable"
        )
    constraint = json.dumps(claim_constraint(chosen.attribute))
    where = "PCIe root" if chosen.attribute == PCIE_ROOT else "NUMA node"
    return (
        f"placed on {node}; {DEVICE_PLUGIN_NOTE}. {node} publishes DRA devices ({drivers}): "
        f"to pin a claimed set to one {where}, add to the ResourceClaim's "
        f"spec.devices.constraints: {constraint} (the largest {where} group of "
        f"{chosen.driver} there has {chosen.largest} devices)"
    )


__all__ = [
    "DEVICE_PLUGIN_NOTE",
    "NUMA_NODE",
    "PCIE_ROOT",
    "LocalityGroups",
    "claim_constraint",
    "locality_groups",
    "placement_detail",
]
