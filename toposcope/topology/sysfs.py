"""Build a :class:`~toposcope.topology.model.Topology` from a sysfs (and procfs) tree.

The root is configurable, like node_exporter's ``--path.sysfs``, so that tests run on real
machines' snapshots. The rules follow what the kernel and hwloc do on real hardware (the
tests compare the result with hwloc's own output for its regression corpus):

* NUMA nodes come from ``bus/node/devices`` (or ``devices/system/node``), restricted to the
  nodes ``devices/system/node/online`` lists when that file exists; ids may be sparse, nodes
  may have no CPU (CXL, HBM, NVIDIA GPU memory on POWER9) or no memory.
* A node whose CPUs overlap those of a node with a lower id is a firmware bug (some old
  kernels list every CPU under every node); like hwloc, such a node is ignored, with a
  warning.
* Only online CPUs belong to a node, a package or a PCI device's locality (hwloc's view).
* A kernel without NUMA support shows no node directory; the machine is then one node 0
  holding every online CPU and the memory of ``/proc/meminfo``.
* ``physical_package_id`` of ``-1`` means the CPU is in no known package.
* A PCI device's ``numa_node`` of ``-1`` (firmware did not say) falls back to its
  ``local_cpus``: when they fall inside exactly one node, that node, as hwloc attaches it.
  A device directory without ``vendor``, ``device``, ``class`` or ``numa_node`` files
  (trimmed snapshots, some platforms) is still listed, as hwloc lists it: ids it lacks are
  0 and its locality comes from ``local_cpus``.
* A PCI device's place in the PCIe tree (its bridges and host bridge) is read from the
  ``devices/pciDDDD:BB/...`` path its ``bus/pci/devices`` link points to; the GPU link
  matrix (PIX, PXB, PHB, NODE, SYS) follows from it. NVLinks need NVML (``--nvml``).
* NICs (RDMA devices and PCI network interfaces) come from ``class/infiniband`` and
  ``class/net`` (:mod:`toposcope.topology.sysfs_nics`), with the same labels to each GPU.
* A node's local memory is ``MemTotal`` of its ``meminfo``, hugepages included, as hwloc
  reports it.

Errors: a root that does not exist, a CPU set that cannot be parsed (``cpu/online``, a
node's ``cpulist``/``cpumap``, or one naming a CPU beyond
:data:`~toposcope.cpulist.CPU_LIMIT`), a ``cpuN`` or ``nodeN`` directory numbered at or
beyond that limit, or a ``physical_package_id`` or ``core_id`` that is not -1 or a whole
number up to :data:`~toposcope.topology.model.MAX_PACKAGE_ID` (the kernel's ``int``) raises
:class:`~toposcope.errors.SourceError` naming the file, because every locality decision rests
on those sets and ids. A missing or garbled memory
size, distance row (``inf``, ``nan``, a negative or absurd value) or PCI attribute is logged
and left unknown (0, no distances, no node).
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from pathlib import Path

from toposcope.cpulist import parse_cpulist, parse_cpumask
from toposcope.errors import SourceError
from toposcope.topology.model import (
    MAX_PACKAGE_ID,
    Cpu,
    NumaNode,
    Package,
    PciDevice,
    Topology,
    number_gpus,
)
from toposcope.topology.nics import gpu_nic_links
from toposcope.topology.pcie import gpu_links
from toposcope.topology.sysfs_files import (
    cpu_dir,
    node_cpus,
    node_dirs,
    node_memory,
    numbered_dir,
    online_cpus,
    online_nodes,
    parse_distance_row,
    parse_meminfo,
    read_id,
    read_int,
    read_text,
)
from toposcope.topology.sysfs_nics import read_nics

LOG = logging.getLogger(__name__)

#: the builder, and the file readers (:mod:`toposcope.topology.sysfs_files`) that the node
#: agent and the exporter's context read through it
__all__ = [
    "build_from_sysfs",
    "node_dirs",
    "node_of_cpus",
    "online_cpus",
    "online_nodes",
    "read_pci_devices",
    "read_text",
]

_CPU_DIR_RE = re.compile(r"^cpu(\d+)$")
#: A PCI function's name: domain (4 or more hex digits), bus, device and function.
_PCI_BUS_ID_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
#: A host bridge's sysfs directory (``pci0000:00``).
_HOST_BRIDGE_RE = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")


def _read_cpus(sysfs: Path) -> list[Cpu]:
    online = online_cpus(sysfs)
    base = cpu_dir(sysfs)
    cpus: list[Cpu] = []
    try:
        entries = list(base.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    for entry in entries:
        match = _CPU_DIR_RE.match(entry.name)
        if not match:
            continue
        cpu_id = numbered_dir(entry, match.group(1), "CPU id")
        if online is not None:
            is_online = cpu_id in online
        else:
            flag = read_int(entry / "online")
            is_online = flag != 0
        topology = entry / "topology"
        package = read_id(topology / "physical_package_id", "package id", MAX_PACKAGE_ID)
        core = read_id(topology / "core_id", "core id", MAX_PACKAGE_ID)
        cpus.append(
            Cpu(
                id=cpu_id,
                package=package,
                core=core,
                numa_node=None,
                online=is_online,
            )
        )
    if not cpus and online:
        cpus = [Cpu(id=c, package=None, core=None, numa_node=None) for c in online]
    return sorted(cpus, key=lambda c: c.id)


def _distances(node_path: Path, node_ids: list[int], all_ids: list[int]) -> dict[int, int]:
    """One node's SLIT row, keyed by peer id; empty (logged) when missing or garbled.

    The kernel writes one entry per online node (``node_ids``), in id order; snapshots
    edited by hand sometimes keep one entry per node directory (``all_ids``), which is
    accepted too.
    """
    path = node_path / "distance"
    text = read_text(path)
    if text is None:
        return {}
    try:
        row = parse_distance_row(text)
    except ValueError as exc:
        LOG.warning("ignoring malformed NUMA distance file %s: %s", path, exc)
        return {}
    for ids in (node_ids, all_ids):
        if len(row) == len(ids):
            return {peer: d for peer, d in zip(ids, row, strict=True) if peer in node_ids}
    LOG.warning(
        "NUMA distance row in %s has %d entries for %d nodes; ignored",
        path,
        len(row),
        len(node_ids),
    )
    return {}


def _pci_bus_id(name: str) -> str:
    return name.lower()


def _pci_local_cpus(entry: Path) -> tuple[int, ...]:
    """A PCI function's ``local_cpulist`` (else ``local_cpus`` mask); empty when unusable."""
    for name, mask in (("local_cpulist", False), ("local_cpus", True)):
        text = read_text(entry / name)
        if text is None:
            continue
        text = text.replace("\x00", "")
        try:
            return parse_cpumask(text) if mask else parse_cpulist(text)
        except ValueError:
            LOG.warning("ignoring malformed %s", entry / name)
            return ()
    return ()


def read_pci_devices(
    sysfs: Path, nodes: tuple[NumaNode, ...], online: set[int] | None = None
) -> tuple[PciDevice, ...]:
    """Every PCI function under ``bus/pci/devices`` with its NUMA locality resolved.

    ``online`` restricts local CPUs to online ones (hwloc's view); ``None`` keeps them all.
    """
    base = sysfs / "bus" / "pci" / "devices"
    try:
        entries = sorted(base.iterdir(), key=lambda p: p.name)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    known_nodes = {n.id for n in nodes}
    devices: list[PciDevice] = []
    for entry in entries:
        if _PCI_BUS_ID_RE.match(entry.name) is None:
            LOG.debug("skipping %s: not a PCI bus id", entry)
            continue
        vendor = read_int(entry / "vendor")
        device = read_int(entry / "device")
        pci_class = read_int(entry / "class")
        if vendor is None or device is None or pci_class is None:
            LOG.debug("PCI device %s lacks vendor/device/class: listed with id 0", entry.name)
        local = _pci_local_cpus(entry)
        if online is not None:
            local = tuple(c for c in local if c in online)
        node_id = read_int(entry / "numa_node")
        numa_node = node_id if node_id is not None and node_id in known_nodes else None
        if numa_node is None:
            numa_node = node_of_cpus(local, nodes)
        bridges, host_bridge = _pci_path(entry)
        devices.append(
            PciDevice(
                bus_id=_pci_bus_id(entry.name),
                vendor=vendor or 0,
                device=device or 0,
                class_id=(pci_class or 0) >> 8,
                numa_node=numa_node,
                local_cpus=local,
                bridges=bridges,
                host_bridge=host_bridge,
            )
        )
    # Like hwloc, only bridges that are listed PCI functions count (a path may name others).
    listed = {d.bus_id for d in devices}
    return tuple(replace(d, bridges=tuple(b for b in d.bridges if b in listed)) for d in devices)


def _pci_path(entry: Path) -> tuple[tuple[str, ...], str | None]:
    """The bridges above a PCI function (nearest first) and its host bridge, from sysfs.

    ``bus/pci/devices/BUSID`` links to ``devices/pciDDDD:BB/<bridge>/.../BUSID``: the
    ``pciDDDD:BB`` directory is the host bridge and the bus ids between it and the function
    are the PCI-to-PCI bridges (root ports, switch ports), as hwloc reads them. A function
    whose path shows no host bridge gets ``((), None)``.
    """
    try:
        parts = entry.resolve().parts
    except (OSError, RuntimeError):  # a link loop in a hand-made snapshot
        return (), None
    roots = [i for i, part in enumerate(parts) if _HOST_BRIDGE_RE.match(part)]
    if not roots:
        return (), None
    below = [p.lower() for p in parts[roots[-1] + 1 : -1] if _PCI_BUS_ID_RE.match(p)]
    return tuple(reversed(below)), parts[roots[-1]].lower()


def node_of_cpus(cpus: tuple[int, ...], nodes: tuple[NumaNode, ...]) -> int | None:
    """The one NUMA node whose CPUs the given set falls inside, else ``None``.

    Used for PCI devices whose firmware reported no node: hwloc attaches such a device
    under the smallest object covering its local CPUs, which is a single NUMA node only when
    the CPUs do not span several nodes.
    """
    if not cpus:
        return None
    wanted = set(cpus)
    touching = [n for n in nodes if n.cpus and wanted & set(n.cpus)]
    if len(touching) == 1 and wanted <= set(touching[0].cpus):
        return touching[0].id
    return None


def _read_nodes(
    sysfs: Path, online: set[int], cpu_package: dict[int, int | None]
) -> list[NumaNode]:
    """The NUMA nodes with online CPUs, memory and distances (empty without NUMA support)."""
    dirs = node_dirs(sysfs)
    all_ids = list(dirs)
    listed = online_nodes(sysfs)
    if listed is not None:
        dirs = {node_id: path for node_id, path in dirs.items() if node_id in listed}
    distance_ids = list(dirs)
    claimed: set[int] = set()
    nodes: list[NumaNode] = []
    for node_id, path in dirs.items():
        raw = node_cpus(path)
        if raw is None:
            LOG.warning("NUMA node %d has neither cpulist nor cpumap in %s; ignored", node_id, path)
            continue
        if claimed & set(raw):
            LOG.warning(
                "NUMA node %d lists CPUs %s that lower nodes already hold (firmware bug); "
                "node ignored, as hwloc does",
                node_id,
                sorted(claimed & set(raw))[:8],
            )
            continue
        claimed.update(raw)
        cpus = tuple(c for c in raw if c in online)
        packages = {cpu_package.get(c) for c in cpus}
        nodes.append(
            NumaNode(
                id=node_id,
                package=packages.pop() if len(packages) == 1 else None,
                cpus=cpus,
                memory_bytes=node_memory(path),
                distances=_distances(path, distance_ids, all_ids),
            )
        )
    kept = {n.id for n in nodes}
    if kept != set(distance_ids):
        nodes = [
            NumaNode(
                id=n.id,
                package=n.package,
                cpus=n.cpus,
                memory_bytes=n.memory_bytes,
                distances={peer: d for peer, d in n.distances.items() if peer in kept},
            )
            for n in nodes
        ]
    return nodes


def build_from_sysfs(sysfs: Path | str, procfs: Path | str | None = None) -> Topology:
    """Build the topology of the machine whose sysfs is rooted at ``sysfs``.

    ``procfs`` is only needed for machines without NUMA directories (the memory size of the
    single implicit node comes from ``/proc/meminfo``). Raises :class:`SourceError` when the
    root does not exist, shows no CPU at all, or holds a CPU set that cannot be parsed.
    """
    sysfs = Path(sysfs)
    if not sysfs.is_dir():
        raise SourceError(f"sysfs root {sysfs} does not exist or is not a directory")
    all_cpus = _read_cpus(sysfs)
    online = {c.id for c in all_cpus if c.online}
    if not all_cpus:
        raise SourceError(f"no CPU found under {cpu_dir(sysfs)}")

    cpu_package = {c.id: c.package for c in all_cpus}
    nodes = _read_nodes(sysfs, online, cpu_package)
    if not nodes:
        meminfo_text = read_text(Path(procfs) / "meminfo") if procfs is not None else None
        memory = parse_meminfo(meminfo_text).get("MemTotal", 0) if meminfo_text else 0
        packages = {c.package for c in all_cpus if c.online}
        nodes.append(
            NumaNode(
                id=0,
                package=packages.pop() if len(packages) == 1 else None,
                cpus=tuple(sorted(online)),
                memory_bytes=memory,
            )
        )
    node_tuple = tuple(nodes)
    cpu_node = {cpu: n.id for n in node_tuple for cpu in n.cpus}
    cpus = tuple(Cpu(c.id, c.package, c.core, cpu_node.get(c.id), c.online) for c in all_cpus)
    package_cpus: dict[int, list[int]] = {}
    for cpu in cpus:
        if cpu.online and cpu.package is not None:
            package_cpus.setdefault(cpu.package, []).append(cpu.id)
    packages_out = tuple(
        Package(id=pid, cpus=tuple(sorted(ids))) for pid, ids in sorted(package_cpus.items())
    )
    pci = read_pci_devices(sysfs, node_tuple, online)
    gpus = number_gpus(pci)
    nics = read_nics(sysfs, pci, node_tuple)
    return Topology(
        packages=packages_out,
        numa_nodes=node_tuple,
        cpus=cpus,
        pci_devices=pci,
        gpus=gpus,
        gpu_links=gpu_links(gpus, pci),
        source=f"sysfs:{sysfs}",
        nics=nics,
        gpu_nic_links=gpu_nic_links(gpus, nics, pci),
    )
