"""The typed, immutable topology model every part of toposcope reasons about.

A :class:`Topology` is a machine: packages (sockets) holding NUMA nodes holding CPUs, the
NUMA distance matrix, PCI devices with their NUMA node and local CPUs, the GPUs among them
and the GPU-to-GPU link matrix (``nvidia-smi topo -m`` vocabulary). Builders in this package
fill it from sysfs, hwloc XML, ``nvidia-smi topo -m`` text or NVML; nothing here reads the
outside world.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from toposcope.cpulist import format_cpulist


class LinkType(StrEnum):
    """GPU-to-GPU connection classes, best first, as ``nvidia-smi topo -m`` names them.

    ``NV`` stands for any number of bonded NVLinks (``NV1`` ... ``NV18``); the count is kept
    in :attr:`GpuLink.link` text.
    """

    NVLINK = "NV"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"

    @property
    def rank(self) -> int:
        """Lower is better: 0 for NVLink, 5 for a path across sockets (SYS)."""
        return _LINK_RANKS[self]


#: each class's :attr:`LinkType.rank`, its position in definition order (the advisor ranks
#: hundreds of thousands of GPU pairs a run)
_LINK_RANKS: dict[LinkType, int] = {t: i for i, t in enumerate(LinkType)}


def link_type(link: str) -> LinkType:
    """Classify a link label such as ``"NV12"``, ``"PIX"`` or legacy ``"SOC"`` (= SYS)."""
    text = link.strip().upper()
    if text.startswith("NV"):
        return LinkType.NVLINK
    if text == "SOC":
        return LinkType.SYS
    return LinkType(text)


#: The largest NUMA distance or latency a builder accepts. SLIT distances are bytes (10 is
#: local) and hwloc latencies are nanoseconds, so anything larger is garbage, not a machine.
MAX_NUMA_DISTANCE = 2**32 - 1
#: Decimal digits of the longest number :func:`parse_distance` converts.
_MAX_DISTANCE_DIGITS = 20


def check_distance(value: float) -> int:
    """``value`` as a whole NUMA distance, or ``ValueError`` saying why it cannot be one.

    Builders read distances from files anyone can edit; ``inf``, ``nan``, negative and
    absurdly large values would poison every placement decision, so they are refused here,
    in one place, and each builder decides whether to skip the matrix or refuse the file.
    """
    if not 0 <= value <= MAX_NUMA_DISTANCE:  # also false for nan and the infinities
        raise ValueError(f"NUMA distance {value!r} is not a number from 0 to {MAX_NUMA_DISTANCE}")
    return round(value)


def parse_distance(text: str) -> int:
    """A NUMA distance written as a decimal integer (``"21"``), checked by :func:`check_distance`.

    Only ASCII digits are accepted, and long numbers are refused before conversion, so a
    garbled file costs time linear in its size.
    """
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()) or len(digits) > _MAX_DISTANCE_DIGITS:
        shown = repr(digits) if len(digits) <= 24 else f"{digits[:24]!r}..."
        raise ValueError(
            f"NUMA distance {shown} is not a whole number from 0 to {MAX_NUMA_DISTANCE}"
        )
    return check_distance(int(digits))


#: The largest package (socket) or core id a builder accepts: the kernel keeps them as C
#: ``int`` (sysfs writes -1 for "unknown"). CPU and NUMA node ids are bounded tighter, below
#: :data:`~toposcope.cpulist.CPU_LIMIT`.
MAX_PACKAGE_ID = 2**31 - 1


def check_id(value: int, what: str, limit: int) -> int:
    """``value`` when it is an id from 0 to ``limit``, else ``ValueError`` naming ``what``.

    A CPU, NUMA node, package or core id read from a file is a key every locality decision
    joins on; a negative or absurd one (23 digits) is garbage, not a machine.
    """
    if not 0 <= value <= limit:
        shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:24]}..."
        raise ValueError(f"{what} {shown} is not a whole number from 0 to {limit:,}")
    return value


def parse_id(text: str, what: str, limit: int) -> int | None:
    """An id written in decimal (``"3"``), checked by :func:`check_id`; ``None`` for ``-1``.

    Only ASCII digits are accepted, and numbers longer than ``limit`` are refused before
    conversion, so a garbled file costs time linear in its size.
    """
    digits = text.strip()
    if digits == "-1":
        return None
    if not (digits.isascii() and digits.isdigit()) or len(digits) > len(str(limit)):
        shown = repr(digits) if len(digits) <= 24 else f"{digits[:24]!r}..."
        raise ValueError(f"{what} {shown} is not a whole number from 0 to {limit:,} (or -1)")
    return check_id(int(digits), what, limit)


PCI_VENDOR_NVIDIA = 0x10DE
PCI_VENDOR_AMD = 0x1002
#: PCI class ids (base class + subclass) that are GPUs, per vendor. NVIDIA data-centre GPUs are
#: 3D controllers (0x0302) and desktop ones VGA (0x0300). AMD compute GPUs are display (0x0380),
#: 3D (0x0302) or co-processor (0x0b40) functions; AMD VGA (0x0300) is left out because it is
#: usually the server's onboard video (ATI ES1000 and the like), not a GPU for jobs.
GPU_PCI_CLASSES: dict[int, frozenset[int]] = {
    PCI_VENDOR_NVIDIA: frozenset({0x0300, 0x0302, 0x0380}),
    PCI_VENDOR_AMD: frozenset({0x0302, 0x0380, 0x0B40}),
}


@dataclass(frozen=True)
class Cpu:
    """One logical CPU (hardware thread, hwloc's PU)."""

    id: int
    package: int | None
    core: int | None
    numa_node: int | None
    online: bool = True


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its CPUs (may be empty) and local memory (may be 0).

    ``distances`` maps peer node id to the SLIT distance (10 = local); empty when the
    platform publishes none.
    """

    id: int
    package: int | None
    cpus: tuple[int, ...]
    memory_bytes: int
    distances: Mapping[int, int] = field(default_factory=dict)

    @property
    def cpu_less(self) -> bool:
        """True for memory-only nodes (CXL, HBM, NVIDIA GPU memory on POWER9)."""
        return not self.cpus


@dataclass(frozen=True)
class Package:
    """One processor package (socket) and the CPUs it holds."""

    id: int
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class PciDevice:
    """A PCI function with its locality and its place in the PCIe tree.

    ``class_id`` is the 16-bit base class + subclass (``0x0302`` = 3D controller); ``vendor``,
    ``device`` and ``class_id`` are 0 when the source did not say (a sysfs directory without
    those files), as hwloc lists such functions. ``numa_node`` is ``None`` when no locality
    could be determined. ``bridges`` are the bus ids of the PCI-to-PCI bridges (PCIe switch
    ports, root ports) between the function and its host bridge, nearest first, and
    ``host_bridge`` names that host bridge (``None`` when unknown); they decide whether two
    GPUs talk through one switch (PIX), several bridges (PXB) or the host bridge (PHB).
    """

    bus_id: str
    vendor: int
    device: int
    class_id: int
    numa_node: int | None
    local_cpus: tuple[int, ...]
    bridges: tuple[str, ...] = ()
    host_bridge: str | None = None

    @property
    def is_gpu(self) -> bool:
        """True for NVIDIA or AMD GPUs (see :data:`GPU_PCI_CLASSES`), not onboard video."""
        return self.class_id in GPU_PCI_CLASSES.get(self.vendor, frozenset())


@dataclass(frozen=True)
class Gpu:
    """A GPU with its locality; ``index`` follows PCI bus order, NVIDIA's first, as nvidia-smi
    numbers GPUs (:func:`number_gpus`).
    """

    index: int
    pci_bus_id: str | None
    numa_node: int | None
    local_cpus: tuple[int, ...]
    vendor: int | None = None
    model: str | None = None
    uuid: str | None = None


def number_gpus(
    devices: Iterable[PciDevice],
    identities: Mapping[str, tuple[str | None, str | None]] | None = None,
) -> tuple[Gpu, ...]:
    """The GPUs among ``devices``, numbered: NVIDIA's first by PCI bus id, then the others by
    PCI bus id. ``identities`` maps a bus id to the model and UUID the source names, if any.

    nvidia-smi and NVML number NVIDIA GPUs in PCI bus order and list no other vendor's, so a
    machine's NVIDIA GPU ``N`` is nvidia-smi's GPU ``N`` even beside AMD ones. Every builder
    numbers GPUs by this one rule, so one machine's GPU ``N`` is the same device whichever
    source (sysfs, hwloc XML) it was read from.
    """
    named = identities or {}
    ordered = sorted(
        (d for d in devices if d.is_gpu), key=lambda d: (d.vendor != PCI_VENDOR_NVIDIA, d.bus_id)
    )
    gpus: list[Gpu] = []
    for index, d in enumerate(ordered):
        model, uuid = named.get(d.bus_id, (None, None))
        gpus.append(Gpu(index, d.bus_id, d.numa_node, d.local_cpus, d.vendor, model, uuid))
    return tuple(gpus)


@dataclass(frozen=True)
class GpuLink:
    """The connection between two GPUs as ``nvidia-smi topo -m`` reports it (``NV12``, ``PIX``).

    ``nvswitch`` is True when the NVLinks go through NVSwitches (every GPU of the switched
    set reaches every other at the same bandwidth) rather than directly from GPU to GPU.
    """

    gpu: int
    peer_gpu: int
    link: str
    nvswitch: bool = False

    @property
    def type(self) -> LinkType:
        """The link's class, for ranking (NVLink best, SYS worst)."""
        return link_type(self.link)

    @property
    def pair(self) -> tuple[int, int]:
        """The two GPU indexes, as a tuple."""
        return (self.gpu, self.peer_gpu)


class NicKind(StrEnum):
    """What a network adapter speaks: InfiniBand, RoCE (RDMA over Ethernet) or plain Ethernet."""

    INFINIBAND = "infiniband"
    ROCE = "roce"
    ETHERNET = "ethernet"


@dataclass(frozen=True)
class NicPort:
    """One port of a NIC: its number, state, rate and link layer, each ``None`` when unknown.

    ``state`` is the kernel's word in lower case (InfiniBand ``active``, ``down``, ``init``,
    ``armed``; Ethernet's ``operstate`` ``up``, ``down``); ``rate_gbps`` is the signalling
    rate in Gb/s (InfiniBand ``rate``, Ethernet ``speed``); ``link_layer`` is
    ``InfiniBand`` or ``Ethernet``.
    """

    number: int
    state: str | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None


@dataclass(frozen=True)
class Nic:
    """A network adapter: an RDMA device (``mlx5_0``) or a PCI network interface (``eth0``).

    ``numa_nodes`` is its locality as hwloc computes it, from its local CPUs (the nodes they
    touch), which may differ from the firmware's ``numa_node``; ``cpus`` are those local
    CPUs. ``pci_bus_id`` and ``kind`` are ``None`` when the source does not say
    (``nvidia-smi topo -m``), and ``interfaces`` names its network interfaces (``ib0``).
    """

    name: str
    pci_bus_id: str | None
    kind: NicKind | None
    numa_nodes: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()
    ports: tuple[NicPort, ...] = ()
    interfaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuNicLink:
    """How a GPU reaches a NIC, in the GPU pairs' PCIe labels (PIX, PXB, PHB, NODE, SYS)."""

    gpu: int
    nic: str
    link: str

    @property
    def type(self) -> LinkType:
        """The link's class, for ranking (PIX best, SYS worst)."""
        return link_type(self.link)


@dataclass(frozen=True)
class Topology:
    """A whole machine's topology as one immutable value.

    ``source`` says where it came from (``sysfs:/``, ``hwloc-xml:FILE``, ...) so that reports
    can tell a measured topology from an imported one.
    """

    packages: tuple[Package, ...] = ()
    numa_nodes: tuple[NumaNode, ...] = ()
    cpus: tuple[Cpu, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    gpu_links: tuple[GpuLink, ...] = ()
    source: str = ""
    nics: tuple[Nic, ...] = ()
    gpu_nic_links: tuple[GpuNicLink, ...] = ()

    def numa_node(self, node_id: int) -> NumaNode | None:
        """Return the NUMA node with OS index ``node_id``, or ``None``."""
        for node in self.numa_nodes:
            if node.id == node_id:
                return node
        return None

    def cpu_to_node(self) -> dict[int, int]:
        """Map every CPU listed under a NUMA node to that node's id."""
        return {cpu: node.id for node in self.numa_nodes for cpu in node.cpus}

    def node_to_package(self) -> dict[int, int]:
        """Map NUMA node ids to package ids where known."""
        return {n.id: n.package for n in self.numa_nodes if n.package is not None}

    def online_cpus(self) -> tuple[int, ...]:
        """CPUs that are online (all listed CPUs when online state is unknown)."""
        return tuple(c.id for c in self.cpus if c.online)

    def gpu_link(self, gpu: int, peer: int) -> GpuLink | None:
        """Return the link between two GPUs if the topology knows it."""
        for link in self.gpu_links:
            if link.gpu == gpu and link.peer_gpu == peer:
                return link
        return None

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON shape other parts and the tests rely on.

        Keys: ``packages[{id,cpus}]``, ``numa_nodes[{id,package,cpus,memory_bytes,distances}]``
        (``distances`` is the row ordered like ``numa_nodes``; empty when unknown),
        ``pci_devices[{bus_id,vendor,device,class,numa_node,local_cpus}]`` (ids as ``0x``
        hexadecimal strings), ``gpus[{index,pci_bus_id,numa_node,local_cpus}]`` and
        ``gpu_links[{gpu,peer_gpu,link}]``, ``nics[{name,pci_bus_id,kind,numa_nodes,cpus,
        interfaces,ports[{port,state,rate,link_layer}]}]`` (``rate`` in Gb/s) and
        ``gpu_nic_links[{gpu,nic,link}]``.
        """
        node_ids = [n.id for n in self.numa_nodes]
        return {
            "packages": [{"id": p.id, "cpus": list(p.cpus)} for p in self.packages],
            "numa_nodes": [
                {
                    "id": n.id,
                    "package": n.package,
                    "cpus": list(n.cpus),
                    "memory_bytes": n.memory_bytes,
                    "distances": (
                        [n.distances.get(peer) for peer in node_ids] if n.distances else []
                    ),
                }
                for n in self.numa_nodes
            ],
            "pci_devices": [
                {
                    "bus_id": d.bus_id,
                    "vendor": f"0x{d.vendor:04x}",
                    "device": f"0x{d.device:04x}",
                    "class": f"0x{d.class_id:04x}",
                    "numa_node": d.numa_node,
                    "local_cpus": list(d.local_cpus),
                }
                for d in self.pci_devices
            ],
            "gpus": [
                {
                    "index": g.index,
                    "pci_bus_id": g.pci_bus_id,
                    "numa_node": g.numa_node,
                    "local_cpus": list(g.local_cpus),
                }
                for g in self.gpus
            ],
            "gpu_links": [
                {"gpu": link.gpu, "peer_gpu": link.peer_gpu, "link": link.link}
                for link in self.gpu_links
            ],
            "nics": [
                {
                    "name": nic.name,
                    "pci_bus_id": nic.pci_bus_id,
                    "kind": None if nic.kind is None else nic.kind.value,
                    "numa_nodes": list(nic.numa_nodes),
                    "cpus": list(nic.cpus),
                    "interfaces": list(nic.interfaces),
                    "ports": [
                        {
                            "port": port.number,
                            "state": port.state,
                            "rate": port.rate_gbps,
                            "link_layer": port.link_layer,
                        }
                        for port in nic.ports
                    ],
                }
                for nic in self.nics
            ],
            "gpu_nic_links": [
                {"gpu": link.gpu, "nic": link.nic, "link": link.link} for link in self.gpu_nic_links
            ],
        }

    def to_text(self) -> str:
        """A human-readable summary, like a condensed ``lstopo`` plus ``nvidia-smi topo -m``."""
        lines = [f"Topology from {self.source or 'unknown source'}"]
        gib = 1024**3
        for pkg in self.packages:
            lines.append(f"Package {pkg.id}: cpus {format_cpulist(pkg.cpus) or '-'}")
        for node in self.numa_nodes:
            kind = " (memory only)" if node.cpu_less else ""
            pkg_text = "-" if node.package is None else str(node.package)
            lines.append(
                f"  NUMA node {node.id}{kind}: package {pkg_text}, "
                f"cpus {format_cpulist(node.cpus) or '-'}, memory {node.memory_bytes / gib:.1f} GiB"
            )
        if any(n.distances for n in self.numa_nodes):
            ids = [n.id for n in self.numa_nodes]
            lines.append("NUMA distances:")
            lines.append("        " + "".join(f"{i:>6}" for i in ids))
            for node in self.numa_nodes:
                row = "".join(f"{node.distances.get(i, '-'):>6}" for i in ids)
                lines.append(f"  {node.id:>4}  {row}")
        for gpu in self.gpus:
            node_text = "-" if gpu.numa_node is None else str(gpu.numa_node)
            lines.append(
                f"GPU {gpu.index}: {gpu.pci_bus_id or '?'} NUMA node {node_text}, "
                f"cpus {format_cpulist(gpu.local_cpus) or '-'}"
                + (f" ({gpu.model})" if gpu.model else "")
            )
        if self.gpu_links:
            indices = sorted({link.gpu for link in self.gpu_links})
            lines.append("GPU links:")
            lines.append("        " + "".join(f"{'GPU' + str(i):>7}" for i in indices))
            for gpu_index in indices:
                cells = []
                for peer in indices:
                    link = self.gpu_link(gpu_index, peer)
                    cells.append("X" if gpu_index == peer else (link.link if link else "-"))
                lines.append(f"  GPU{gpu_index:<3} " + "".join(f"{c:>7}" for c in cells))
            switched = sorted({i for link in self.gpu_links if link.nvswitch for i in link.pair})
            if switched:
                gpu_names = ", ".join(f"GPU{i}" for i in switched)
                lines.append(f"NVSwitch: {gpu_names} reach each other through NVSwitches")
        others = [d for d in self.pci_devices if not d.is_gpu]
        if others:
            lines.append(f"Other PCI devices: {len(others)}")
        lines.extend(self._nic_lines())
        return "\n".join(lines)

    def _nic_lines(self) -> list[str]:
        """The NICs and the GPU-to-NIC matrix, after everything else (none without NICs)."""
        lines: list[str] = []
        for nic in self.nics:
            nodes = ",".join(str(n) for n in nic.numa_nodes) or "-"
            ports = ", ".join(
                f"port {p.number} {p.state or '?'}"
                + (f" {p.rate_gbps:g} Gb/s" if p.rate_gbps is not None else "")
                for p in nic.ports
                if p.state is not None or p.rate_gbps is not None
            )
            lines.append(
                f"NIC {nic.name}: {nic.pci_bus_id or '?'} {nic.kind or 'unknown kind'}, "
                f"NUMA node {nodes}, cpus {format_cpulist(nic.cpus) or '-'}"
                + (f" ({ports})" if ports else "")
            )
        if self.gpu_nic_links:
            cells = {(link.gpu, link.nic): link.link for link in self.gpu_nic_links}
            names = [nic.name for nic in self.nics if any(n == nic.name for _, n in cells)]
            width = max(7, *(len(name) + 2 for name in names))
            lines.append("GPU-NIC links:")
            lines.append("        " + "".join(f"{name:>{width}}" for name in names))
            for gpu_index in sorted({gpu for gpu, _ in cells}):
                row = "".join(f"{cells.get((gpu_index, n), '-'):>{width}}" for n in names)
                lines.append(f"  GPU{gpu_index:<3} " + row)
        return lines
