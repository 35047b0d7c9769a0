"""``pcie_link`` collector: each GPU's PCIe link speed and width, the most and now (sysfs).

The advisor prices a pair of GPUs by the slower of their PCIe links (see
:mod:`toposcope.advisor.link_prices`); these series tell it a link that trained down to fewer
lanes or a lower generation. Read from ``bus/pci/devices/<bus id>/{max,current}_link_{speed,
width}`` (:mod:`toposcope.topology.pcie_link`) for the GPUs the topology found, so it works
without NVML. A value sysfs does not give is absent, never 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.exporters.context import CollectorContext, HostTopology
from toposcope.exporters.exposition import FamilyWriter, plain_nonempty
from toposcope.exporters.registry import CollectorEntry
from toposcope.topology.pcie_link import read_pcie_link

#: GT/s to transfers per second
GIGA = 1e9


class PcieLinkCollector:
    """Publishes ``toposcope_gpu_pcie_link_speed_transfers_per_second`` and
    ``toposcope_gpu_pcie_link_width_lanes`` per GPU (``state`` = max or current).
    """

    def __init__(self, topology: HostTopology, sysfs: Path) -> None:
        self._topology = topology
        self._sysfs = Path(sysfs)

    def collect(self) -> Iterator[Metric]:
        """Yield both families for every GPU whose link sysfs describes."""
        speed = FamilyWriter(spec("toposcope_gpu_pcie_link_speed_transfers_per_second"))
        width = FamilyWriter(spec("toposcope_gpu_pcie_link_width_lanes"))
        for gpu in self._topology.get().gpus:
            if not gpu.pci_bus_id:
                continue
            link = read_pcie_link(self._sysfs, gpu.pci_bus_id)
            labels = [str(gpu.index), gpu.pci_bus_id]
            for state, gts, lanes in (
                ("max", link.max_gts, link.max_lanes),
                ("current", link.current_gts, link.current_lanes),
            ):
                if gts is not None:
                    speed.add_metric([*labels, state], gts * GIGA)
                if lanes is not None:
                    width.add_metric([*labels, state], float(lanes))
        yield from plain_nonempty([speed, width])


def _factory(ctx: CollectorContext) -> PcieLinkCollector:
    return PcieLinkCollector(ctx.topology, ctx.config.paths.sysfs)


ENTRY = CollectorEntry(
    name="pcie_link",
    default_enabled=True,
    factory=_factory,
    description="each GPU's PCIe link speed and width, the most and now (sysfs)",
)
