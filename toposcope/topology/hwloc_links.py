"""What an hwloc XML document says about GPU interconnects: PCIe paths and NVLinks.

Two facts decide how two GPUs talk, and hwloc records both:

* **the PCIe tree.** A PCI function's ancestors of type ``Bridge`` are PCI-to-PCI bridges
  (``bridge_type="1-1"`` with a ``pci_busid``: root ports and PCIe switch ports) up to a
  host bridge (``bridge_type="0-1"``, no bus id, named by its ``bridge_pci`` bus range).
  :func:`pci_path` reads that chain.
* **the NVLinkBandwidth matrix.** hwloc's NVML backend exports the NVLink bandwidth (MB/s,
  one direction) between GPUs as a distances matrix named ``NVLinkBandwidth``. When every
  member is a GPU it is a ``<distances2 type="OSDev" indexing="gp">``; when it also holds
  CPU packages (NVLink to POWER processors) or NVSwitches it is a ``<distances2hetero>``
  whose ``<indexes>`` are ``Type:gp_index`` words. hwloc represents the NVSwitches as
  PCI objects (NVIDIA bridges on DGX/HGX boards); GPUs reach each other through them, so a
  pair's bandwidth via the switches is the smaller of the two GPUs' bandwidths to them.
  :func:`nvlinks` turns the matrix into NVLink counts per GPU pair.

A bandwidth is turned into a link count with the per-link bandwidth of the GPU's NVLink
generation (:func:`per_link_bandwidth`), as nvidia-smi counts bonded links (``NV2``,
``NV12``, ``NV18``). Malformed matrices raise
:class:`~toposcope.topology.hwloc_document.Malformed`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping

from toposcope.topology.hwloc_document import HwObj, Malformed, element_words, whole_number
from toposcope.topology.pcie import NvLink

#: The name hwloc's NVML backend gives the NVLink bandwidth matrix.
NVLINK_MATRIX = "NVLinkBandwidth"
#: Matrix members that stand for CPUs (NVLink to POWER processors), not GPUs or switches.
_CPU_TYPES = frozenset({"Machine", "Package", "Die", "Group", "NUMANode", "Core", "PU"})
#: One-direction bandwidth of one NVLink (MB/s) by GPU family, matched in the model name;
#: NVLink 1 (Pascal) is 20 GB/s, NVLink 5 (Blackwell) 50 GB/s, NVLink 2-4 (Volta, Ampere,
#: Hopper) 25 GB/s, the figures hwloc's NVML backend multiplies link counts by.
_PER_LINK_BY_FAMILY = (("P100", 20_000), ("B100", 50_000), ("B200", 50_000), ("B300", 50_000))
_DEFAULT_PER_LINK = 25_000
#: The largest matrix read: hwloc's NVML backend writes one row per GPU, CPU and switch.
_MAX_MEMBERS = 1024


def per_link_bandwidth(model: str | None) -> int:
    """One NVLink's one-direction bandwidth in MB/s for a GPU model name (25 GB/s unknown)."""
    text = (model or "").upper()
    for family, bandwidth in _PER_LINK_BY_FAMILY:
        if family in text:
            return bandwidth
    return _DEFAULT_PER_LINK


def pci_path(obj: HwObj) -> tuple[tuple[str, ...], str | None]:
    """The PCI-to-PCI bridges above a PCI object (nearest first) and its host bridge's name.

    The host bridge is named by its bus range (``0000:[00-15]``), else its ``gp_index``;
    ``None`` when the object hangs under no host bridge (hwloc's I/O filtering removed it).
    """
    bridges: list[str] = []
    current = obj.parent
    while current is not None and current.type == "Bridge":
        bus_id = current.element.get("pci_busid")
        if bus_id is not None and not current.element.get("bridge_type", "").startswith("0"):
            bridges.append(bus_id.lower())
        else:
            name = current.element.get("bridge_pci") or current.element.get("gp_index")
            return tuple(bridges), name or f"host bridge above {obj.element.get('pci_busid')}"
        current = current.parent
    return tuple(bridges), None


def pci_owner(obj: HwObj) -> str | None:
    """The bus id of the PCI function an object is (or, for an OS device, belongs to)."""
    current: HwObj | None = obj
    while current is not None and current.type in ("OSDev", "PCIDev", "Bridge"):
        bus_id = current.element.get("pci_busid")
        if bus_id is not None:
            return bus_id.lower()
        current = current.parent
    return None


def _members(matrix: ET.Element, words: list[str], by_gp: Mapping[str, HwObj]) -> list[HwObj]:
    """The objects a matrix's ``<indexes>`` name (``Type:gp`` words or plain gp indexes)."""
    found: list[HwObj] = []
    for word in words:
        type_name, _, gp = word.rpartition(":")
        type_name = type_name or matrix.get("type", "")
        obj = by_gp.get(gp)
        if obj is None or (type_name and obj.type != type_name):
            raise Malformed(f"{NVLINK_MATRIX} names {word[:40]!r}, which is no object of that type")
        found.append(obj)
    return found


def _matrix(document: ET.Element) -> ET.Element | None:
    for tag in ("distances2hetero", "distances2"):
        for matrix in document.findall(tag):
            if matrix.get("name") == NVLINK_MATRIX:
                return matrix
    return None


def nvlink_matrix(
    document: ET.Element, objects: list[HwObj]
) -> tuple[list[HwObj], list[list[int]]] | None:
    """The members and bandwidth rows of the document's NVLinkBandwidth matrix, if any."""
    matrix = _matrix(document)
    if matrix is None:
        return None
    if matrix.tag == "distances2" and matrix.get("indexing", "gp") != "gp":
        raise Malformed(
            f"{NVLINK_MATRIX} must be indexed by gp_index, not {matrix.get('indexing')!r}"
        )
    words = element_words(matrix.findall("indexes"))
    values = element_words(matrix.findall("u64values"))
    size = len(words)
    if not 0 < size <= _MAX_MEMBERS or len(values) != size * size:
        raise Malformed(
            f"{NVLINK_MATRIX} has {size} indexes and {len(values)} values "
            f"(expected 1 to {_MAX_MEMBERS} indexes and their square)"
        )
    by_gp = {o.element.get("gp_index", ""): o for o in objects if o.element.get("gp_index")}
    members = _members(matrix, words, by_gp)
    try:
        numbers = [whole_number(v) for v in values]
    except ValueError as exc:
        raise Malformed(f"{NVLINK_MATRIX} has a bad value: {exc}") from None
    return members, [numbers[row * size : (row + 1) * size] for row in range(size)]


def nvlinks(
    document: ET.Element,
    objects: list[HwObj],
    gpu_of_bus: Mapping[str, int],
    models: Mapping[int, str | None],
) -> dict[frozenset[int], NvLink]:
    """NVLinks per pair of GPU indexes, from the NVLinkBandwidth matrix (empty without one).

    ``gpu_of_bus`` maps a GPU's PCI bus id to its index in the model and ``models`` its
    index to its model name (for the per-link bandwidth). Members that are neither GPUs nor
    CPUs are NVSwitches.
    """
    found = nvlink_matrix(document, objects)
    if found is None:
        return {}
    members, rows = found
    gpu_at: dict[int, int] = {}
    switches: list[int] = []
    for position, obj in enumerate(members):
        gpu = gpu_of_bus.get(pci_owner(obj) or "")
        if gpu is not None:
            gpu_at[position] = gpu
        elif obj.type not in _CPU_TYPES:
            switches.append(position)

    def bandwidth(a: int, b: int) -> int:
        return max(rows[a][b], rows[b][a])

    to_switches = {p: sum(bandwidth(p, s) for s in switches) for p in gpu_at}
    links: dict[frozenset[int], NvLink] = {}
    for a, gpu_a in gpu_at.items():
        for b, gpu_b in gpu_at.items():
            if gpu_a >= gpu_b:
                continue
            switched = min(to_switches[a], to_switches[b])
            total = bandwidth(a, b) + switched
            if total <= 0:
                continue
            per_link = per_link_bandwidth(models.get(gpu_a))
            count = max(1, round(total / per_link))
            links[frozenset((gpu_a, gpu_b))] = NvLink(count, nvswitch=switched > 0)
    return links
