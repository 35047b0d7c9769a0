"""``numa_cpu`` collector: CPU time per NUMA node and mode, summed from ``/proc/stat``.

Each online CPU's ``cpuN`` line is attributed to its NUMA node (the shared host topology's
``cpu_to_node``) and summed per node and mode. The kernel stops listing a CPU the moment
it goes offline, which would make a plain per-scrape sum drop and look like a counter
reset. Like node_exporter's ``cpu`` collector, this one keeps each CPU's last-seen
values: a CPU that disappears keeps contributing its last figures to its node, and a CPU
that comes back continues from them. Each CPU's mode values are also held monotonic
(``iowait`` can step back on tickless kernels), so every node sum only ever grows
(:mod:`toposcope.exporters.collectors.numa_cpu_totals`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import NoDataError
from toposcope.exporters.collectors.numa_cpu_totals import CpuTotals
from toposcope.exporters.context import HostTopology
from toposcope.exporters.exposition import FamilyLayout
from toposcope.exporters.registry import CollectorEntry
from toposcope.host.procfs import CPU_MODES, Procfs
from toposcope.topology.model import Topology


class NumaCpuCollector:
    """Publishes ``toposcope_numa_cpu_seconds_total{numa_node,mode}``.

    State: for every CPU seen so far, the node it was first attributed to and its highest
    tick count per mode. That is the whole memory of the collector, bounded by the CPU count.
    Ticks are summed as integers per node and made seconds once, at the end, and written
    straight to text (each series' labels written once, its value every scrape).
    """

    def __init__(self, procfs: Procfs, topology: HostTopology) -> None:
        self._procfs = procfs
        self._topology = topology
        self._lock = threading.Lock()
        self._totals = CpuTotals()
        self._cpu_node_for: Topology | None = None
        self._cpu_node: dict[int, int] = {}
        self._layout = FamilyLayout(spec("toposcope_numa_cpu_seconds_total"), remember=True)

    def _cpu_nodes(self) -> dict[int, int]:
        topo = self._topology.get()
        if topo is not self._cpu_node_for:
            self._cpu_node = topo.cpu_to_node()
            self._cpu_node_for = topo
        return self._cpu_node

    def collect(self) -> Iterator[Metric]:
        """Read ``/proc/stat``, fold it into the per-CPU state and yield the node sums.

        Raises :class:`NoDataError` when there is no ``/proc/stat`` (snapshot trees).
        CPUs the topology cannot place on a node are not counted.
        """
        reading = self._procfs.cpu_reading()
        if reading is None:
            raise NoDataError(f"no {self._procfs.procfs / 'stat'}")
        cpu_node = self._cpu_nodes()
        with self._lock:
            sums = self._totals.fold(reading, cpu_node)
        family = self._layout.writer()
        hz = self._procfs.hz
        for node in sorted(sums):
            label = str(node)
            for mode, value in zip(CPU_MODES, sums[node], strict=False):
                family.add_metric((label, mode), value / hz)
        if not family:
            raise NoDataError("no CPU of /proc/stat could be placed on a NUMA node")
        yield family.plain()


ENTRY = CollectorEntry(
    name="numa_cpu",
    default_enabled=True,
    factory=lambda ctx: NumaCpuCollector(Procfs(ctx.config.paths.procfs), ctx.topology),
    description="CPU seconds per NUMA node and mode (/proc/stat)",
)
