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

import math
import threading
from collections.abc import Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import NoDataError
from toposcope.exporters.context import HostTopology
from toposcope.exporters.registry import CollectorEntry
from toposcope.exporters.sources.procfs import CPU_MODES, Procfs


class NumaCpuCollector:
    """Publishes ``toposcope_numa_cpu_seconds_total{numa_node,mode}``.

    State: for every CPU seen so far, the node it was first attributed to and its highest
    value per mode. That is the whole memory of the collector, bounded by the CPU count.
    """

    def __init__(self, procfs: Procfs, topology: HostTopology) -> None:
        self._procfs = procfs
        self._topology = topology
        self._lock = threading.Lock()
        self._last: dict[int, tuple[int, dict[str, float]]] = {}

    def collect(self) -> Iterator[Metric]:
        """Read ``/proc/stat``, fold it into the per-CPU state and yield the node sums.

        Raises :class:`NoDataError` when there is no ``/proc/stat`` (snapshot trees).
        CPUs the topology cannot place on a node are not counted.
        """
        times = self._procfs.cpu_times()
        if times is None:
            raise NoDataError(f"no {self._procfs.procfs / 'stat'}")
        cpu_node = self._topology.get().cpu_to_node()
        parts: dict[tuple[int, str], list[float]] = {}
        with self._lock:
            for cpu, reading in times.items():
                previous = self._last.get(cpu)
                node = previous[0] if previous is not None else cpu_node.get(cpu)
                if node is None:
                    continue
                values = dict(previous[1]) if previous is not None else {}
                for mode, seconds in reading.modes():
                    values[mode] = max(values.get(mode, seconds), seconds)
                self._last[cpu] = (node, values)
            for node, values in self._last.values():
                for mode, seconds in values.items():
                    parts.setdefault((node, mode), []).append(seconds)
        sums = {key: math.fsum(values) for key, values in parts.items()}
        family = spec("toposcope_numa_cpu_seconds_total").family()
        order = {mode: i for i, mode in enumerate(CPU_MODES)}
        for (node, mode), seconds in sorted(
            sums.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])
        ):
            family.add_metric([str(node), mode], seconds)
        if not family.samples:
            raise NoDataError("no CPU of /proc/stat could be placed on a NUMA node")
        yield family


ENTRY = CollectorEntry(
    name="numa_cpu",
    default_enabled=True,
    factory=lambda ctx: NumaCpuCollector(Procfs(ctx.config.paths.procfs), ctx.topology),
    description="CPU seconds per NUMA node and mode (/proc/stat)",
)
