"""``numa_memory`` collector: per-NUMA-node memory and page-allocation counters.

Publishes what node_exporter's ``meminfo_numa`` does, with unit-bearing names: node
totals, free and used bytes, bytes by page type, and the numastat allocation counters.
Unlike node_exporter, a node without ``numastat`` (some virtual or fake-NUMA machines)
still publishes its meminfo figures, and a node without ``meminfo`` still publishes its
counters.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import NoDataError, SourceError
from toposcope.exporters.exposition import FamilyLayout
from toposcope.exporters.registry import CollectorEntry
from toposcope.host.sysfs import SysfsNodes

#: The families, in exposition order.
FAMILIES = (
    "toposcope_numa_memory_total_bytes",
    "toposcope_numa_memory_free_bytes",
    "toposcope_numa_memory_used_bytes",
    "toposcope_numa_memory_pages_bytes",
    "toposcope_numa_allocations_total",
)


class NumaMemoryCollector:
    """Turns ``node*/meminfo`` and ``node*/numastat`` readings into families, written
    straight to text (each series' labels written once, its value every scrape).
    """

    def __init__(self, nodes: SysfsNodes) -> None:
        self._nodes = nodes
        self._layouts = [FamilyLayout(spec(name), remember=True) for name in FAMILIES]

    def collect(self) -> Iterator[Metric]:
        """Yield memory gauges and allocation counters for every node directory.

        Raises :class:`NoDataError` when the kernel shows no NUMA node directory and
        :class:`SourceError` when node directories exist but none could be read.
        """
        node_ids = self._nodes.node_ids()
        if not node_ids:
            raise NoDataError(f"no NUMA node directory under {self._nodes.sysfs}")
        writers = [layout.writer() for layout in self._layouts]
        total, free, used, pages, allocations = writers
        for node in node_ids:
            label = str(node)
            memory = self._nodes.node_memory(node)
            if memory is not None:
                for family, value in (
                    (total, memory.total_bytes),
                    (free, memory.free_bytes),
                    (used, memory.used_bytes),
                ):
                    if value is not None:
                        family.add_metric((label,), value)
                for page_type, value in sorted(memory.pages_bytes.items()):
                    pages.add_metric((label, page_type), value)
            stat = self._nodes.node_numastat(node)
            if stat is not None:
                for result, count in sorted(stat.counts.items()):
                    allocations.add_metric((label, result), count)
        families = [writer.plain() for writer in writers if writer]
        if not families:
            raise SourceError(
                f"no readable meminfo or numastat in {len(node_ids)} NUMA node "
                f"directories under {self._nodes.sysfs}"
            )
        yield from families


ENTRY = CollectorEntry(
    name="numa_memory",
    default_enabled=True,
    factory=lambda ctx: NumaMemoryCollector(SysfsNodes(ctx.config.paths.sysfs)),
    description="per-NUMA-node memory and numastat allocation counters (sysfs)",
)
