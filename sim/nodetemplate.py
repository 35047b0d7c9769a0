"""The hardware shape of a simulated node: :class:`NodeTemplate`.

A :class:`NodeTemplate` is a :class:`~toposcope.topology.Topology` (sockets, NUMA nodes with
their SLIT distances and memory, CPUs, PCI devices, GPUs and the GPU link matrix) plus what
the topology model does not carry but the simulator needs: which PCIe switch each GPU sits
behind, which GPUs share an NVLink fabric, the GPU model and memory, and the NICs.

Each GPU pair has a link tier of the simulator's truth (:meth:`NodeTemplate.link_tier`: an
NVSwitch, ``n`` direct NVLinks, one PCIe switch, the host bridge, the socket's fabric, the
inter-socket link), read from the topology's link matrix (``NV#``, ``PIX``/``PXB``,
``PHB``, ``NODE``, ``SYS``) the way an imported machine's hwloc XML or sysfs gives it, and
from the template's switch and NVLink facts where the matrix has no entry. The coarser link
classes of :data:`LINK_CLASSES` (:meth:`NodeTemplate.link_class`) label a pair in the
ground-truth metrics.

The built-in templates and the importers are in :mod:`toposcope.sim.templates`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toposcope.topology.model import GpuLink, LinkType, Topology
from toposcope.topology.pcie import pcie_link

#: Link classes of a GPU pair, best first (the keys of the model's link factors).
LINK_NVLINK = "nvlink"
LINK_SWITCH = "same-switch"
LINK_CROSS_SWITCH = "cross-switch"
LINK_CROSS_SOCKET = "cross-socket"
LINK_CROSS_NODE = "cross-node"
LINK_CLASSES = (LINK_NVLINK, LINK_SWITCH, LINK_CROSS_SWITCH, LINK_CROSS_SOCKET, LINK_CROSS_NODE)

#: Link tiers of a GPU pair within a node (the truth's ``links`` keys, best first).
TIER_NVSWITCH = "nvswitch"
TIER_NVLINK = "nvlink"
TIER_PCIE_SWITCH = "pcie-switch"
TIER_HOST_BRIDGE = "host-bridge"
TIER_SAME_SOCKET = "same-socket"
TIER_CROSS_SOCKET = "cross-socket"
#: The link class each tier is labelled with.
TIER_CLASS = {
    TIER_NVSWITCH: LINK_NVLINK,
    TIER_NVLINK: LINK_NVLINK,
    TIER_PCIE_SWITCH: LINK_SWITCH,
    TIER_HOST_BRIDGE: LINK_CROSS_SWITCH,
    TIER_SAME_SOCKET: LINK_CROSS_SWITCH,
    TIER_CROSS_SOCKET: LINK_CROSS_SOCKET,
}
#: A pair's tier and, for direct NVLinks, how many links join it (``None`` when unknown).
LinkTier = tuple[str, int | None]


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
    #: (GPU, GPU) -> link tier, both orders
    tiers: dict[tuple[int, int], LinkTier]
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
            tiers={},
        )
        object.__setattr__(self, "_d", derived)
        links = {link.pair: link for link in self.topology.gpu_links}
        for a in self.gpus:
            for b in self.gpus:
                if a.index != b.index:
                    found = links.get((a.index, b.index)) or links.get((b.index, a.index))
                    derived.tiers[(a.index, b.index)] = self._tier(a, b, found)

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

    def _same_package(self, a: GpuSpec, b: GpuSpec) -> bool:
        """Whether two GPUs hang off NUMA nodes of one known socket."""
        pa, pb = self.package_of_node(a.numa_node), self.package_of_node(b.numa_node)
        return pa is not None and pa == pb

    def _tier(self, a: GpuSpec, b: GpuSpec, link: GpuLink | None) -> LinkTier:
        """A pair's tier from its entry in the link matrix, else from the GPU specs.

        ``NV#`` through NVSwitches (or GPUs of an ``nvswitch`` fabric) is the NVSwitch tier,
        other ``NV#`` pairs have ``#`` direct links; ``PIX`` and ``PXB`` (one switch, or a
        cascade of switches below the root port) are the PCIe-switch tier; ``PHB`` the host
        bridge; ``NODE`` (root complexes of one NUMA node) is priced as the host bridge too;
        ``SYS`` is the socket's fabric between two NUMA nodes of one socket, else the link
        between sockets.
        """
        fabric = a.nvlink_group is not None and a.nvlink_group == b.nvlink_group
        if link is None:
            if fabric:
                return (TIER_NVSWITCH if a.nvlink_group == "nvswitch" else TIER_NVLINK, None)
            if a.switch is not None and a.switch == b.switch:
                return (TIER_PCIE_SWITCH, None)
            if a.numa_node is not None and a.numa_node == b.numa_node:
                return (TIER_HOST_BRIDGE, None)
            return (TIER_SAME_SOCKET if self._same_package(a, b) else TIER_CROSS_SOCKET, None)
        kind = link.type
        if kind is LinkType.NVLINK:
            if link.nvswitch or (fabric and a.nvlink_group == "nvswitch"):
                return (TIER_NVSWITCH, None)
            digits = link.link.strip()[2:]
            return (TIER_NVLINK, int(digits) if digits.isdigit() else None)
        if kind in (LinkType.PIX, LinkType.PXB):
            return (TIER_PCIE_SWITCH, None)
        if kind in (LinkType.PHB, LinkType.NODE):
            return (TIER_HOST_BRIDGE, None)
        return (TIER_SAME_SOCKET if self._same_package(a, b) else TIER_CROSS_SOCKET, None)

    def link_tier(self, a: int, b: int) -> LinkTier:
        """The truth's link tier of GPUs ``a`` and ``b`` and their direct NVLink count (see
        the module docstring); a GPU with itself is on one switch.
        """
        if a == b:
            self.gpu(a)
            return (TIER_PCIE_SWITCH, None)
        found = self._d.tiers.get((a, b))
        if found is None:
            self.gpu(a)
            self.gpu(b)
            raise IndexError(f"template {self.name} has no link between GPUs {a} and {b}")
        return found

    def link_class(self, a: int, b: int) -> str:
        """How GPUs ``a`` and ``b`` talk, coarsely: NVLink, one PCIe switch, across switches
        of one socket, or across sockets (the classes of :data:`LINK_CLASSES`, from
        :meth:`link_tier`).
        """
        return TIER_CLASS[self.link_tier(a, b)[0]]

    def pcie_label(self, a: int, b: int) -> str:
        """The ``nvidia-smi topo -m`` PCIe label of a pair (NVLink left aside): the link
        matrix's label for a PCIe pair, else the PCIe path of the two devices when known,
        else the template's switches and NUMA nodes.
        """
        if a == b:
            return "X"
        ga, gb = self.gpu(a), self.gpu(b)
        link = self.topology.gpu_link(a, b)
        if link is not None and link.type is not LinkType.NVLINK:
            return link.link
        if ga.switch is not None and ga.switch == gb.switch:
            return self.same_switch_label
        devices = {d.bus_id: d for d in self.topology.pci_devices}
        da, db = devices.get(ga.pci_bus_id), devices.get(gb.pci_bus_id)
        if da is not None and db is not None and da.host_bridge is not None:
            return pcie_link(da, db).value
        if ga.numa_node is not None and ga.numa_node == gb.numa_node:
            return "NODE"
        return "SYS"
