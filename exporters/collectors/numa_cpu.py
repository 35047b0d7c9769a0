"""``numa_cpu`` collector: CPU time per NUMA node and mode, summed from ``/proc/stat``.

Each online CPU's ``cpuN`` line is attributed to its NUMA node (the shared host topology's
``cpu_to_node``) and summed per node and mode. The kernel stops listing a CPU the moment
it goes offline, which would make a plain per-scrape sum drop and look like a counter
reset. Like node_exporter's ``cpu`` collector, this one keeps each CPU's last-seen
values: a CPU that disappears keeps contributing its last figures to its node, and a CPU
that comes back continues from them. Each CPU's mode values are also held monotonic
(``iowait`` can step back on tickless kernels), so every node sum only ever grows.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import NoDataError
from toposcope.exporters.context import HostTopology
from toposcope.exporters.registry import CollectorEntry
from toposcope.exporters.sources.procfs import CPU_MODES, Procfs
from toposcope.topology.model import Topology


class NumaCpuCollector:
    """Publishes ``toposcope_numa_cpu_seconds_total{numa_node,mode}``.

    State: for every CPU seen so far, the node it was first attributed to and its highest
    tick count per mode. That is the whole memory of the collector, bounded by the CPU count.
    Ticks are summed as integers per node and made seconds once, at the end.
    """

    def __init__(self, procfs: Procfs, topology: HostTopology) -> None:
        self._procfs = procfs
        self._topology = topology
        self._lock = threading.Lock()
        self._last: dict[int, tuple[int, list[int]]] = {}
        self._cpu_node_for: Topology | None = None
        self._cpu_node: dict[int, int] = {}

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
        ticks = self._procfs.cpu_ticks()
        if ticks is None:
            raise NoDataError(f"no {self._procfs.procfs / 'stat'}")
        cpu_node = self._cpu_nodes()
        sums: dict[int, list[int]] = {}
        with self._lock:
            last = self._last
            for cpu, reading in ticks.items():
                previous = last.get(cpu)
                if previous is None:
                    node = cpu_node.get(cpu)
                    if node is None:
                        continue
                    last[cpu] = (node, list(reading))
                    continue
                kept = previous[1]
                if len(kept) == len(reading):
                    kept[:] = map(max, kept, reading)
                else:
                    _fold(kept, reading, max)
            for node, kept in last.values():
                total = sums.get(node)
                if total is None:
                    sums[node] = list(kept)
                elif len(total) == len(kept):
                    total[:] = map(operator.add, total, kept)
                else:
                    _fold(total, kept, operator.add)
        family = spec("toposcope_numa_cpu_seconds_total").family()
        hz = self._procfs.hz
        for node in sorted(sums):
            label = str(node)
            for mode, value in zip(CPU_MODES, sums[node], strict=False):
                family.add_metric([label, mode], value / hz)
        if not family.samples:
            raise NoDataError("no CPU of /proc/stat could be placed on a NUMA node")
        yield family


def _fold(into: list[int], values: Sequence[int], combine: Callable[[int, int], int]) -> None:
    """Combine ``values`` into ``into`` position by position; a longer ``values`` (a kernel
    line with more modes) extends it.
    """
    for i, value in enumerate(values):
        if i < len(into):
            into[i] = combine(into[i], value)
        else:
            into.append(value)


ENTRY = CollectorEntry(
    name="numa_cpu",
    default_enabled=True,
    factory=lambda ctx: NumaCpuCollector(Procfs(ctx.config.paths.procfs), ctx.topology),
    description="CPU seconds per NUMA node and mode (/proc/stat)",
)
