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
  the ancestor's ``nodeset``, else ``None``.

Disallowed CPUs (``allowed_cpuset``) are kept: the model describes the machine, not what the
process that ran ``lstopo`` was allowed to use. Any I/O error or malformed content raises
:class:`~toposcope.errors.ConfigError` naming the file and the problem; that includes objects
nested deeper than :data:`MAX_OBJECT_DEPTH` (real machines stay far below), sets naming CPUs
beyond :data:`~toposcope.cpulist.CPU_LIMIT`, and NUMA distances or latencies that are not
finite, are negative or exceed :data:`~toposcope.topology.model.MAX_NUMA_DISTANCE`. The tree
is walked without recursion, so no document can exhaust the interpreter's stack.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from toposcope.cpulist import parse_cpumask
from toposcope.errors import ConfigError
from toposcope.topology.model import (
    PCI_VENDOR_NVIDIA,
    Gpu,
    NumaNode,
    Package,
    PciDevice,
    Topology,
    check_distance,
    parse_distance,
)

LOG = logging.getLogger(__name__)

#: How deeply ``<object>`` elements may nest. A real machine needs about 15 levels (machine,
#: package, die, caches, core, PU, and a chain of PCI bridges); deeper is refused.
MAX_OBJECT_DEPTH = 256
#: The longest integer attribute read, in characters (a 64-bit number fits in 20 digits).
_MAX_INT_TEXT = 24

#: Object types that are not part of the CPU/memory hierarchy (a PCI device's locality is
#: the nearest ancestor of another type).
_IO_TYPES = frozenset({"Bridge", "PCIDev", "OSDev", "Misc"})
#: Memory subtypes hwloc gives to nodes that Linux shows without CPUs.
_DRAM_SUBTYPES = frozenset({"", "DRAM"})
_PCI_TYPE_RE = re.compile(r"^\s*([0-9a-fA-F]{4})\s+\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")
# hwloc writes an infinite bitmap (e.g. an allowed set) with a leading "0xf...f," word.
_INFINITE_PREFIX = "0xf...f"


class _Malformed(Exception):
    """Internal: a problem in the document, turned into ConfigError with the file name."""


@dataclass(eq=False)
class _Obj:
    """One ``<object>`` element with the attributes the builder uses."""

    type: str
    os_index: int | None
    subtype: str
    cpuset: frozenset[int] | None
    online_cpuset: frozenset[int] | None
    nodeset: frozenset[int] | None
    local_memory: int | None
    element: ET.Element
    parent: _Obj | None = None
    children: list[_Obj] = field(default_factory=list)

    def descendants(self) -> list[_Obj]:
        """All objects below this one, depth first in document order (no recursion)."""
        out: list[_Obj] = []
        stack = list(reversed(self.children))
        while stack:
            obj = stack.pop()
            out.append(obj)
            stack.extend(reversed(obj.children))
        return out

    def pus(self) -> list[_Obj]:
        """The PU objects below this one."""
        return [o for o in self.descendants() if o.type == "PU"]

    def info(self, name: str) -> str | None:
        """The value of this object's ``<info name=...>`` child, if any."""
        for item in self.element.findall("info"):
            if item.get("name") == name:
                return item.get("value")
        return None


def _what(element: ET.Element) -> str:
    """How errors name an element: its type attribute (cut short), else its tag."""
    return element.get("type", element.tag)[:32]


def _int_attr(element: ET.Element, name: str) -> int | None:
    value = element.get(name)
    if value is None:
        return None
    what = _what(element)
    if len(value) > _MAX_INT_TEXT:
        raise _Malformed(f"{what} has a {name} longer than {_MAX_INT_TEXT} characters")
    try:
        return int(value, 0)
    except ValueError:
        raise _Malformed(f"{what} has a non-integer {name}={value!r}") from None


def _set_attr(element: ET.Element, name: str) -> frozenset[int] | None:
    value = element.get(name)
    if value is None:
        return None
    text = value.strip()
    if text.startswith(_INFINITE_PREFIX):
        # Only the finite words matter: the infinite tail names CPUs that do not exist.
        text = text[len(_INFINITE_PREFIX) :].lstrip(",")
    try:
        return frozenset(parse_cpumask(text))
    except ValueError as exc:
        raise _Malformed(f"{_what(element)} has a malformed {name}={value[:64]!r}: {exc}") from None


def _object(element: ET.Element, parent: _Obj | None) -> _Obj:
    """One ``<object>`` element's attributes, without its children."""
    obj_type = element.get("type")
    if not obj_type:
        raise _Malformed("an <object> has no type attribute")
    if obj_type == "Socket":  # hwloc 1.x name of a package
        obj_type = "Package"
    return _Obj(
        type=obj_type,
        os_index=_int_attr(element, "os_index"),
        subtype=element.get("subtype", ""),
        cpuset=_set_attr(element, "cpuset"),
        online_cpuset=_set_attr(element, "online_cpuset"),
        nodeset=_set_attr(element, "nodeset"),
        local_memory=_int_attr(element, "local_memory"),
        element=element,
        parent=parent,
    )


def _convert(top: ET.Element) -> _Obj:
    """The object tree under ``top``, built without recursion and at most MAX_OBJECT_DEPTH deep."""
    root = _object(top, None)
    stack = [(root, 1)]
    while stack:
        obj, depth = stack.pop()
        children = obj.element.findall("object")
        if children and depth >= MAX_OBJECT_DEPTH:
            raise _Malformed(
                f"<object> elements nested deeper than {MAX_OBJECT_DEPTH} levels "
                f"(below a {_what(obj.element)}); not an hwloc topology"
            )
        obj.children = [_object(child, obj) for child in children]
        stack.extend((child, depth + 1) for child in reversed(obj.children))
    return root


def _parse_document(path: Path) -> ET.Element:
    try:
        tree = ET.parse(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"hwloc XML file {path} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read hwloc XML file {path}: {exc.strerror or exc}") from exc
    except ET.ParseError as exc:
        raise ConfigError(f"{path} is not well-formed XML: {exc}") from exc
    root = tree.getroot()
    if root.tag != "topology":
        raise ConfigError(f"{path} is not an hwloc topology: root element is <{root.tag}>")
    return root


def build_from_hwloc_xml(path: Path) -> Topology:
    """Read an hwloc v1, v2 or 3.0 XML file into the topology model.

    Raises :class:`ConfigError` naming the file when it cannot be read, is not XML, is not
    an hwloc topology, or holds malformed attributes (sets, indexes, PCI ids, distances).
    """
    path = Path(path)
    document = _parse_document(path)
    try:
        return _build(document, path)
    except _Malformed as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _build(document: ET.Element, path: Path) -> Topology:
    top = document.find("object")
    if top is None:
        raise _Malformed("no <object> under <topology>")
    root = _convert(top)
    objects = [root, *root.descendants()]

    usable = _usable_cpus(root, objects)
    packages = _packages(objects, usable)
    node_cpus, node_objs = _assign_cpus(objects, usable)
    distances = _distances(document, root, node_objs)
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

    pci, gpu_infos = _pci_devices(objects, usable, nodes)
    gpu_devices = sorted(
        (d for d in pci if d.is_gpu), key=lambda d: (d.vendor != PCI_VENDOR_NVIDIA, d.bus_id)
    )
    gpus = tuple(
        Gpu(
            index=i,
            pci_bus_id=d.bus_id,
            numa_node=d.numa_node,
            local_cpus=d.local_cpus,
            vendor=d.vendor,
            model=gpu_infos[d.bus_id][0],
            uuid=gpu_infos[d.bus_id][1],
        )
        for i, d in enumerate(gpu_devices)
    )
    return Topology(
        packages=tuple(packages),
        numa_nodes=tuple(nodes),
        pci_devices=tuple(pci),
        gpus=gpus,
        source=f"hwloc-xml:{path}",
    )


def _usable_cpus(root: _Obj, objects: list[_Obj]) -> frozenset[int]:
    """Online CPUs of the machine: the root's cpuset (and online_cpuset), else its PUs."""
    cpus = root.cpuset
    if cpus is None:
        cpus = frozenset(o.os_index for o in objects if o.type == "PU" and o.os_index is not None)
    if root.online_cpuset is not None:
        cpus = cpus & root.online_cpuset
    return cpus


def _object_cpus(obj: _Obj, usable: frozenset[int]) -> frozenset[int]:
    """An object's online CPUs: its cpuset attribute, else the PUs below it."""
    if obj.cpuset is not None:
        cpus = obj.cpuset
    else:
        cpus = frozenset(p.os_index for p in obj.pus() if p.os_index is not None)
    if obj.online_cpuset is not None:
        cpus = cpus & obj.online_cpuset
    return cpus & usable


def _packages(objects: list[_Obj], usable: frozenset[int]) -> list[Package]:
    """Packages by OS index (objects sharing an index are merged, as sysfs ids would be)."""
    by_id: dict[int, set[int]] = {}
    for number, obj in enumerate(o for o in objects if o.type == "Package"):
        package_id = obj.os_index if obj.os_index is not None else number
        by_id.setdefault(package_id, set()).update(_object_cpus(obj, usable))
    return [Package(id=pid, cpus=tuple(sorted(cpus))) for pid, cpus in sorted(by_id.items())]


def _has_pu(obj: _Obj) -> bool:
    return any(o.type == "PU" for o in obj.descendants())


def _attached_nodes(obj: _Obj) -> list[_Obj]:
    """NUMA nodes attached to ``obj`` as memory children (possibly behind MemCache objects)."""
    found: list[_Obj] = []
    stack = list(reversed(obj.children))
    while stack:
        child = stack.pop()
        if child.type == "NUMANode" and not _has_pu(child):
            found.append(child)
        elif child.type == "MemCache":
            stack.extend(reversed(child.children))
    return found


def _assign_cpus(
    objects: list[_Obj], usable: frozenset[int]
) -> tuple[dict[int, set[int]], dict[int, _Obj]]:
    """Give each online PU to its nearest NUMA node; return node cpus and node objects."""
    node_objs: dict[int, _Obj] = {}
    for obj in objects:
        if obj.type == "NUMANode":
            if obj.os_index is None:
                raise _Malformed("a NUMANode has no os_index")
            node_objs.setdefault(obj.os_index, obj)
    node_cpus: dict[int, set[int]] = {}
    owners: dict[_Obj, _Obj | None] = {}  # each ancestor is examined once, however many PUs
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


def _local_node(obj: _Obj) -> _Obj | None:
    """The NUMA node that owns the PUs below ``obj`` when ``obj`` is their nearest holder."""
    if obj.type == "NUMANode":  # hwloc 1.x: the node is an ancestor
        return obj
    candidates = _attached_nodes(obj)
    if not candidates:
        return None
    return min(candidates, key=lambda n: (n.subtype not in _DRAM_SUBTYPES, n.os_index or 0))


def _ancestor_package(obj: _Obj) -> int | None:
    current = obj.parent
    while current is not None:
        if current.type == "Package":
            return current.os_index
        current = current.parent
    return None


def _words(elements: list[ET.Element]) -> list[str]:
    """The whitespace-separated words of several elements' text, in order."""
    return " ".join(e.text or "" for e in elements).split()


def _distances(
    document: ET.Element, root: _Obj, node_objs: dict[int, _Obj]
) -> dict[int, dict[int, int]]:
    """The NUMA latency matrix by OS index (v2 ``distances2`` or v1 ``distances``)."""
    gp_to_os = {
        obj.element.get("gp_index"): node_id
        for node_id, obj in node_objs.items()
        if obj.element.get("gp_index") is not None
    }
    for matrix in document.findall("distances2"):
        if matrix.get("type") != "NUMANode":
            continue
        kind = _int_attr(matrix, "kind") or 0
        if kind & 8 and not kind & 4:  # a bandwidth matrix, not latencies
            continue
        nbobjs = _int_attr(matrix, "nbobjs") or 0
        indexes = _words(matrix.findall("indexes"))
        values = _words(matrix.findall("u64values"))
        if len(indexes) != nbobjs or len(values) != nbobjs * nbobjs:
            raise _Malformed(
                f"distances2 {(matrix.get('name') or '')[:64]} has {len(indexes)} indexes and "
                f"{len(values)} values for nbobjs={nbobjs}"
            )
        try:
            if matrix.get("indexing") == "gp":
                ids = [gp_to_os[i] for i in indexes]
            else:
                ids = [_os_index(i) for i in indexes]
            numbers = [parse_distance(v) for v in values]
        except KeyError as exc:
            raise _Malformed(
                f"distances2 names gp_index {str(exc.args[0])[:_MAX_INT_TEXT]!r}, "
                "which is no NUMANode"
            ) from None
        except ValueError as exc:
            raise _Malformed(f"distances2 has a bad index or value: {exc}") from None
        return _matrix(ids, numbers)
    for holder in [root, *root.descendants()]:
        matrices = holder.element.findall("distances")
        members = [o for o in holder.descendants() if o.type == "NUMANode"] if matrices else []
        for matrix in matrices:
            nbobjs = _int_attr(matrix, "nbobjs") or 0
            if len(members) != nbobjs or any(m.os_index is None for m in members):
                LOG.debug("ignoring v1 distances over %d non-NUMA objects", nbobjs)
                continue
            try:
                base = _latency(matrix.get("latency_base", "1"))
                latencies = [_latency(e.get("value", "")) for e in matrix.findall("latency")]
                scaled = [check_distance(value * base) for value in latencies]
            except ValueError as exc:
                raise _Malformed(f"distances has a bad latency value: {exc}") from None
            if len(latencies) != nbobjs * nbobjs:
                raise _Malformed(f"distances has {len(latencies)} values for nbobjs={nbobjs}")
            ids = [m.os_index for m in members if m.os_index is not None]
            return _matrix(ids, scaled)
    return {}


def _os_index(text: str) -> int:
    """An OS index written in a ``distances2`` element (``ValueError`` unless a small integer)."""
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_INT_TEXT:
        raise ValueError(f"index {text[:_MAX_INT_TEXT]!r} is not a whole number")
    return int(text)


def _latency(text: str) -> float:
    """A v1 latency or latency base: a finite, non-negative float (``ValueError`` otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text[:_MAX_INT_TEXT]!r} is not a number") from None
    check_distance(value)
    return value


def _matrix(ids: list[int], values: list[int]) -> dict[int, dict[int, int]]:
    size = len(ids)
    return {
        ids[row]: {ids[col]: values[row * size + col] for col in range(size)} for row in range(size)
    }


def _locality(obj: _Obj) -> _Obj | None:
    current = obj.parent
    while current is not None and current.type in _IO_TYPES:
        current = current.parent
    return current


def _device_locality(
    where: _Obj | None, usable: frozenset[int], nodes: list[NumaNode]
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
    objects: list[_Obj], usable: frozenset[int], nodes: list[NumaNode]
) -> tuple[list[PciDevice], dict[str, tuple[str | None, str | None]]]:
    """Every PCI function (devices and PCI-to-PCI bridges) with its locality and GPU infos."""
    localities: dict[_Obj | None, tuple[tuple[int, ...], int | None]] = {}
    devices: list[PciDevice] = []
    infos: dict[str, tuple[str | None, str | None]] = {}
    for obj in objects:
        bus_id = obj.element.get("pci_busid")
        if bus_id is None:
            continue
        pci_type = obj.element.get("pci_type", "")
        match = _PCI_TYPE_RE.match(pci_type)
        if match is None:
            raise _Malformed(f"PCI device {bus_id[:64]} has a malformed pci_type={pci_type[:64]!r}")
        where = _locality(obj)
        if where not in localities:  # many devices share one locality object
            localities[where] = _device_locality(where, usable, nodes)
        local_cpus, numa_node = localities[where]
        bus_id = bus_id.lower()
        devices.append(
            PciDevice(
                bus_id=bus_id,
                vendor=int(match.group(2), 16),
                device=int(match.group(3), 16),
                class_id=int(match.group(1), 16),
                numa_node=numa_node,
                local_cpus=local_cpus,
            )
        )
        model = uuid = None
        for child in obj.children:
            if child.type == "OSDev":
                model = model or child.info("GPUModel")
                uuid = uuid or child.info("NVIDIAUUID")
        infos[bus_id] = (model or obj.info("PCIDevice"), uuid)
    return devices, infos
