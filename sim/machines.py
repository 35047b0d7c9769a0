"""Building the topology of a built-in template: CPUs numbered the Linux way, PCI devices.

:func:`machine` lays out packages, NUMA nodes (with SLIT distances) and CPUs; :func:`assemble`
adds PCIe switches, GPUs and NICs as PCI devices, the model's GPUs and the
``nvidia-smi topo -m`` link matrix between them.
"""

from __future__ import annotations

from typing import NamedTuple

from toposcope.sim.nodetemplate import GpuSpec, NicSpec
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

GIB = 1024**3

#: PCI vendor and class ids of the devices the built-in templates hold
PCI_VENDOR_MELLANOX = 0x15B3
PCI_VENDOR_BROADCOM_PLX = 0x10B5
PCI_CLASS_3D = 0x0302
PCI_CLASS_INFINIBAND = 0x0207
PCI_CLASS_ETHERNET = 0x0200
PCI_CLASS_PCI_BRIDGE = 0x0604


class Machine(NamedTuple):
    """The CPU side of a built-in template: packages, NUMA nodes and CPUs."""

    packages: tuple[Package, ...]
    nodes: tuple[NumaNode, ...]
    cpus: tuple[Cpu, ...]


def machine(
    *,
    sockets: int,
    cores_per_socket: int,
    numa_per_socket: int,
    memory_per_node: int,
    distances: dict[tuple[bool, bool], int],
) -> Machine:
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
    return Machine(packages, nodes, tuple(sorted(cpus, key=lambda c: c.id)))


def _pci(
    bus_id: str,
    vendor: int,
    device: int,
    class_id: int,
    node: int,
    nodes: tuple[NumaNode, ...],
    place: tuple[tuple[str, ...], str | None] = ((), None),
) -> PciDevice:
    local = next(n.cpus for n in nodes if n.id == node)
    bridges, host_bridge = place
    return PciDevice(bus_id, vendor, device, class_id, node, local, bridges, host_bridge)


def _host_bridge(bus_id: str) -> str:
    """A host bridge of its own for the device at ``bus_id`` (``0000:05:00.0`` ->
    ``pci0000:05``), as sysfs names host bridges.
    """
    domain, bus = bus_id.split(":")[:2]
    return f"pci{domain}:{bus}"


def _place(
    bus_id: str, switch: str | None, switches: dict[str, tuple[str, int]]
) -> tuple[tuple[str, ...], str | None]:
    """(bridges, host bridge) of a GPU or NIC: behind its switch, else on a root of its own."""
    if switch is not None and switch in switches:
        switch_bus = switches[switch][0]
        return (switch_bus,), _host_bridge(switch_bus)
    return (), _host_bridge(bus_id)


def assemble(
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
    """A topology whose PCI devices are the switches, GPUs and NICs given.

    Each PCIe switch hangs off a host bridge of its own, and the GPUs and NICs behind it off
    the switch (their ``bridges`` and ``host_bridge``), as in a real 8-GPU server where each
    switch carries two GPUs and their NICs; a device without a switch has a host bridge of
    its own. The GPU link matrix is the template's (switches and NVLink groups), unchanged.
    """
    pci: list[PciDevice] = []
    for bus_id, node in switches.values():
        pci.append(
            _pci(
                bus_id,
                PCI_VENDOR_BROADCOM_PLX,
                0x8796,
                PCI_CLASS_PCI_BRIDGE,
                node,
                nodes,
                place=((), _host_bridge(bus_id)),
            )
        )
    for gpu in gpus:
        assert gpu.numa_node is not None
        pci.append(
            _pci(
                gpu.pci_bus_id,
                PCI_VENDOR_NVIDIA,
                gpu_device,
                PCI_CLASS_3D,
                gpu.numa_node,
                nodes,
                place=_place(gpu.pci_bus_id, gpu.switch, switches),
            )
        )
    for nic in nics:
        assert nic.numa_node is not None
        pci.append(
            _pci(
                nic.pci_bus_id,
                PCI_VENDOR_MELLANOX,
                0x101B,
                PCI_CLASS_INFINIBAND,
                nic.numa_node,
                nodes,
                place=_place(nic.pci_bus_id, nic.switch, switches),
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
            switched = label == nv_label and a.nvlink_group == "nvswitch"
            links.append(GpuLink(a.index, b.index, label, nvswitch=switched))
    return Topology(
        packages=packages,
        numa_nodes=nodes,
        cpus=cpus,
        pci_devices=tuple(pci),
        gpus=model_gpus,
        gpu_links=tuple(links),
        source=f"template:{name}",
    )
