"""A node's DRA devices as its ResourceSlices publish them, read through :class:`KubeApi`.

Dynamic Resource Allocation names an allocated device by driver, pool and device name (the
kubelet's pod-resources ``ClaimResource``, a ResourceClaim's ``status.allocation``); what the
device *is* lives in the ResourceSlice that publishes it: its attributes. This module reads a
node's slices and keeps, per device, what toposcope needs to place it:

* the GPU's ``uuid`` (NVIDIA's driver, ``gpu.nvidia.com``: ``type`` ``gpu``; a MIG device is
  ``type`` ``mig`` with ``parentUUID``, ``profile`` and its own ``uuid``, as
  k8s-dra-driver-gpu's ``deviceinfo.go``/``mig.go`` publish and dcgm-exporter reads);
* the PCI address (the standard ``resource.kubernetes.io/pciBusID``, NVIDIA's ``pcieBusID``);
* the PCIe root: the standard ``resource.kubernetes.io/pcieRoot``, a string, or a list of
  strings where a device sits near several (dra-driver-cpu's CPU groups, ``strings``);
* the NUMA node: the standard ``resource.kubernetes.io/numaNode`` (KEP-5491), else a
  driver's own ``numaNode``/``numa``/``numaNodeID``.

An attribute name without a domain belongs to the driver's domain (``uuid`` of
``gpu.nvidia.com`` is ``gpu.nvidia.com/uuid``), as the DRA API defines; names are kept fully
qualified here. Versions: ``resource.k8s.io/v1`` (GA, Kubernetes 1.34) first, then
``v1beta2`` (1.33) and ``v1beta1`` (1.32, whose devices nest attributes under ``basic``),
the first the API server serves (404 means not served). Lists are paged (``limit``,
``continue``) and bounded; every name and value is checked before it is kept.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toposcope.identity.names import is_node_name
from toposcope.kubeapi.client import KubeApi, KubeApiError, KubeApiStatusError

#: the versions of resource.k8s.io read, newest first
VERSIONS = ("v1", "v1beta2", "v1beta1")
#: the standard attribute domain (k8s.io/dynamic-resource-allocation ``deviceattribute``)
STANDARD = "resource.kubernetes.io"
PCIE_ROOT = f"{STANDARD}/pcieRoot"
PCI_BUS_ID = f"{STANDARD}/pciBusID"
NUMA_NODE = f"{STANDARD}/numaNode"
#: a driver's own NUMA attribute names, tried after the standard one
DRIVER_NUMA_NAMES = ("numaNode", "numa", "numaNodeID")
#: objects per page, and pages at most (a node publishes a handful of slices)
PAGE = 100
MAX_PAGES = 20
#: devices kept per node at most (a ResourceSlice holds at most 128)
MAX_DEVICES = 16384
#: longest attribute value kept, and longest list
MAX_VALUE = 253
MAX_LIST = 64

_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
_ATTRIBUTE = re.compile(r"^([a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?/)?[A-Za-z][A-Za-z0-9_]{0,63}$")
_VALUE = re.compile(r"^[A-Za-z0-9._:/@+=-]{1,253}$")

#: an attribute's value: string, integer, boolean, version (as a string) or list of strings
Value = str | int | bool | tuple[str, ...]


class ResourceSliceError(KubeApiError):
    """The ResourceSlices could not be read or are not what the DRA API defines."""


@dataclass(frozen=True)
class SliceDevice:
    """One published device: who publishes it and its attributes (fully qualified names);
    ``shared`` when several claims may hold it at once (``allowMultipleAllocations``).
    """

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Value] = field(default_factory=dict)
    shared: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        """``(driver, pool, device)``, as pod-resources names an allocated device."""
        return (self.driver, self.pool, self.name)

    def own(self, name: str) -> Value | None:
        """The driver's own attribute ``name`` (``uuid`` -> ``<driver>/uuid``)."""
        return self.attributes.get(f"{self.driver}/{name}")

    def _text(self, name: str) -> str:
        value = self.own(name)
        return value if isinstance(value, str) else ""

    @property
    def kind(self) -> str:
        """The driver's ``type`` attribute (NVIDIA: ``gpu``, ``mig``, ``vfio``); may be empty."""
        return self._text("type")

    @property
    def uuid(self) -> str:
        """The device's UUID (a GPU's ``GPU-...``, a MIG device's ``MIG-...``); may be empty."""
        return self._text("uuid")

    @property
    def parent_uuid(self) -> str:
        """A MIG device's parent GPU UUID; empty for anything else."""
        return self._text("parentUUID")

    @property
    def mig_profile(self) -> str:
        """A MIG device's profile (``1g.10gb``); empty for anything else."""
        return self._text("profile") if self.parent_uuid else ""

    @property
    def gpu_uuid(self) -> str:
        """The UUID of the physical GPU: the parent of a MIG device, else its own."""
        return self.parent_uuid or (self.uuid if self.uuid.startswith("GPU-") else "")

    @property
    def pci_bus_id(self) -> str:
        """The PCI address (standard attribute, else NVIDIA's ``pcieBusID``); may be empty."""
        for value in (self.attributes.get(PCI_BUS_ID), self.own("pcieBusID")):
            if isinstance(value, str):
                return value.lower()
        return ""

    @property
    def pcie_roots(self) -> tuple[str, ...]:
        """The PCIe root(s) the device sits under (several for a CPU group); may be empty."""
        value = self.attributes.get(PCIE_ROOT)
        if isinstance(value, str):
            return (value,)
        return value if isinstance(value, tuple) else ()

    @property
    def numa_node(self) -> int | None:
        """The NUMA node (standard attribute, else the driver's own); ``None`` when unsaid."""
        for value in (self.attributes.get(NUMA_NODE), *map(self.own, DRIVER_NUMA_NAMES)):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        return None


def _value(raw: object) -> Value | None:
    """A DeviceAttribute's one value, checked; ``None`` when it holds nothing usable."""
    if not isinstance(raw, Mapping):
        return None
    if isinstance(raw.get("int"), int) and not isinstance(raw.get("int"), bool):
        return int(raw["int"])
    if isinstance(raw.get("bool"), bool):
        return bool(raw["bool"])
    for key in ("string", "version"):
        text = raw.get(key)
        if isinstance(text, str):
            return text if _VALUE.fullmatch(text) else None
    items = raw.get("strings")
    if (
        isinstance(items, list)
        and 0 < len(items) <= MAX_LIST
        and all(isinstance(i, str) and _VALUE.fullmatch(i) for i in items)
    ):
        return tuple(items)
    return None


def _attributes(driver: str, device: Mapping[str, Any]) -> dict[str, Value]:
    """A device's attributes, fully qualified (v1/v1beta2 ``attributes``, v1beta1 ``basic``)."""
    raw = device.get("attributes")
    if raw is None:
        raw = (device.get("basic") or {}).get("attributes")
    found: dict[str, Value] = {}
    if not isinstance(raw, Mapping):
        return found
    for name, attribute in raw.items():
        if not isinstance(name, str) or not _ATTRIBUTE.fullmatch(name):
            continue
        value = _value(attribute)
        if value is not None:
            found[name if "/" in name else f"{driver}/{name}"] = value
    return found


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ResourceSliceError(f"ResourceSlice {what} {str(value)[:80]!r} is not a DNS name")
    return value


def devices_of(
    slices: Iterable[Mapping[str, Any]], node: str
) -> dict[tuple[str, str, str], SliceDevice]:
    """``node``'s devices in ``slices`` (ResourceSlice objects of any served version), by key.

    Slices of other nodes are skipped; a device of a malformed name is an error
    (:class:`ResourceSliceError`) naming what was wrong, an unusable attribute is left out.
    """
    found: dict[tuple[str, str, str], SliceDevice] = {}
    for item in slices:
        spec = item.get("spec") if isinstance(item, Mapping) else None
        if not isinstance(spec, Mapping) or spec.get("nodeName") != node:
            continue
        driver = _name(spec.get("driver"), "driver")
        pool = _name((spec.get("pool") or {}).get("name"), "pool name")
        for device in spec.get("devices") or []:
            if not isinstance(device, Mapping):
                raise ResourceSliceError(f"ResourceSlice of {driver}: a device is not an object")
            name = _name(device.get("name"), "device name")
            shared = device.get("allowMultipleAllocations") is True
            entry = SliceDevice(driver, pool, name, _attributes(driver, device), shared)
            found[entry.key] = entry
            if len(found) > MAX_DEVICES:
                raise ResourceSliceError(f"node {node} publishes over {MAX_DEVICES} devices")
    return found


def read_slices(api: KubeApi, node: str | None) -> tuple[str, list[dict[str, Any]]]:
    """``(version, slices)``: ``node``'s ResourceSlices (every node's for ``None``) in the
    newest served version.

    ``("", [])`` when no version is served (DRA off). Other refusals (403: the service
    account lacks ``list`` on ``resourceslices``) are raised, naming what is missing.
    """
    query = "?"
    if node is not None:
        if not is_node_name(node):
            raise ResourceSliceError(f"{node[:80]!r} is not a node name")
        query = "?fieldSelector=" + urllib.parse.quote(f"spec.nodeName={node}", safe="=") + "&"
    for version in VERSIONS:
        base = f"/apis/resource.k8s.io/{version}/resourceslices{query}"
        try:
            return version, pages(api, base)
        except KubeApiStatusError as exc:
            if exc.code == 404:
                continue
            if exc.code == 403:
                raise ResourceSliceError(
                    f"{exc}: the service account needs list on resourceslices (resource.k8s.io)"
                ) from None
            raise
    return "", []


def pages(api: KubeApi, base: str) -> list[dict[str, Any]]:
    """Every item of the list at ``base`` (a path ending in ``?`` or ``&``), page by page."""
    items: list[dict[str, Any]] = []
    token = ""
    for _ in range(MAX_PAGES):
        suffix = f"limit={PAGE}" + (f"&continue={urllib.parse.quote(token)}" if token else "")
        answer = api.get(base + suffix)
        if not isinstance(answer, Mapping) or not isinstance(answer.get("items"), list):
            raise ResourceSliceError(f"Kubernetes API {base}: answer is not a list")
        items.extend(i for i in answer["items"] if isinstance(i, dict))
        token = str((answer.get("metadata") or {}).get("continue") or "")
        if not token:
            return items
    raise ResourceSliceError(f"Kubernetes API {base}: more than {MAX_PAGES} pages")


def cluster_devices(
    slices: Iterable[Mapping[str, Any]],
) -> tuple[dict[tuple[str, str, str], SliceDevice], dict[tuple[str, str, str], str]]:
    """Every node-local device of ``slices`` by key, and the node of each."""
    devices: dict[tuple[str, str, str], SliceDevice] = {}
    nodes: dict[tuple[str, str, str], str] = {}
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for item in slices:
        node = ((item.get("spec") or {}) if isinstance(item, Mapping) else {}).get("nodeName")
        if isinstance(node, str) and is_node_name(node):
            by_node.setdefault(node, []).append(item)
    for node, items in by_node.items():
        found = devices_of(items, node)
        devices.update(found)
        nodes.update(dict.fromkeys(found, node))
    return devices, nodes


def read_node_devices(api: KubeApi, node: str) -> dict[tuple[str, str, str], SliceDevice]:
    """``node``'s published devices by ``(driver, pool, device)`` (empty where DRA is off)."""
    _, slices = read_slices(api, node)
    return devices_of(slices, node)


__all__ = [
    "NUMA_NODE",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "VERSIONS",
    "ResourceSliceError",
    "SliceDevice",
    "cluster_devices",
    "devices_of",
    "pages",
    "read_node_devices",
    "read_slices",
]
