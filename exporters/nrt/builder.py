"""The node's NodeResourceTopology (``topology.node.k8s.io/v1alpha2``), built from measurements.

:func:`build_nrt` is a pure function of the host topology (sysfs), one pod-resources answer
(``List`` and ``GetAllocatableResources``), the kubelet's Topology Manager settings and the
Node's name and uid. The object has:

* one zone per NUMA node, ``node-N`` of type ``Node``, its ``costs`` the SLIT distances to
  every node (itself included, 10 being local) when the firmware publishes them;
* per zone, each resource whose three numbers are all measured, as whole-number quantities:

  - ``cpu``: capacity the zone's online CPUs, allocatable those of them the kubelet can give
    (``GetAllocatableResources`` ``cpu_ids``), available those not held exclusively by a
    container (``List`` ``cpu_ids``). Left out when the kubelet reports no allocatable CPUs
    (CPU manager policy ``none``: no exclusive CPUs, nothing to align).
  - ``memory`` and huge pages (the Memory Manager's ``Static`` policy, Kubernetes >= 1.22):
    allocatable per NUMA node from ``GetAllocatableResources``, available minus what
    containers hold on that node. Capacity is the node's ``MemTotal`` (sysfs) for
    ``memory``; for huge pages it is the allocatable, as pod-resources reports no other
    number. A type a container holds across several NUMA nodes is left out everywhere (the
    split is not reported); so is a zone whose numbers contradict each other.
  - device-plugin resources (``nvidia.com/gpu``...) for devices whose plugin reports exactly
    one NUMA node: capacity and allocatable the zone's devices, available those no container
    holds. Devices without a topology hint are in no zone.

* ``attributes``: ``topologyManagerPolicy`` and ``topologyManagerScope`` as the kubelet states
  them (left out where it does not), and ``nodeTopologyPodsFingerprint`` of the listed pods.

Everything left out is said in :attr:`NrtBuild.notes`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from toposcope.exporters.nrt.fingerprint import (
    ATTRIBUTE,
    METHOD_ALL,
    METHOD_ATTRIBUTE,
    pods_fingerprint,
)
from toposcope.exporters.nrt.kubeletconfig import TopologyManagerConfig
from toposcope.exporters.nrt.ownership import MANAGED_BY, OWNER
from toposcope.host.podresources.records import (
    Allocatable,
    ContainerAllocation,
    MemoryAllocation,
    PodResources,
)
from toposcope.topology.model import NumaNode, Topology

GROUP_VERSION = "topology.node.k8s.io/v1alpha2"
KIND = "NodeResourceTopology"
ZONE_TYPE = "Node"


class NotMeasured(Exception):
    """The node's answer lacks what every zone needs; the message says what."""


@dataclass(frozen=True)
class NodeRef:
    """The Node the object describes and is owned by."""

    name: str
    uid: str


@dataclass(frozen=True)
class NrtBuild:
    """The object to write, and what was left out of it and why."""

    body: dict[str, Any]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Amount:
    capacity: int
    allocatable: int
    available: int


def zone_name(node_id: int) -> str:
    """A NUMA node's zone name, as scheduler-plugins expects it (``node-N``)."""
    return f"node-{node_id}"


def _costs(node: NumaNode) -> list[dict[str, Any]]:
    return [{"name": zone_name(peer), "value": d} for peer, d in sorted(node.distances.items())]


def _cpu(
    topology: Topology, allocatable: Allocatable, held: set[int], notes: list[str]
) -> dict[int, _Amount]:
    if not allocatable.cpu_ids:
        notes.append("cpu left out: the kubelet reports no allocatable CPUs (CPU manager none)")
        return {}
    online = set(topology.online_cpus()) or {c.id for c in topology.cpus}
    given = set(allocatable.cpu_ids)
    amounts: dict[int, _Amount] = {}
    for node in topology.numa_nodes:
        cpus = set(node.cpus) & online
        if cpus:
            zone_given = cpus & given
            amounts[node.id] = _Amount(len(cpus), len(zone_given), len(zone_given - held))
    return amounts


def _per_node(
    entries: Iterable[MemoryAllocation], spread: set[str], what: str, notes: list[str]
) -> dict[tuple[str, int], int]:
    sizes: dict[tuple[str, int], int] = defaultdict(int)
    for entry in entries:
        if len(entry.numa_nodes) == 1:
            sizes[(entry.memory_type, entry.numa_nodes[0])] += entry.size_bytes
        elif entry.memory_type not in spread:
            spread.add(entry.memory_type)
            nodes = ",".join(map(str, entry.numa_nodes)) or "none"
            notes.append(f"{entry.memory_type} left out: {what} is on NUMA nodes {nodes}")
    return sizes


def _memory(
    topology: Topology,
    allocatable: Allocatable,
    containers: tuple[ContainerAllocation, ...],
    notes: list[str],
) -> dict[str, dict[int, _Amount]]:
    if not allocatable.memory:
        notes.append("memory left out: the kubelet reports no memory per NUMA node")
        return {}
    spread: set[str] = set()
    given = _per_node(allocatable.memory, spread, "an allocatable block", notes)
    held = _per_node(
        (m for c in containers for m in c.memory), spread, "a container's allocation", notes
    )
    result: dict[str, dict[int, _Amount]] = defaultdict(dict)
    for (kind, node_id), size in sorted(given.items()):
        node = topology.numa_node(node_id)
        if kind in spread or node is None:
            continue
        capacity = node.memory_bytes if kind == "memory" else size
        taken = held.get((kind, node_id), 0)
        if not size <= capacity or taken > size:
            notes.append(
                f"{kind} left out of {zone_name(node_id)}: capacity {capacity}, allocatable "
                f"{size} and held {taken} bytes contradict each other"
            )
            continue
        result[kind][node_id] = _Amount(capacity, size, size - taken)
    return result


def _devices(
    allocatable: Allocatable, containers: tuple[ContainerAllocation, ...], notes: list[str]
) -> dict[str, dict[int, _Amount]]:
    zones: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    unplaced: dict[str, int] = defaultdict(int)
    for entry in allocatable.devices:
        if len(entry.numa_nodes) == 1:
            zones[entry.resource_name][entry.numa_nodes[0]].update(entry.device_ids)
        else:
            unplaced[entry.resource_name] += len(entry.device_ids)
    for name, count in sorted(unplaced.items()):
        notes.append(f"{count} {name} device(s) without a single NUMA node are in no zone")
    held = {(d.resource_name, i) for c in containers for d in c.devices for i in d.device_ids}
    return {
        name: {
            node_id: _Amount(len(ids), len(ids), len({i for i in ids if (name, i) not in held}))
            for node_id, ids in by_node.items()
        }
        for name, by_node in zones.items()
    }


def _attributes(
    kubelet: TopologyManagerConfig, answer: PodResources, notes: list[str]
) -> list[dict[str, str]]:
    attributes = []
    for name, value in (
        ("topologyManagerPolicy", kubelet.policy),
        ("topologyManagerScope", kubelet.scope),
    ):
        if value is None:
            notes.append(f"{name} left out: {kubelet.source} does not state it")
        else:
            attributes.append({"name": name, "value": value})
    pods = {(c.namespace, c.pod) for c in answer.containers}
    attributes.append({"name": ATTRIBUTE, "value": pods_fingerprint(pods)})
    attributes.append({"name": METHOD_ATTRIBUTE, "value": METHOD_ALL})
    return attributes


def _quantity(name: str, amount: _Amount) -> dict[str, Any]:
    return {
        "name": name,
        "capacity": str(amount.capacity),
        "allocatable": str(amount.allocatable),
        "available": str(amount.available),
    }


def build_nrt(
    topology: Topology, answer: PodResources, kubelet: TopologyManagerConfig, node: NodeRef
) -> NrtBuild:
    """The NodeResourceTopology of ``node`` (module docstring).

    Raises :class:`NotMeasured` when the kubelet does not answer ``GetAllocatableResources``
    (before 1.21) or the topology has no NUMA node: no zone's numbers could be measured.
    """
    if answer.allocatable is None:
        raise NotMeasured("the kubelet does not answer GetAllocatableResources (before 1.21)")
    if not topology.numa_nodes:
        raise NotMeasured("the host topology shows no NUMA node")
    notes: list[str] = []
    allocatable = answer.allocatable
    held_cpus = {cpu for c in answer.containers for cpu in c.cpu_ids}
    per_resource: dict[str, dict[int, _Amount]] = {
        "cpu": _cpu(topology, allocatable, held_cpus, notes)
    }
    per_resource.update(sorted(_memory(topology, allocatable, answer.containers, notes).items()))
    per_resource.update(sorted(_devices(allocatable, answer.containers, notes).items()))
    zones = []
    for numa in sorted(topology.numa_nodes, key=lambda n: n.id):
        zone: dict[str, Any] = {"name": zone_name(numa.id), "type": ZONE_TYPE}
        if numa.distances:
            zone["costs"] = _costs(numa)
        zone["resources"] = [
            _quantity(name, amounts[numa.id])
            for name, amounts in per_resource.items()
            if numa.id in amounts
        ]
        zones.append(zone)
    if not any(n.distances for n in topology.numa_nodes):
        notes.append("costs left out: the firmware publishes no NUMA distances")
    body = {
        "apiVersion": GROUP_VERSION,
        "kind": KIND,
        "metadata": {
            "name": node.name,
            "labels": {MANAGED_BY: OWNER},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}
            ],
        },
        "attributes": _attributes(kubelet, answer, notes),
        "zones": zones,
    }
    return NrtBuild(body, tuple(notes))
