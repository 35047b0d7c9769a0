"""Build a :class:`~toposcope.topology.model.Topology` from an hwloc XML file.

``lstopo --of xml`` (or ``hwloc-gather-topology``) output is how people share a machine's
layout, so importing it lets ``toposcope topology`` and the advisor reason about machines
we cannot log in to. Three generations of the format are read:

* **v1** (hwloc 1.x, ``<topology>`` without version): NUMA nodes are ordinary parents of
  packages (``Socket`` in old files) and cores; sets may carry ``online_cpuset``; NUMA
  distances are ``<distances nbobjs relative_depth latency_base>`` holding ``<latency
  value>`` entries in logical order.
* **v2** (hwloc 2.x, ``version="2.0"``): NUMA nodes are *memory children* attached to the
  object whose CPUs are local to them (possibly behind ``MemCache`` objects); distances are
  ``<distances2 type indexing kind>`` with ``<indexes>`` and ``<u64values>`` text.
* **3.0** (hwloc 2.10+/3.x): the same tree with ``id`` attributes and more annotations
  (memory tiers, CPU kinds, memory attributes), which are ignored here.

The result follows the same conventions as the sysfs builder, so that one machine gives the
same model either way:

* a NUMA node's ``cpus`` are the CPUs the kernel would list under it: each PU belongs to the
  nearest NUMA node on its path to the root. When several nodes hang off the same object
  (DRAM plus HBM or NVM in one package), the PU goes to the one without a special memory
  subtype, then to the lowest OS index; the others are memory-only (``cpus`` empty), as
  Linux shows HBM, NVM, CXL and GPU memory nodes;
* only online CPUs count (``cpuset`` intersected with ``online_cpuset`` where present);
* a PCI function's locality is the cpuset of its nearest non-I/O ancestor, and its
  ``numa_node`` is the single node whose CPUs contain that cpuset, else the single node of
  the ancestor's ``nodeset``, else ``None``;
* NICs are the OpenFabrics and Network OS devices of PCI functions
  (:mod:`toposcope.topology.hwloc_nics`), with the same labels to each GPU.

Disallowed CPUs (``allowed_cpuset``) are kept: the model describes the machine, not what the
process that ran ``lstopo`` was allowed to use. Any I/O error or malformed content raises
:class:`~toposcope.errors.ConfigError` naming the file and the problem; that includes objects
nested deeper than :data:`~toposcope.topology.hwloc_document.MAX_OBJECT_DEPTH` (real
machines stay far below), sets naming CPUs beyond :data:`~toposcope.cpulist.CPU_LIMIT`,
PU, NUMA node, package or core OS indexes beyond
:data:`~toposcope.topology.hwloc_document.OS_INDEX_LIMITS`, and
NUMA distances or latencies that are not finite, are negative or exceed
:data:`~toposcope.topology.model.MAX_NUMA_DISTANCE`. The tree is walked without recursion, so
no document can exhaust the interpreter's stack. Reading the document is
:mod:`toposcope.topology.hwloc_document`'s part; this module builds the model from it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.topology.hwloc_document import (
    HwObj,
    Malformed,
    numa_distances,
    object_tree,
    parse_document,
)
from toposcope.topology.hwloc_links import nvlinks, pci_path
from toposcope.topology.hwloc_nics import hwloc_nics
from toposcope.topology.model import (
    Cpu,
    NumaNode,
    Package,
    PciDevice,
    Topology,
    number_gpus,
)
from toposcope.topology.nics import gpu_nic_links
from toposcope.topology.pcie import gpu_links

#: Object types that are not part of the CPU/memory hierarchy (a PCI device's locality is
#: the nearest ancestor of another type).
_IO_TYPES = frozenset({"Bridge", "PCIDev", "OSDev", "Misc"})
#: Memory subtypes hwloc gives to nodes that Linux shows without CPUs.
_DRAM_SUBTYPES = frozenset({"", "DRAM"})
_PCI_TYPE_RE = re.compile(r"^\s*([0-9a-fA-F]{4})\s+\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")


def build_from_hwloc_xml(path: Path) -> Topology:
    """Read an hwloc v1, v2 or 3.0 XML file into the topology model.

    Raises :class:`ConfigError` naming the file when it cannot be read, is not XML, is not
    an hwloc topology, or holds malformed attributes (sets, indexes, PCI ids, distances).
    """
    path = Path(path)
    document = parse_document(path)
    try:
        return _build(document, path)
    except Malformed as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _build(document: ET.Element, path: Path) -> Topology:
    top = document.find("object")
    if top is None:
        raise Malformed("no <object> under <topology>")
    root = object_tree(top)
    objects = [root, *root.descendants()]

    usable = _usable_cpus(root, objects)
    packages = _packages(objects, usable)
    node_cpus, node_objs = _assign_cpus(objects, usable)
    distances = numa_distances(document, root, node_objs)
    package_of_cpu = {cpu: pkg.id for pkg in packages for cpu in pkg.cpus}

    nodes: list[NumaNode] = []
    for node_id, obj in sorted(node_objs.items()):
        cpus = tuple(sorted(node_cpus.get(node_id, ())))
        node_packages = {package_of_cpu.get(c) for c in cpus}
        package = node_packages.pop() if len(node_packages) == 1 else None
        if not cpus:
            package = _ancestor_package(obj)
        nodes.append(
            NumaNode(
                id=node_id,
                package=package,
                cpus=cpus,
                memory_bytes=obj.local_memory or 0,
                distances=distances.get(node_id, {}),
            )
        )
    if not nodes:
        # A machine without NUMA information (hwloc 1.x on a UMA box): one node 0 holding
        # every CPU and the machine's memory, as the sysfs builder does.
        packages_seen = set(package_of_cpu.values())
        nodes.append(
            NumaNode(
                id=0,
                package=packages_seen.pop() if len(packages_seen) == 1 else None,
                cpus=tuple(sorted(usable)),
                memory_bytes=root.local_memory or 0,
            )
        )

    cpu_node = {cpu: node.id for node in nodes for cpu in node.cpus}
    core_of = _cores(objects)
    cpu_records = tuple(
        Cpu(id=c, package=package_of_cpu.get(c), core=core_of.get(c), numa_node=cpu_node.get(c))
        for c in sorted(usable)
    )
    pci, gpu_infos = _pci_devices(objects, usable, nodes)
    gpus = number_gpus(pci, gpu_infos)
    gpu_of_bus = {g.pci_bus_id: g.index for g in gpus if g.pci_bus_id is not None}
    nvlinked = nvlinks(document, objects, gpu_of_bus, {g.index: g.model for g in gpus})
    nics = hwloc_nics(document.get("version"), objects, pci, nodes)
    return Topology(
        packages=tuple(packages),
        numa_nodes=tuple(nodes),
        cpus=cpu_records,
        pci_devices=tuple(pci),
        gpus=gpus,
        gpu_links=gpu_links(gpus, pci, nvlinked),
        source=f"hwloc-xml:{path}",
        nics=nics,
        gpu_nic_links=gpu_nic_links(gpus, nics, pci),
    )


def _usable_cpus(root: HwObj, objects: list[HwObj]) -> frozenset[int]:
    """Online CPUs of the machine: the root's cpuset (and online_cpuset), else its PUs."""
    cpus = root.cpuset
    if cpus is None:
        cpus = frozenset(o.os_index for o in objects if o.type == "PU" and o.os_index is not None)
    if root.online_cpuset is not None:
        cpus = cpus & root.online_cpuset
    return cpus


def _object_cpus(obj: HwObj, usable: frozenset[int]) -> frozenset[int]:
    """An object's online CPUs: its cpuset attribute, else the PUs below it."""
    if obj.cpuset is not None:
        cpus = obj.cpuset
    else:
        cpus = frozenset(p.os_index for p in obj.pus() if p.os_index is not None)
    if obj.online_cpuset is not None:
        cpus = cpus & obj.online_cpuset
    return cpus & usable


def _packages(objects: list[HwObj], usable: frozenset[int]) -> list[Package]:
    """Packages by OS index (objects sharing an index are merged, as sysfs ids would be)."""
    by_id: dict[int, set[int]] = {}
    for number, obj in enumerate(o for o in objects if o.type == "Package"):
        package_id = obj.os_index if obj.os_index is not None else number
        by_id.setdefault(package_id, set()).update(_object_cpus(obj, usable))
    return [Package(id=pid, cpus=tuple(sorted(cpus))) for pid, cpus in sorted(by_id.items())]


def _cores(objects: list[HwObj]) -> dict[int, int]:
    """CPU -> the OS index of the Core object holding it (the kernel's ``core_id``)."""
    found: dict[int, int] = {}
    for obj in objects:
        if obj.type == "Core" and obj.os_index is not None:
            for pu in obj.pus():
                if pu.os_index is not None:
                    found[pu.os_index] = obj.os_index
    return found


def _has_pu(obj: HwObj) -> bool:
    return any(o.type == "PU" for o in obj.descendants())


def _attached_nodes(obj: HwObj) -> list[HwObj]:
    """NUMA nodes attached to ``obj`` as memory children (possibly behind MemCache objects)."""
    found: list[HwObj] = []
    stack = list(reversed(obj.children))
    while stack:
        child = stack.pop()
        if child.type == "NUMANode" and not _has_pu(child):
            found.append(child)
        elif child.type == "MemCache":
            stack.extend(reversed(child.children))
    return found


def _assign_cpus(
    objects: list[HwObj], usable: frozenset[int]
) -> tuple[dict[int, set[int]], dict[int, HwObj]]:
    """Give each online PU to its nearest NUMA node; return node cpus and node objects."""
    node_objs: dict[int, HwObj] = {}
    for obj in objects:
        if obj.type == "NUMANode":
            if obj.os_index is None:
                raise Malformed("a NUMANode has no os_index")
            node_objs.setdefault(obj.os_index, obj)
    node_cpus: dict[int, set[int]] = {}
    owners: dict[HwObj, HwObj | None] = {}  # each ancestor is examined once, however many PUs
    for pu in objects:
        if pu.type != "PU" or pu.os_index is None or pu.os_index not in usable:
            continue
        current = pu.parent
        while current is not None:
            if current not in owners:
                owners[current] = _local_node(current)
            owner = owners[current]
            if owner is not None and owner.os_index is not None:
                node_cpus.setdefault(owner.os_index, set()).add(pu.os_index)
                break
            current = current.parent
    return node_cpus, node_objs


def _local_node(obj: HwObj) -> HwObj | None:
    """The NUMA node that owns the PUs below ``obj`` when ``obj`` is their nearest holder."""
    if obj.type == "NUMANode":  # hwloc 1.x: the node is an ancestor
        return obj
    candidates = _attached_nodes(obj)
    if not candidates:
        return None
    return min(candidates, key=lambda n: (n.subtype not in _DRAM_SUBTYPES, n.os_index or 0))


def _ancestor_package(obj: HwObj) -> int | None:
    current = obj.parent
    while current is not None:
        if current.type == "Package":
            return current.os_index
        current = current.parent
    return None


def _locality(obj: HwObj) -> HwObj | None:
    current = obj.parent
    while current is not None and current.type in _IO_TYPES:
        current = current.parent
    return current


def _device_locality(
    where: HwObj | None, usable: frozenset[int], nodes: list[NumaNode]
) -> tuple[tuple[int, ...], int | None]:
    """Local CPUs and NUMA node of the PCI devices whose nearest non-I/O ancestor is ``where``."""
    if where is None:
        return (), None
    local = _object_cpus(where, usable)
    if local:
        holders = [n.id for n in nodes if n.cpus and local <= set(n.cpus)]
        if len(holders) == 1:
            return tuple(sorted(local)), holders[0]
    numa_node: int | None = None
    if where.nodeset is not None and len(where.nodeset) == 1:
        only = next(iter(where.nodeset))
        numa_node = only if any(n.id == only for n in nodes) else None
    return tuple(sorted(local)), numa_node


def _pci_devices(
    objects: list[HwObj], usable: frozenset[int], nodes: list[NumaNode]
) -> tuple[list[PciDevice], dict[str, tuple[str | None, str | None]]]:
    """Every PCI function (devices and PCI-to-PCI bridges) with its locality and GPU infos."""
    localities: dict[HwObj | None, tuple[tuple[int, ...], int | None]] = {}
    devices: list[PciDevice] = []
    infos: dict[str, tuple[str | None, str | None]] = {}
    for obj in objects:
        bus_id = obj.element.get("pci_busid")
        if bus_id is None:
            continue
        pci_type = obj.element.get("pci_type", "")
        match = _PCI_TYPE_RE.match(pci_type)
        if match is None:
            raise Malformed(f"PCI device {bus_id[:64]} has a malformed pci_type={pci_type[:64]!r}")
        where = _locality(obj)
        if where not in localities:  # many devices share one locality object
            localities[where] = _device_locality(where, usable, nodes)
        local_cpus, numa_node = localities[where]
        bus_id = bus_id.lower()
        bridges, host_bridge = pci_path(obj)
        devices.append(
            PciDevice(
                bus_id=bus_id,
                vendor=int(match.group(2), 16),
                device=int(match.group(3), 16),
                class_id=int(match.group(1), 16),
                numa_node=numa_node,
                local_cpus=local_cpus,
                bridges=bridges,
                host_bridge=host_bridge,
            )
        )
        model = uuid = None
        for child in obj.children:
            if child.type == "OSDev":
                model = model or child.info("GPUModel")
                uuid = uuid or child.info("NVIDIAUUID")
        infos[bus_id] = (model or obj.info("PCIDevice"), uuid)
    return devices, infos
