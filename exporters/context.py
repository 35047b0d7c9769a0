"""What every collector factory receives: the configuration and shared, cached sources.

The host topology is shared because several collectors need the CPU -> NUMA node map
(numa_cpu, workloads) and it is costly to rebuild on every scrape on big machines. It is
re-read when ``devices/system/cpu/online`` or the NUMA node directory changes (CPU hotplug,
memory hot-add), which is checked cheaply on every access.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from toposcope.config import ExporterConfig
from toposcope.host.nvml.records import GpuProcessSource
from toposcope.host.procfs import read_or_none
from toposcope.topology.model import Topology
from toposcope.topology.sysfs import build_from_sysfs
from toposcope.topology.sysfs_files import numa_dir

if TYPE_CHECKING:
    from toposcope.exporters.gpu_source import GpuSource
    from toposcope.host.podresources.source import KubeletSource


class HostTopology:
    """The host's topology from sysfs, rebuilt only when CPUs or nodes come or go."""

    def __init__(self, config: ExporterConfig) -> None:
        self._paths = config.paths
        self._lock = threading.Lock()
        self._online_path = os.path.join(config.paths.sysfs, "devices", "system", "cpu", "online")
        self._numa_dir = numa_dir(config.paths.sysfs)
        self._key: tuple[bytes | None, int | None] | None = None
        self._topology: Topology | None = None

    def _change_key(self) -> tuple[bytes | None, int | None]:
        """``cpu/online`` and the NUMA node directory's modification time (a node directory
        that comes or goes changes it): one small read and one ``stat`` per scrape.
        """
        try:
            nodes: int | None = os.stat(self._numa_dir).st_mtime_ns
        except OSError:
            nodes = None
        return read_or_none(self._online_path), nodes

    def get(self) -> Topology:
        """The current topology; raises ``SourceError`` when sysfs cannot be read."""
        with self._lock:
            key = self._change_key()
            if self._topology is None or key != self._key:
                self._topology = build_from_sysfs(self._paths.sysfs, self._paths.procfs)
                self._key = key
            return self._topology


class BackgroundWork(Protocol):
    """A collector's own thread (a sampler), started when the exporter serves and stopped
    when it exits.
    """

    def start(self) -> None:
        """Start the thread (idempotent)."""
        ...

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the thread; ``False`` if it did not end within ``timeout`` seconds."""
        ...


@dataclass
class CollectorContext:
    """Configuration plus the shared sources handed to every collector factory.

    ``gpu_processes`` is set when a GPU source is configured, so that the workloads collector
    can attribute GPU memory to workloads without importing NVML itself. ``nvml`` is the
    shared NVML layer that ``attach_gpu_source`` (``toposcope.exporters.gpu_source``) puts
    there for the ``gpu`` collector. ``kubelet`` is the link to the kubelet's pod-resources
    API that ``attach_kubelet`` (``toposcope.exporters.kubelet_attach``) puts
    there for the workloads and ``kubelet`` collectors. ``background`` lists the threads
    collectors own (the workload sampler), which :meth:`start_background` and
    :meth:`stop_background` start and stop together.
    """

    config: ExporterConfig
    topology: HostTopology = field(init=False)
    gpu_processes: GpuProcessSource | None = None
    nvml: GpuSource | None = None
    kubelet: KubeletSource | None = None
    background: list[BackgroundWork] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.topology = HostTopology(self.config)

    def start_background(self) -> None:
        """Start every collector's thread."""
        for work in self.background:
            work.start()

    def stop_background(self, timeout: float = 5.0) -> bool:
        """Stop every collector's thread; ``False`` if one did not end in time."""
        stopped = True
        for work in self.background:
            stopped = work.stop(timeout) and stopped
        return stopped
