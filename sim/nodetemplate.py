"""The hardware shape of a simulated node: :class:`NodeTemplate`.

A :class:`NodeTemplate` is a :class:`~toposcope.topology.Topology` (sockets, NUMA nodes with
their SLIT distances and memory, CPUs, PCI devices, GPUs and the GPU link matrix) plus what
the topology model does not carry but the simulator needs: which PCIe switch each GPU sits
behind, which GPUs share an NVLink fabric, the GPU model and memory, and the NICs. GPU pairs
are ranked by the link classes of :data:`LINK_CLASSES`; imported templates know no PCIe
switches, so their pairs are classed by NUMA node and socket only (see
:meth:`NodeTemplate.link_class`).

The built-in templates and the importers are in :mod:`toposcope.sim.templates`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toposcope.topology.model import Topology

#: Link classes of a GPU pair, best first (the keys of the model's link factors).
LINK_NVLINK = "nvlink"
LINK_SWITCH = "same-switch"
LINK_CROSS_SWITCH = "cross-switch"
LINK_CROSS_SOCKET = "cross-socket"
LINK_CROSS_NODE = "cross-node"
LINK_CLASSES = (LINK_NVLINK, LINK_SWITCH, LINK_CROSS_SWITCH, LINK_CROSS_SOCKET, LINK_CROSS_NODE)


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
