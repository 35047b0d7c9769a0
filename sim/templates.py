"""Node templates: the hardware shape of a simulated node.

A :class:`NodeTemplate` is a :class:`~toposcope.topology.Topology` (sockets, NUMA nodes with
their SLIT distances and memory, CPUs, PCI devices, GPUs and the GPU link matrix) plus what
the topology model does not carry but the simulator needs: which PCIe switch each GPU sits
behind, which GPUs share an NVLink fabric, the GPU model and memory, and the NICs.

Built-in templates (:data:`BUILTIN_TEMPLATES`):

* ``dgx-a100``: NVIDIA DGX A100, 2 AMD EPYC 7742 sockets in NPS2 (4 NUMA nodes, 256 CPUs),
  8 A100-SXM4-80GB on 6 NVSwitches (NV12 between every pair), two GPUs behind each pair of
  PCIe switches; the same PCI ids and NUMA nodes as the fake NVML's ``dgx-a100.yaml``.
* ``pcie-4gpu``: 2 sockets x 24 cores x 2 threads, 4 NVIDIA L40S: GPU0 and GPU1 behind one
  PCIe switch on socket 0, GPU2 and GPU3 on two root ports of socket 1 (as the fake NVML's
  ``pcie-4gpu.yaml``).
* ``pcie-8gpu-2sw``: 2 sockets x 32 cores x 2 threads, 8 A100-PCIE-40GB, two PCIe switches
  per socket with two GPUs and one NIC each.
* ``xeon-2s``: the 2-socket Intel Xeon Gold 6132 of the CRI-RM measurement (2 x 14 cores x 2
  threads, 2 NUMA nodes, 192 GB), no GPU.

Templates can also be imported from an hwloc XML file (``lstopo --of xml``) or a sysfs
root through the topology builders (:func:`template_from_hwloc_xml`,
:func:`template_from_sysfs`); PCIe switches are then unknown, so GPU pairs are classed by
NUMA node and socket only (see :meth:`NodeTemplate.link_class`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import (
    PCI_VENDOR_NVIDIA,
    Cpu,
    Gpu,
    GpuLink,
    NumaNode,
    Package,
    PciDevice,
    Topology,
)
from toposcope.topology.sysfs import build_from_sysfs

GIB = 1024**3

#: Link classes of a GPU pair, best first (the keys of the model's link factors).
LINK_NVLINK = "nvlink"
LINK_SWITCH = "same-switch"
LINK_CROSS_SWITCH = "cross-switch"
LINK_CROSS_SOCKET = "cross-socket"
LINK_CROSS_NODE = "cross-node"
LINK_CLASSES = (LINK_NVLINK, LINK_SWITCH, LINK_CROSS_SWITCH, LINK_CROSS_SOCKET, LINK_CROSS_NODE)

_PCI_VENDOR_MELLANOX = 0x15B3
_PCI_VENDOR_BROADCOM_PLX = 0x10B5
_CLASS_3D = 0x0302
_CLASS_INFINIBAND = 0x0207
_CLASS_ETHERNET = 0x0200
_CLASS_PCI_BRIDGE = 0x0604


@dataclass(frozen=True)
class GpuSpec:
    """A template GPU: PCI id, NUMA node, switch and NVLink fabric (``None``: none)."""

    index: int
    pci_bus_id: str
    numa_node: int | None
    switch: str | None = None
    nvlink_group: str | None = None
    uuid: str = ""


@dataclass(frozen=True)
class NicSpec:
    """A network adapter: PCI id, NUMA node, speed and the switch it sits behind."""

    name: str
    pci_bus_id: str
    numa_node: int | None
    speed_gbps: int = 200
    switch: str | None = None


#: Where a job's threads land for a cpuset: (effective CPUs, thread share per NUMA node,
#: each thread's CPU).
Placement = tuple[tuple[int, ...], dict[int, float], tuple[int, ...]]


@dataclass
class _Derived:
    """Lookups computed once per template (the model asks for them on every evaluation)."""

    cpus: tuple[int, ...]
    cpu_set: frozenset[int]
    numa_ids: tuple[int, ...]
    max_distance: int
    node_package: dict[int, int]
    cpu_node: dict[int, int]
    distances: dict[tuple[int, int], int]
    gpus: dict[int, GpuSpec]
    #: (cpuset as given, threads) -> (effective CPUs, thread share per NUMA node).
    placements: dict[tuple[tuple[int, ...], int], Placement] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeTemplate:
    """The hardware of one simulated node (see the module docstring).

    ``topology`` is what a real node's sysfs plus NVML would show; ``gpus`` adds the
    switch and NVLink facts that :meth:`link_class` ranks GPU pairs by.
    """

    name: str
    topology: Topology
    gpus: tuple[GpuSpec, ...] = ()
    nics: tuple[NicSpec, ...] = ()
    gpu_model: str = ""
    gpu_pci_device_id: int = 0x20B210DE
    gpu_memory_bytes: int = 0
    gpu_power_limit_watts: float = 400.0
    gpu_idle_watts: float = 55.0
    same_switch_label: str = "PIX"
    description: str = ""
    _d: _Derived = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        cpu_node = self.topology.cpu_to_node()
        ids = tuple(n.id for n in self.topology.numa_nodes)
        distances: dict[tuple[int, int], int] = {}
        for node in self.topology.numa_nodes:
            for peer in ids:
                distances[(node.id, peer)] = 10 if peer == node.id else node.distances.get(peer, 20)
        derived = _Derived(
            cpus=tuple(sorted(cpu_node)),
            cpu_set=frozenset(cpu_node),
            numa_ids=ids,
            max_distance=max(distances.values(), default=10),
            node_package=self.topology.node_to_package(),
            cpu_node=cpu_node,
            distances=distances,
            gpus={g.index: g for g in self.gpus},
        )
        object.__setattr__(self, "_d", derived)

    @property
    def cpus(self) -> tuple[int, ...]:
        """Every CPU listed under a NUMA node, ascending."""
        return self._d.cpus

    @property
    def cpu_set(self) -> frozenset[int]:
        """Every CPU listed under a NUMA node, as a set."""
        return self._d.cpu_set

    @property
    def numa_ids(self) -> tuple[int, ...]:
        """NUMA node ids in topology order."""
        return self._d.numa_ids

    def placement_cache(self) -> dict[tuple[tuple[int, ...], int], Placement]:
        """The model's memo of where threads land for a cpuset (bounded by the model)."""
        return self._d.placements

    def numa_of_cpu(self, cpu: int) -> int:
        """The NUMA node of a CPU (``KeyError`` for a CPU not on this node)."""
        return self._d.cpu_node[cpu]

    def node_cpus(self, numa_node: int) -> tuple[int, ...]:
        """CPUs of one NUMA node."""
        node = self.topology.numa_node(numa_node)
        return node.cpus if node is not None else ()

    def package_of_node(self, numa_node: int | None) -> int | None:
        """The socket a NUMA node belongs to."""
        if numa_node is None:
            return None
        return self._d.node_package.get(numa_node)

    def distance(self, a: int, b: int) -> int:
        """SLIT distance between two NUMA nodes (10 local; 20 assumed when unknown)."""
        if a == b:
            return 10
        return self._d.distances.get((a, b), 20)

    def max_distance(self) -> int:
        """The largest SLIT distance between two nodes (10 on a single-node machine)."""
        return self._d.max_distance

    def gpu(self, index: int) -> GpuSpec:
        """The GPU with this index (``IndexError`` when absent)."""
        found = self._d.gpus.get(index)
        if found is None:
            raise IndexError(f"template {self.name} has no GPU {index}")
        return found

    def link_class(self, a: int, b: int) -> str:
        """How GPUs ``a`` and ``b`` talk: NVLink, one PCIe switch, across switches of one
        socket, or across sockets (the classes of :data:`LINK_CLASSES`).

        Without switch information (imported templates) two GPUs of one socket count as
        ``cross-switch``, the cautious guess.
        """
        if a == b:
            return LINK_SWITCH
        ga, gb = self.gpu(a), self.gpu(b)
        if ga.nvlink_group is not None and ga.nvlink_group == gb.nvlink_group:
            return LINK_NVLINK
        if ga.switch is not None and ga.switch == gb.switch:
            return LINK_SWITCH
        pa, pb = self.package_of_node(ga.numa_node), self.package_of_node(gb.numa_node)
        if pa is None or pb is None or pa != pb:
            return LINK_CROSS_SOCKET
        return LINK_CROSS_SWITCH

    def pcie_label(self, a: int, b: int) -> str:
        """The ``nvidia-smi topo -m`` PCIe label of a pair (NVLink left aside)."""
        if a == b:
            return "X"
        ga, gb = self.gpu(a), self.gpu(b)
        if ga.switch is not None and ga.switch == gb.switch:
            return self.same_switch_label
        if ga.numa_node is not None and ga.numa_node == gb.numa_node:
            return "NODE"
        return "SYS"


# -- building topologies ---------------------------------------------------------------------


def _cpus_of(ranges: list[tuple[int, int]]) -> tuple[int, ...]:
    return tuple(c for first, last in ranges for c in range(first, last + 1))


def _machine(
    *,
    sockets: int,
    cores_per_socket: int,
    numa_per_socket: int,
    memory_per_node: int,
    distances: dict[tuple[bool, bool], int],
) -> tuple[tuple[Package, ...], tuple[NumaNode, ...], tuple[Cpu, ...]]:
    """Packages, NUMA nodes and CPUs numbered the Linux way: first thread of every core
    (socket by socket), then the second threads (``0-N`` then ``N+1-2N``).

    ``distances`` maps (same node, same socket) to the SLIT value.
    """
    total_cores = sockets * cores_per_socket
    cores_per_node = cores_per_socket // numa_per_socket
    node_cpus: dict[int, list[int]] = {}
    node_package: dict[int, int] = {}
    cpus: list[Cpu] = []
    for thread in range(2):
        for core in range(total_cores):
            cpu = thread * total_cores + core
            package = core // cores_per_socket
            node = core // cores_per_node
            node_cpus.setdefault(node, []).append(cpu)
            node_package[node] = package
            cpus.append(Cpu(cpu, package, core % cores_per_socket, node))
    node_ids = sorted(node_cpus)
    nodes = tuple(
        NumaNode(
            id=n,
            package=node_package[n],
            cpus=tuple(sorted(node_cpus[n])),
            memory_bytes=memory_per_node,
            distances={
                peer: distances[(peer == n, node_package[peer] == node_package[n])]
                for peer in node_ids
            },
        )
        for n in node_ids
    )
    packages = tuple(
        Package(p, tuple(sorted(c.id for c in cpus if c.package == p))) for p in range(sockets)
    )
    return packages, nodes, tuple(sorted(cpus, key=lambda c: c.id))


def _pci(
    bus_id: str, vendor: int, device: int, class_id: int, node: int, nodes: tuple[NumaNode, ...]
) -> PciDevice:
    local = next(n.cpus for n in nodes if n.id == node)
    return PciDevice(bus_id, vendor, device, class_id, node, local)


def _assemble(
    name: str,
    packages: tuple[Package, ...],
    nodes: tuple[NumaNode, ...],
    cpus: tuple[Cpu, ...],
    gpus: list[GpuSpec],
    nics: list[NicSpec],
    switches: dict[str, tuple[str, int]],
    *,
    gpu_device: int,
    gpu_model: str,
    nv_label: str = "NV12",
    same_switch_label: str = "PIX",
) -> Topology:
    """A topology whose PCI devices are the switches, GPUs and NICs given."""
    pci: list[PciDevice] = []
    for bus_id, node in switches.values():
        pci.append(_pci(bus_id, _PCI_VENDOR_BROADCOM_PLX, 0x8796, _CLASS_PCI_BRIDGE, node, nodes))
    for gpu in gpus:
        assert gpu.numa_node is not None
        pci.append(
            _pci(gpu.pci_bus_id, PCI_VENDOR_NVIDIA, gpu_device, _CLASS_3D, gpu.numa_node, nodes)
        )
    for nic in nics:
        assert nic.numa_node is not None
        pci.append(
            _pci(
                nic.pci_bus_id,
                _PCI_VENDOR_MELLANOX,
                0x101B,
                _CLASS_INFINIBAND,
                nic.numa_node,
                nodes,
            )
        )
    pci.sort(key=lambda d: d.bus_id)
    node_local = {n.id: n.cpus for n in nodes}
    model_gpus = tuple(
        Gpu(
            index=g.index,
            pci_bus_id=g.pci_bus_id,
            numa_node=g.numa_node,
            local_cpus=node_local.get(g.numa_node, ()) if g.numa_node is not None else (),
            vendor=PCI_VENDOR_NVIDIA,
            model=gpu_model,
            uuid=g.uuid or None,
        )
        for g in gpus
    )
    links: list[GpuLink] = []
    for a in gpus:
        for b in gpus:
            if a.index == b.index:
                continue
            if a.nvlink_group is not None and a.nvlink_group == b.nvlink_group:
                label = nv_label
            elif a.switch is not None and a.switch == b.switch:
                label = same_switch_label
            elif a.numa_node == b.numa_node:
                label = "NODE"
            else:
                label = "SYS"
            links.append(GpuLink(a.index, b.index, label))
    return Topology(
        packages=packages,
        numa_nodes=nodes,
        cpus=cpus,
        pci_devices=tuple(pci),
        gpus=model_gpus,
        gpu_links=tuple(links),
        source=f"template:{name}",
    )


def _dgx_a100() -> NodeTemplate:
    packages, nodes, cpus = _machine(
        sockets=2,
        cores_per_socket=64,
        numa_per_socket=2,
        memory_per_node=256 * GIB,
        distances={(True, True): 10, (False, True): 12, (False, False): 32},
    )
    # (bus, NUMA node) per GPU, as in the fake NVML's dgx-a100.yaml; switch pairs are PXB.
    layout = [
        ("07", 1),
        ("0f", 1),
        ("47", 0),
        ("4e", 0),
        ("87", 3),
        ("90", 3),
        ("b7", 2),
        ("bd", 2),
    ]
    uuid_tails = ["07", "0f", "47", "4e", "87", "90", "b7", "bd"]
    gpus = [
        GpuSpec(
            index=i,
            pci_bus_id=f"0000:{bus}:00.0",
            numa_node=node,
            switch=f"sw{i // 2}",
            nvlink_group="nvswitch",
            uuid=f"GPU-5d1a8c2e-{uuid_tails[i]}a1-4f3e-9b6c-1e0d2a3b4c0{i + 1}",
        )
        for i, (bus, node) in enumerate(layout)
    ]
    nic_layout = [
        ("0c", 1),
        ("12", 1),
        ("4b", 0),
        ("54", 0),
        ("8d", 3),
        ("94", 3),
        ("ba", 2),
        ("cc", 2),
    ]
    nics = [
        NicSpec(f"mlx5_{i}", f"0000:{bus}:00.0", node, 200, f"sw{i // 2}")
        for i, (bus, node) in enumerate(nic_layout)
    ]
    switches = {
        f"sw{i}": (f"0000:{bus}:00.0", node)
        for i, (bus, node) in enumerate([("05", 1), ("45", 0), ("85", 3), ("b5", 2)])
    }
    topology = _assemble(
        "dgx-a100",
        packages,
        nodes,
        cpus,
        gpus,
        nics,
        switches,
        gpu_device=0x20B2,
        gpu_model="NVIDIA A100-SXM4-80GB",
        same_switch_label="PXB",
    )
    return NodeTemplate(
        name="dgx-a100",
        topology=topology,
        gpus=tuple(gpus),
        nics=tuple(nics),
        gpu_model="NVIDIA A100-SXM4-80GB",
        gpu_pci_device_id=0x20B210DE,
        gpu_memory_bytes=80 * GIB,
        gpu_power_limit_watts=400.0,
        gpu_idle_watts=60.0,
        same_switch_label="PXB",
        description="NVIDIA DGX A100: 2x EPYC 7742 (NPS2, 4 NUMA nodes), "
        "8x A100-SXM4-80GB on NVSwitch",
    )


def _pcie_4gpu() -> NodeTemplate:
    packages, nodes, cpus = _machine(
        sockets=2,
        cores_per_socket=24,
        numa_per_socket=1,
        memory_per_node=256 * GIB,
        distances={(True, True): 10, (False, False): 21},
    )
    gpus = [
        GpuSpec(
            0, "0000:17:00.0", 0, "socket0-switch", None, "GPU-9e7c3a10-17b2-4c55-8d21-6f0a1b2c3d01"
        ),
        GpuSpec(
            1, "0000:18:00.0", 0, "socket0-switch", None, "GPU-9e7c3a10-18b2-4c55-8d21-6f0a1b2c3d02"
        ),
        GpuSpec(2, "0000:ca:00.0", 1, None, None, "GPU-9e7c3a10-cab2-4c55-8d21-6f0a1b2c3d03"),
        GpuSpec(3, "0000:e1:00.0", 1, None, None, "GPU-9e7c3a10-e1b2-4c55-8d21-6f0a1b2c3d04"),
    ]
    nics = [NicSpec("mlx5_0", "0000:31:00.0", 0, 100), NicSpec("mlx5_1", "0000:b1:00.0", 1, 100)]
    switches = {"socket0-switch": ("0000:15:00.0", 0)}
    topology = _assemble(
        "pcie-4gpu", packages, nodes, cpus, gpus, nics, switches,
        gpu_device=0x26B9, gpu_model="NVIDIA L40S",
    )  # fmt: skip
    return NodeTemplate(
        name="pcie-4gpu",
        topology=topology,
        gpus=tuple(gpus),
        nics=tuple(nics),
        gpu_model="NVIDIA L40S",
        gpu_pci_device_id=0x26B910DE,
        gpu_memory_bytes=48305799168,
        gpu_power_limit_watts=350.0,
        gpu_idle_watts=35.0,
        description="2x 24-core sockets, 4x L40S: GPU0+1 on one switch (socket 0), GPU2, GPU3 "
        "on root ports of socket 1",
    )


def _pcie_8gpu_2sw() -> NodeTemplate:
    packages, nodes, cpus = _machine(
        sockets=2,
        cores_per_socket=32,
        numa_per_socket=1,
        memory_per_node=512 * GIB,
        distances={(True, True): 10, (False, False): 21},
    )
    buses = ["1a", "1b", "3d", "3e", "88", "89", "b1", "b2"]
    gpus = [
        GpuSpec(
            index=i,
            pci_bus_id=f"0000:{bus}:00.0",
            numa_node=i // 4,
            switch=f"s{i // 4}{'ab'[(i // 2) % 2]}",
            uuid=f"GPU-3c51b0a7-{bus}00-4a1e-8f60-7d2e9c4b5a0{i}",
        )
        for i, bus in enumerate(buses)
    ]
    nics = [
        NicSpec(f"mlx5_{i}", f"0000:{bus}:00.0", i // 2, 200, f"s{i // 2}{'ab'[i % 2]}")
        for i, bus in enumerate(["1c", "3f", "8a", "b3"])
    ]
    switches = {
        "s0a": ("0000:18:00.0", 0),
        "s0b": ("0000:3b:00.0", 0),
        "s1a": ("0000:86:00.0", 1),
        "s1b": ("0000:af:00.0", 1),
    }
    topology = _assemble(
        "pcie-8gpu-2sw", packages, nodes, cpus, gpus, nics, switches,
        gpu_device=0x20F1, gpu_model="NVIDIA A100-PCIE-40GB",
    )  # fmt: skip
    return NodeTemplate(
        name="pcie-8gpu-2sw",
        topology=topology,
        gpus=tuple(gpus),
        nics=tuple(nics),
        gpu_model="NVIDIA A100-PCIE-40GB",
        gpu_pci_device_id=0x20F110DE,
        gpu_memory_bytes=40 * GIB,
        gpu_power_limit_watts=250.0,
        gpu_idle_watts=35.0,
        description="2x 32-core sockets, 8x A100-PCIE-40GB, two PCIe switches per socket "
        "(2 GPUs + 1 NIC each)",
    )


def _xeon_2s() -> NodeTemplate:
    packages, nodes, cpus = _machine(
        sockets=2,
        cores_per_socket=14,
        numa_per_socket=1,
        memory_per_node=96 * GIB,
        distances={(True, True): 10, (False, False): 21},
    )
    nics = [NicSpec("eth0", "0000:18:00.0", 0, 25)]
    pci = (PciDevice("0000:18:00.0", 0x8086, 0x158B, _CLASS_ETHERNET, 0, nodes[0].cpus),)
    topology = Topology(
        packages=packages, numa_nodes=nodes, cpus=cpus, pci_devices=pci, source="template:xeon-2s"
    )
    return NodeTemplate(
        name="xeon-2s",
        topology=topology,
        nics=tuple(nics),
        description="2x Intel Xeon Gold 6132 (14 cores, 2 threads each), 2 NUMA nodes, 192 GB: "
        "the CRI-RM measurement machine",
    )


_BUILDERS = {
    "dgx-a100": _dgx_a100,
    "pcie-4gpu": _pcie_4gpu,
    "pcie-8gpu-2sw": _pcie_8gpu_2sw,
    "xeon-2s": _xeon_2s,
}

#: Names of the built-in templates.
BUILTIN_TEMPLATES: tuple[str, ...] = tuple(_BUILDERS)

_CACHE: dict[str, NodeTemplate] = {}


def builtin_template(name: str) -> NodeTemplate:
    """A built-in template by name; :class:`ConfigError` lists the known names otherwise."""
    if name not in _BUILDERS:
        raise ConfigError(
            f"unknown node template {name!r} (built-in: {', '.join(BUILTIN_TEMPLATES)})"
        )
    if name not in _CACHE:
        _CACHE[name] = _BUILDERS[name]()
    return _CACHE[name]


# -- importing ---------------------------------------------------------------------------------


def template_from_topology(
    name: str,
    topology: Topology,
    *,
    gpu_model: str | None = None,
    gpu_memory_bytes: int = 40 * GIB,
) -> NodeTemplate:
    """A template over a measured or imported topology.

    CPUs are completed from the NUMA nodes when the builder did not list them (hwloc XML
    gives packages and nodes), GPUs keep the builder's order and NUMA nodes. The topology
    has no PCIe switch facts, so no GPU pair is ``same-switch``; NVLink pairs are those its
    link matrix marks ``NV*``.
    """
    if not any(n.cpus for n in topology.numa_nodes):
        raise ConfigError(f"template {name}: the topology has no NUMA node with CPUs")
    cpus = topology.cpus
    if not cpus:
        package_of = {c: p.id for p in topology.packages for c in p.cpus}
        cpus = tuple(
            Cpu(c, package_of.get(c), None, n.id) for n in topology.numa_nodes for c in n.cpus
        )
        cpus = tuple(sorted(cpus, key=lambda c: c.id))
    nvlinked = {
        frozenset((link.gpu, link.peer_gpu))
        for link in topology.gpu_links
        if link.link.upper().startswith("NV")
    }
    gpus = tuple(
        GpuSpec(
            index=g.index,
            pci_bus_id=g.pci_bus_id or f"0000:{0x10 + g.index:02x}:00.0",
            numa_node=g.numa_node,
            nvlink_group="nvlink" if any(g.index in pair for pair in nvlinked) else None,
            uuid=g.uuid or "",
        )
        for g in topology.gpus
    )
    model = gpu_model or next((g.model for g in topology.gpus if g.model), None) or "GPU"
    return NodeTemplate(
        name=name,
        topology=Topology(
            packages=topology.packages,
            numa_nodes=topology.numa_nodes,
            cpus=cpus,
            pci_devices=topology.pci_devices,
            gpus=topology.gpus,
            gpu_links=topology.gpu_links,
            source=topology.source,
        ),
        gpus=gpus,
        gpu_model=model,
        gpu_memory_bytes=gpu_memory_bytes if gpus else 0,
        description=f"imported from {topology.source}",
    )


def template_from_hwloc_xml(path: Path | str, name: str | None = None) -> NodeTemplate:
    """Import a template from an hwloc XML file (``lstopo --of xml``, hwloc v1, v2 or 3.0)."""
    path = Path(path)
    return template_from_topology(name or path.stem, build_from_hwloc_xml(path))


def template_from_sysfs(root: Path | str, name: str | None = None) -> NodeTemplate:
    """Import a template from a snapshot root holding ``sys/`` (and optionally ``proc/``)."""
    root = Path(root)
    proc = root / "proc"
    return template_from_topology(
        name or root.name, build_from_sysfs(root / "sys", proc if proc.is_dir() else None)
    )
