"""Where a container's devices sit against where its CPUs and memory are: NUMA alignment.

The kubelet's Topology Manager aligns device-plugin devices with exclusive CPUs and memory
only under its ``restricted`` and ``single-numa-node`` policies; devices allocated through
Dynamic Resource Allocation take no part in it at all, so a Guaranteed pod's DRA GPU and its
static-policy CPUs can sit on different NUMA nodes with nothing saying so. This module says
so, per container and device, against three things:

* ``exclusive_cpus``: the CPUs the kubelet's CPU manager gave the container (pod-resources
  ``cpu_ids``);
* ``cpuset_cpus`` and ``cpuset_mems``: where the container may run and allocate memory (its
  cgroup's ``cpuset.cpus.effective`` and ``cpuset.mems.effective``).

A device is *aligned* against a set when its NUMA node is one of the set's nodes. How far
it is otherwise is the SLIT distance from the device's node to the set's nearest node (10 =
local) and the *tier* that distance crosses: ``numa`` (same node), ``socket`` (another node
of the same package), ``system`` (another package). A device's NUMA node comes from its
ResourceSlice (``resource.kubernetes.io/numaNode``, a driver's own), else from the host's
topology through the GPU's UUID or the PCI address; a device whose node is unknown is not
judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from toposcope.kubeapi.resourceslices import SliceDevice
from toposcope.topology.model import Topology

#: the SLIT distance of a node to itself
LOCAL = 10


class Tier(StrEnum):
    """How far apart two NUMA nodes are."""

    NUMA = "numa"
    SOCKET = "socket"
    SYSTEM = "system"


class Against(StrEnum):
    """What a device's NUMA node is compared with (module docstring)."""

    EXCLUSIVE_CPUS = "exclusive_cpus"
    CPUSET_CPUS = "cpuset_cpus"
    CPUSET_MEMS = "cpuset_mems"


@dataclass(frozen=True)
class Alignment:
    """One device against one of the container's sets (module docstring)."""

    against: Against
    aligned: bool
    distance: int
    tier: Tier


def device_numa(
    device: SliceDevice | None, topology: Topology, gpu_index: int | None = None
) -> int | None:
    """The NUMA node of a published device: its attribute, else the host's topology for its
    GPU (by index) or PCI address; ``None`` when nothing says.
    """
    if device is not None and device.numa_node is not None:
        return device.numa_node
    if gpu_index is not None:
        for gpu in topology.gpus:
            if gpu.index == gpu_index and gpu.numa_node is not None:
                return gpu.numa_node
    address = device.pci_bus_id if device is not None else ""
    if address:
        for pci in topology.pci_devices:
            if pci.bus_id.lower() == address and pci.numa_node is not None:
                return pci.numa_node
    return None


def distance(topology: Topology, node: int, peer: int) -> int | None:
    """The SLIT distance between two nodes (10 for a node to itself); ``None`` when unknown."""
    if node == peer:
        return LOCAL
    found = topology.numa_node(node)
    return found.distances.get(peer) if found is not None else None


def tier(topology: Topology, node: int, peer: int) -> Tier:
    """The tier between two nodes; another package when the packages are unknown."""
    if node == peer:
        return Tier.NUMA
    packages = topology.node_to_package()
    same = node in packages and packages.get(node) == packages.get(peer)
    return Tier.SOCKET if same else Tier.SYSTEM


def align(
    topology: Topology, node: int, against: Against, nodes: Iterable[int]
) -> Alignment | None:
    """``node`` (a device's) against a set's NUMA ``nodes``; ``None`` for an empty set."""
    peers = sorted(set(nodes))
    if not peers:
        return None
    if node in peers:
        return Alignment(against, True, LOCAL, Tier.NUMA)
    nearest = min(peers, key=lambda p: (distance(topology, node, p) or 1000, p))
    far = distance(topology, node, nearest)
    return Alignment(against, False, far if far is not None else 0, tier(topology, node, nearest))


def nodes_of_cpus(cpus: Iterable[int], cpu_node: Mapping[int, int]) -> set[int]:
    """The NUMA nodes of ``cpus`` (CPUs of no known node are left out)."""
    return {cpu_node[c] for c in cpus if c in cpu_node}


def alignments(
    topology: Topology,
    node: int,
    exclusive: Iterable[int] = (),
    cpuset_cpus: Iterable[int] = (),
    cpuset_mems: Iterable[int] = (),
) -> list[Alignment]:
    """A device on ``node`` against each non-empty set of its container."""
    cpu_node = topology.cpu_to_node()
    found = [
        align(topology, node, Against.EXCLUSIVE_CPUS, nodes_of_cpus(exclusive, cpu_node)),
        align(topology, node, Against.CPUSET_CPUS, nodes_of_cpus(cpuset_cpus, cpu_node)),
        align(topology, node, Against.CPUSET_MEMS, cpuset_mems),
    ]
    return [a for a in found if a is not None]


__all__ = [
    "LOCAL",
    "Against",
    "Alignment",
    "Tier",
    "align",
    "alignments",
    "device_numa",
    "distance",
    "nodes_of_cpus",
    "tier",
]
