"""Where a pending pod's unallocated claim fits best: a node and its aligned device group.

toposcope never writes a claim's allocation (the scheduler does). For a pod whose claim is
not allocated yet, this says which node holds enough *free* devices for every request of the
claim's template *under one PCIe root* (best), else on one NUMA node, else anywhere on the
node; the advice is node selection (a required node affinity on ``kubernetes.io/hostname``)
plus the claim constraint (``matchAttribute``) that keeps the scheduler to such a group.

Which devices a request may take is decided by its DeviceClass selectors in the forms the
drivers ship: ``device.driver == 'X'`` and ``device.attributes['X'].type == 'T'`` (NVIDIA's
``gpu.nvidia.com``, ``mig.nvidia.com``; dra-driver-cpu's ``dra.cpu``); a class with other
expressions is matched on those two parts only, and the request's own selectors are not
evaluated: the result says so. A device is free when no ResourceClaim's
``status.allocation`` names it (devices that allow multiple allocations, such as
dra-driver-cpu's groups, are always free; their capacity is not counted).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from toposcope.kubeapi.claim_advice import ATTRIBUTES
from toposcope.kubeapi.resourceslices import SliceDevice

Key = tuple[str, str, str]
_DRIVER = re.compile(r"""device\.driver\s*==\s*['"]([a-z0-9.-]+)['"]""")
_TYPE = re.compile(
    r"""device\.attributes\[['"]([a-z0-9.-]+)['"]\]\.type\s*==\s*['"]([A-Za-z0-9._-]+)['"]"""
)


@dataclass(frozen=True)
class DeviceFilter:
    """What a DeviceClass lets a request take: a driver and, where said, a device ``type``."""

    driver: str
    kind: str = ""
    partial: bool = False

    def admits(self, device: SliceDevice) -> bool:
        """Whether ``device`` passes the class's driver and type tests."""
        return device.driver == self.driver and (not self.kind or device.kind == self.kind)


def class_filter(device_class: Mapping[str, Any]) -> DeviceFilter | None:
    """The filter of a DeviceClass object; ``None`` when its selectors name no driver."""
    expressions = [
        str((s.get("cel") or {}).get("expression") or "")
        for s in (device_class.get("spec") or {}).get("selectors") or []
        if isinstance(s, Mapping)
    ]
    text = " && ".join(expressions)
    driver = _DRIVER.search(text)
    if driver is None:
        return None
    kind = _TYPE.search(text)
    plain = _DRIVER.sub("", _TYPE.sub("", text)).replace("&&", "").strip()
    return DeviceFilter(driver.group(1), kind.group(2) if kind else "", bool(plain))


@dataclass(frozen=True)
class Request:
    """One request of a claim: its name, class and how many devices (``exactly.count``)."""

    name: str
    device_class: str
    count: int


def requests_of(template: Mapping[str, Any]) -> list[Request]:
    """The ``exactly`` requests of a template (v1/v1beta2 shape); ``allocationMode: All`` and
    ``firstAvailable`` requests are left out (they do not ask for a count).
    """
    devices = ((template.get("spec") or {}).get("spec") or {}).get("devices") or {}
    found = []
    for item in devices.get("requests") or []:
        exact = item.get("exactly") if isinstance(item, Mapping) else None
        if isinstance(exact, Mapping) and exact.get("allocationMode", "ExactCount") == "ExactCount":
            found.append(Request(str(item.get("name")), str(exact.get("deviceClassName")),
                                 int(exact.get("count") or 1)))  # fmt: skip
    return found


@dataclass(frozen=True)
class Placement:
    """A node and the group where every request fits: ``attribute``/``value`` (empty: the
    node as a whole), and the free devices per request chosen there.
    """

    node: str
    attribute: str
    value: str
    devices: Mapping[str, tuple[str, ...]]

    @property
    def rank(self) -> int:
        """0 for a PCIe root, 1 for a NUMA node, 2 for the node only."""
        return ATTRIBUTES.index(self.attribute) if self.attribute else len(ATTRIBUTES)

    def pod_affinity(self) -> dict[str, Any]:
        """The pod's ``spec.affinity`` selecting the node."""
        match = {"key": "kubernetes.io/hostname", "operator": "In", "values": [self.node]}
        terms = [{"matchExpressions": [match]}]
        required = {"nodeSelectorTerms": terms}
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}

    def constraint(self) -> dict[str, Any] | None:
        """The claim's ``spec.devices.constraints`` entry, or ``None`` for the node only."""
        return {"matchAttribute": self.attribute} if self.attribute else None


def _values(device: SliceDevice, attribute: str) -> tuple[str, ...]:
    value = device.attributes.get(attribute)
    if isinstance(value, tuple):
        return value
    return () if value is None or isinstance(value, bool) else (str(value),)


def _fit(
    requests: list[Request], filters: Mapping[str, DeviceFilter], free: list[SliceDevice],
    group: str, attribute: str,
) -> dict[str, tuple[str, ...]] | None:  # fmt: skip
    chosen: dict[str, tuple[str, ...]] = {}
    taken: set[Key] = set()
    for request in requests:
        wanted = filters[request.device_class]
        pool = [
            d for d in free
            if d.key not in taken and wanted.admits(d)
            and (not attribute or group in _values(d, attribute))
        ]  # fmt: skip
        if len(pool) < request.count:
            return None
        picked = sorted(pool, key=lambda d: d.name)[: request.count]
        taken.update(d.key for d in picked)
        chosen[request.name] = tuple(d.name for d in picked)
    return chosen


def placements(
    requests: list[Request],
    filters: Mapping[str, DeviceFilter],
    devices: Mapping[Key, SliceDevice],
    allocated: Iterable[Key],
    nodes: Mapping[Key, str],
) -> list[Placement]:
    """Every node's best group for the requests, best first (PCIe root, NUMA node, node;
    then the node with the most free devices left). ``nodes`` maps a device to its node.
    """
    used = set(allocated)
    by_node: dict[str, list[SliceDevice]] = {}
    for key, device in devices.items():
        if (key not in used or device.shared) and key in nodes:
            by_node.setdefault(nodes[key], []).append(device)
    found: list[tuple[Placement, int]] = []
    for node, free in sorted(by_node.items()):
        best: Placement | None = None
        for attribute in ATTRIBUTES:
            groups = Counter(v for d in free for v in _values(d, attribute))
            for value, _ in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
                chosen = _fit(requests, filters, free, value, attribute)
                if chosen is not None:
                    best = Placement(node, attribute, value, chosen)
                    break
            if best is not None:
                break
        if best is None:
            chosen = _fit(requests, filters, free, "", "")
            best = Placement(node, "", "", chosen) if chosen is not None else None
        if best is not None:
            found.append((best, len(free)))
    found.sort(key=lambda pair: (pair[0].rank, -pair[1], pair[0].node))
    return [p for p, _ in found]


__all__ = [
    "DeviceFilter",
    "Placement",
    "Request",
    "class_filter",
    "placements",
    "requests_of",
]
