"""``topology`` collector: NUMA nodes, distances, packages and PCI/GPU locality as info series.

These series are what PromQL joins on: ``toposcope_numa_node_info`` ties a NUMA node to its
package and CPUs, ``toposcope_gpu_locality_info`` ties a GPU's PCI address to its NUMA node
(from sysfs, so it exists even where NVML does not), ``toposcope_gpu_nic_link_info`` each GPU's
PCIe tier to each RDMA NIC and whether that NIC is its nearest.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.cpulist import format_cpulist
from toposcope.exporters.context import HostTopology
from toposcope.exporters.exposition import FamilyWriter
from toposcope.exporters.registry import CollectorEntry
from toposcope.topology.model import Topology
from toposcope.topology.nic_locality import NicLocality

#: PCI base classes worth publishing: mass storage, network, display, bridges are skipped
#: (too many), processing accelerators and InfiniBand/fabric (0x0c06) kept.
_PUBLISHED_PCI_BASE_CLASSES = frozenset({0x01, 0x02, 0x03, 0x12})
_PUBLISHED_PCI_CLASSES = frozenset({0x0C06})


def _label(value: int | None) -> str:
    return "" if value is None else str(value)


class TopologyCollector:
    """Publishes the host topology; values are 1 (info) or SLIT distances."""

    def __init__(self, topology: HostTopology) -> None:
        self._topology = topology

    def collect(self) -> Iterator[Metric]:
        """Yield node, distance, package, CPU-count, PCI and GPU locality families."""
        topo = self._topology.get()
        node_info = FamilyWriter(spec("toposcope_numa_node_info"))
        distance = FamilyWriter(spec("toposcope_numa_distance"))
        online = FamilyWriter(spec("toposcope_cpus_online"))
        for node in topo.numa_nodes:
            node_info.add_metric(
                [str(node.id), _label(node.package), format_cpulist(node.cpus)], 1.0
            )
            online.add_metric([str(node.id)], float(len(node.cpus)))
            for peer, value in sorted(node.distances.items()):
                distance.add_metric([str(node.id), str(peer)], float(value))
        package_info = FamilyWriter(spec("toposcope_package_info"))
        for pkg in topo.packages:
            package_info.add_metric([str(pkg.id), format_cpulist(pkg.cpus)], 1.0)
        pci_info = FamilyWriter(spec("toposcope_pci_device_info"))
        for device in topo.pci_devices:
            if (
                device.class_id >> 8 not in _PUBLISHED_PCI_BASE_CLASSES
                and device.class_id not in _PUBLISHED_PCI_CLASSES
            ):
                continue
            pci_info.add_metric(
                [
                    device.bus_id,
                    f"0x{device.vendor:04x}",
                    f"0x{device.device:04x}",
                    f"0x{device.class_id:04x}",
                    _label(device.numa_node),
                    format_cpulist(device.local_cpus),
                ],
                1.0,
            )
        node_package = topo.node_to_package()
        gpu_info = FamilyWriter(spec("toposcope_gpu_locality_info"))
        for gpu in topo.gpus:
            package = node_package.get(gpu.numa_node) if gpu.numa_node is not None else None
            gpu_info.add_metric(
                [
                    str(gpu.index),
                    gpu.pci_bus_id or "",
                    _label(gpu.numa_node),
                    format_cpulist(gpu.local_cpus),
                    _label(package),
                ],
                1.0,
            )
        nic_links = gpu_nic_link_family(topo)
        for family in (node_info, distance, online, package_info, pci_info, gpu_info):
            yield family.plain()
        if nic_links:
            yield nic_links.plain()


def gpu_nic_link_family(topo: Topology) -> FamilyWriter:
    """``toposcope_gpu_nic_link_info``: each GPU's tier to each RDMA NIC, nearest flagged."""
    family = FamilyWriter(spec("toposcope_gpu_nic_link_info"))
    locality = NicLocality.of(topo)
    bus = {gpu.index: gpu.pci_bus_id or "" for gpu in topo.gpus}
    for (gpu, nic), link in sorted(locality.links.items()):
        nearest = "true" if locality.is_nearest(gpu, nic) else "false"
        family.add_metric([str(gpu), bus.get(gpu, ""), nic, link, nearest], 1.0)
    return family


ENTRY = CollectorEntry(
    name="topology",
    default_enabled=True,
    factory=lambda ctx: TopologyCollector(ctx.topology),
    description="NUMA nodes, distances, packages, PCI and GPU locality (sysfs)",
)
