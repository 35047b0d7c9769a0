"""``workloads`` collector: where each workload's threads run, where its memory lives, which
GPUs it holds, and how much of that is local to its GPUs.

A *workload* is, in ``cgroup`` mode (the default), the set of processes of one cgroup that
holds processes, named by
:func:`~toposcope.exporters.sources.workload_identity.classify_cgroup`: a Kubernetes
container (``<pod uid>/<container id[:12]>``), a Docker container (``<id[:12]>``), a Slurm
job (``slurm-job-<id>``, all steps), a systemd unit (``sshd.service``) or another cgroup
(its path). In ``process`` mode it is a top-level process tree (a child of pid 1 and its
descendants), named ``pid-<root pid>``. Include/exclude patterns see the workload's cgroup
path (its ``comm`` in process mode).

Every per-workload series carries ``namespace``, ``pod`` and ``container`` (dcgm-exporter's
names): on a Kubernetes node they are filled in from the container runtime's state and the
kubelet's pod-resources API
(:class:`~toposcope.exporters.sources.podresources.mapper.KubeletMapper`), elsewhere empty.

Figures, per workload:

* ``toposcope_workload_cpu_seconds_total{numa_node}``: every thread's utime + stime is read
  each scrape; the CPU time a thread used since the previous scrape is added to the NUMA
  node of the CPU it last ran on (``stat`` field 39). A thread seen for the first time
  brings its whole past CPU time to its current node. The counter therefore never goes
  down while the workload lives, but time of threads that exited between scrapes is lost.
* ``toposcope_workload_threads{numa_node}``: live threads by the node of their last CPU.
* ``toposcope_workload_memory_bytes{numa_node}``: the cgroup's ``memory.numa_stat``
  (v2 anon + file bytes, v1 ``hierarchical_total`` pages x page size); without it, the sum
  of its processes' ``/proc/PID/numa_maps`` (shared pages count once per process).
* ``toposcope_workload_gpu_info{gpu}``: GPUs it holds: ``/dev/nvidiaN`` descriptors (the
  minor is mapped to the GPU index through ``/proc/driver/nvidia/gpus/*/information`` when
  present, else taken as the index; descriptors are not scanned on hosts whose PCI bus shows
  no GPU) and, with a GPU source, the GPUs NVML lists its pids on.
* ``toposcope_workload_gpu_memory_used_bytes{gpu}``: NVML's per-process GPU memory, summed.
* ``toposcope_workload_locality_ratio{resource}``: with GPUs whose NUMA node is known, the
  share of its CPU seconds (the cumulative counters above, i.e. since the exporter first saw
  it) and of its memory on the node(s) of those GPUs; without GPUs, the share on its
  dominant node. No series when the total is 0 or its GPUs' nodes are all unknown.
* ``toposcope_workloads_dropped_total``: when more than ``max_workloads`` qualify, the
  largest by current CPU seconds (ties by name) are kept and each scrape adds the number
  left out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import nonempty, spec
from toposcope.config import HostPaths, WorkloadSettings
from toposcope.exporters.context import (
    CollectorContext,
    GpuProcess,
    GpuProcessSource,
    HostTopology,
)
from toposcope.exporters.registry import CollectorEntry
from toposcope.exporters.sources.podresources.attach import workload_mapper
from toposcope.exporters.sources.workload_identity import WorkloadMapper
from toposcope.exporters.sources.workload_reader import ThreadKey, WorkloadReader, WorkloadReading
from toposcope.topology.model import Topology


class WorkloadsCollector:
    """Publishes per-workload CPU, memory and GPU placement (see the module docstring).

    Holds two pieces of state across scrapes, under a lock: each live thread's last CPU
    seconds (to attribute increments to the node it runs on now) and the per-workload,
    per-node CPU counters built from them, plus the dropped-workloads counter.
    """

    def __init__(
        self,
        settings: WorkloadSettings,
        paths: HostPaths,
        topology: HostTopology,
        gpu_processes: GpuProcessSource | None = None,
        mapper: WorkloadMapper | None = None,
    ) -> None:
        self._settings = settings
        self._topology = topology
        self._gpu_processes = gpu_processes
        self._reader = WorkloadReader(settings, paths, mapper)
        self._lock = threading.Lock()
        self._thread_seconds: dict[ThreadKey, float] = {}
        self._cpu: dict[str, dict[str, float]] = {}
        self._dropped = 0
        self._cpu_node_for: Topology | None = None
        self._cpu_node: dict[int, str] = {}

    def _node_labels(self, topo: Topology) -> dict[int, str]:
        if topo is not self._cpu_node_for:
            self._cpu_node = {cpu: str(node) for cpu, node in topo.cpu_to_node().items()}
            self._cpu_node_for = topo
        return self._cpu_node

    # -- scrape ----------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """Read every selected workload and yield the ``toposcope_workload*`` families."""
        topo = self._topology.get()
        cpu_node = self._node_labels(topo)
        found, layout = self._reader.discover()
        candidates: list[WorkloadReading] = []
        for workload in found.values():
            self._reader.read_threads(workload, cpu_node)
            if not workload.threads:
                continue
            if workload.cpu_total < self._settings.min_cpu_seconds:
                continue
            candidates.append(workload)
        candidates.sort(key=lambda w: (-w.cpu_total, w.identity.name))
        kept = candidates[: self._settings.max_workloads]
        dropped_now = len(candidates) - len(kept)
        kept.sort(key=lambda w: w.identity.name)

        gpu_nodes = {g.index: g.numa_node for g in topo.gpus}
        # No GPU on the PCI bus, no GPU device file to find: skip the descriptor scan.
        scan_fds = self._settings.gpu_fds and bool(topo.gpus)
        minor_to_gpu = self._reader.minor_to_gpu(topo) if scan_fds else {}
        nvml_gpus: dict[int, dict[int, int | None]] = {}
        if self._gpu_processes is not None:
            for proc in self._gpu_processes.gpu_processes():
                per_gpu = nvml_gpus.setdefault(proc.pid, {})
                used = proc.used_bytes
                if proc.gpu not in per_gpu or per_gpu[proc.gpu] is None:
                    per_gpu[proc.gpu] = used
                elif used is not None:
                    per_gpu[proc.gpu] = (per_gpu[proc.gpu] or 0) + used

        info = spec("toposcope_workload_info").family()
        cpu_seconds = spec("toposcope_workload_cpu_seconds_total").family()
        threads = spec("toposcope_workload_threads").family()
        memory = spec("toposcope_workload_memory_bytes").family()
        gpu_info = spec("toposcope_workload_gpu_info").family()
        gpu_memory = spec("toposcope_workload_gpu_memory_used_bytes").family()
        locality = spec("toposcope_workload_locality_ratio").family()
        dropped = spec("toposcope_workloads_dropped_total").family()

        with self._lock:
            per_node_cpu = self._account_cpu(kept)
            self._dropped += dropped_now
            dropped_total = self._dropped

        for workload in kept:
            ident = workload.identity
            name = ident.name
            info.add_metric(
                [
                    name,
                    str(workload.root_pid),
                    workload.comm,
                    ident.cgroup,
                    ident.pod,
                    ident.namespace,
                    ident.container,
                ],
                1.0,
            )
            who = [name, ident.namespace, ident.pod, ident.container]
            node_cpu = per_node_cpu[name]
            for node, seconds in sorted(node_cpu.items()):
                cpu_seconds.add_metric([*who, node], seconds)
            counts: dict[str, int] = {}
            for _, _, node in workload.threads:
                counts[node] = counts.get(node, 0) + 1
            for node, count in sorted(counts.items()):
                threads.add_metric([*who, node], float(count))
            node_memory = self._reader.memory(workload, layout)
            for node_id, value in sorted(node_memory.items()):
                memory.add_metric([*who, str(node_id)], float(value))

            gpus = self._reader.gpus_from_fds(workload, minor_to_gpu) if scan_fds else set()
            gpu_used: dict[int, int] = {}
            for pid in workload.live_pids:
                for gpu, used in nvml_gpus.get(pid, {}).items():
                    gpus.add(gpu)
                    if used is not None:
                        gpu_used[gpu] = gpu_used.get(gpu, 0) + used
            for gpu in sorted(gpus):
                gpu_info.add_metric([*who, str(gpu)], 1.0)
            for gpu, used in sorted(gpu_used.items()):
                gpu_memory.add_metric([*who, str(gpu)], float(used))

            cpu_ratio, memory_ratio = _locality(
                gpus,
                gpu_nodes,
                node_cpu,
                {str(n): float(v) for n, v in node_memory.items()},
            )
            if cpu_ratio is not None:
                locality.add_metric([*who, "cpu"], cpu_ratio)
            if memory_ratio is not None:
                locality.add_metric([*who, "memory"], memory_ratio)

        dropped.add_metric([], float(dropped_total))
        yield from nonempty([info, cpu_seconds, threads, memory, gpu_info, gpu_memory, locality])
        yield dropped

    def _account_cpu(self, kept: list[WorkloadReading]) -> dict[str, dict[str, float]]:
        """Add each thread's CPU time since the last scrape to its current node (lock held)."""
        last = self._thread_seconds
        seen: dict[ThreadKey, float] = {}
        counters: dict[str, dict[str, float]] = {}
        for workload in kept:
            name = workload.identity.name
            per_node = self._cpu.get(name)
            if per_node is None:
                per_node = {}
            for key, seconds, node in workload.threads:
                previous = last.get(key)
                delta = seconds if previous is None or seconds < previous else seconds - previous
                if delta or node not in per_node:
                    per_node[node] = per_node.get(node, 0.0) + delta
                seen[key] = seconds
            counters[name] = per_node
        self._thread_seconds = seen
        self._cpu = counters
        return {name: dict(values) for name, values in counters.items()}


def _locality(
    gpus: set[int],
    gpu_nodes: dict[int, int | None],
    cpu_by_node: dict[str, float],
    memory_by_node: dict[str, float],
) -> tuple[float | None, float | None]:
    """(cpu share, memory share) on the GPUs' node(s), or on the dominant node without GPUs."""
    if gpus:
        local = {str(n) for g in gpus if (n := gpu_nodes.get(g)) is not None}
        if not local:
            return None, None
        return _share(cpu_by_node, local), _share(memory_by_node, local)
    return _dominant_share(cpu_by_node), _dominant_share(memory_by_node)


def _share(values: dict[str, float], nodes: set[str]) -> float | None:
    total = sum(values.values())
    if total <= 0:
        return None
    return sum(v for n, v in values.items() if n in nodes) / total


def _dominant_share(values: dict[str, float]) -> float | None:
    total = sum(values.values())
    if total <= 0:
        return None
    return max(values.values()) / total


class _ContextGpuProcesses:
    """Reads ``ctx.gpu_processes`` at scrape time, so that it does not matter whether the GPU
    source was attached to the context before or after this collector was built.
    """

    def __init__(self, ctx: CollectorContext) -> None:
        self._ctx = ctx

    def gpu_processes(self) -> list[GpuProcess]:
        """The context's GPU processes now; empty while no GPU source is attached."""
        source = self._ctx.gpu_processes
        return source.gpu_processes() if source is not None else []


def _build(ctx: CollectorContext) -> WorkloadsCollector:
    return WorkloadsCollector(
        ctx.config.workloads,
        ctx.config.paths,
        ctx.topology,
        _ContextGpuProcesses(ctx),
        mapper=workload_mapper(ctx),
    )


ENTRY = CollectorEntry(
    name="workloads",
    default_enabled=True,
    factory=_build,
    description="per-workload (cgroup or process tree) CPU, memory and GPU NUMA locality",
)
