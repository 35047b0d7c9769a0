"""One complete reading of the host's workloads, as the workloads collector publishes it.

:class:`WorkloadSnapshotter` does everything that reads the host for the ``workloads``
collector (see its module docstring for the figures): it finds the workloads, reads every
thread's CPU time and last CPU, keeps the largest ``max_workloads``, labels them (Slurm job,
pod owner), reads their memory per NUMA node, the GPUs they hold and their resctrl memory
traffic (:mod:`toposcope.host.resctrl_groups`), and adds each thread's
CPU time since the previous snapshot to the node it runs on now. The result is a
:class:`WorkloadSnapshot`, plain values only, which the collector turns into families.

It runs inside the scrape (``sample_interval`` 0) or on the background sampler's thread
(:mod:`toposcope.host.sampler`); one snapshot is taken at a time, so the CPU
counters it keeps need no lock of their own. A process that vanishes between listing and
reading is skipped; one that vanishes after the snapshot is simply absent from the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from toposcope.config import HostPaths, WorkloadSettings
from toposcope.host.kube_owners import PodDirectory
from toposcope.host.nic_use import NicUse, NicUseReader
from toposcope.host.nvml.records import (
    GpuActivity,
    GpuActivitySource,
    GpuProcessSource,
    GpuProcessUtilizationSource,
)
from toposcope.host.resctrl import resctrl_mount
from toposcope.host.resctrl_groups import attribute, read_mon_groups, workload_traffic
from toposcope.host.sysfs import SysfsNodes
from toposcope.host.workload_identity import WorkloadMapper
from toposcope.host.workload_reader import ThreadKey, WorkloadReader, WorkloadReading
from toposcope.identity.workload import WorkloadIdentity
from toposcope.topology.model import Topology
from toposcope.topology.nic_locality import NicLocality


@dataclass(frozen=True)
class WorkloadFigures:
    """One kept workload in a snapshot: who it is and where its CPU, memory and GPUs are.

    Node keys are NUMA node labels (``"0"``, ``""`` for a CPU of unknown node).
    """

    identity: WorkloadIdentity
    root_pid: int
    comm: str
    cpu_seconds: dict[str, float]
    threads: dict[str, int]
    memory: dict[str, float]
    gpus: frozenset[int]
    gpu_used: dict[int, int]
    #: the RDMA NICs it uses (NCCL_IB_HCA, the cgroup's RDMA accounting), by NIC name
    nics_used: tuple[NicUse, ...] = ()
    #: resctrl MBM bytes of its MON groups by (NUMA node label, ``local``/``remote``)
    memory_traffic: dict[tuple[str, str], float] = field(default_factory=dict)
    #: its processes' summed share of each GPU's SM time, for the GPUs NVML gave
    #: per-process samples of (:mod:`~toposcope.host.nvml.process_utilization`)
    gpu_sm_share: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadSnapshot:
    """Every kept workload (sorted by name), the GPUs' NUMA nodes and the dropped count.

    ``gpu_activity`` is the GPU source's latest throughput and activity reading per GPU
    (what the ``gpu`` collector read last), attributed to the workloads holding each GPU.
    ``nic_locality`` is the host's RDMA NICs and each GPU's nearest ones.
    """

    workloads: list[WorkloadFigures]
    gpu_nodes: dict[int, int | None] = field(default_factory=dict)
    dropped_total: int = 0
    gpu_activity: dict[int, GpuActivity] = field(default_factory=dict)
    nic_locality: NicLocality = field(default_factory=NicLocality)


class WorkloadSnapshotter:
    """Reads the host's workloads into a :class:`WorkloadSnapshot` (see the module docstring).

    Keeps, across snapshots, each live thread's last CPU seconds and the per-workload,
    per-node CPU counters built from them, plus the dropped-workloads counter.
    """

    def __init__(
        self,
        settings: WorkloadSettings,
        paths: HostPaths,
        topology: Callable[[], Topology],
        gpu_processes: GpuProcessSource | None = None,
        mapper: WorkloadMapper | None = None,
        pods: PodDirectory | None = None,
        gpu_activity: GpuActivitySource | None = None,
        process_utilization: GpuProcessUtilizationSource | None = None,
    ) -> None:
        self._settings = settings
        self._process_utilization = process_utilization
        self._gpu_activity = gpu_activity
        self._pods = pods
        self._topology = topology
        self._gpu_processes = gpu_processes
        self._reader = WorkloadReader(settings, paths, mapper)
        self._paths = paths
        self._l3_for: Topology | None = None
        self._l3_cpus: dict[int, tuple[int, ...]] = {}
        self._thread_seconds: dict[ThreadKey, float] = {}
        self._cpu: dict[str, dict[str, float]] = {}
        self._dropped = 0
        self._cpu_node_for: Topology | None = None
        self._cpu_node: dict[int, str] = {}
        self._nic_use = NicUseReader(paths.procfs, paths.sysfs)
        self._locality_for: Topology | None = None
        self._locality = NicLocality()

    def _node_labels(self, topo: Topology) -> dict[int, str]:
        if topo is not self._cpu_node_for:
            self._cpu_node = {cpu: str(node) for cpu, node in topo.cpu_to_node().items()}
            self._cpu_node_for = topo
        return self._cpu_node

    def take(self) -> WorkloadSnapshot:
        """Read every selected workload now."""
        topo = self._topology()
        cpu_node = self._node_labels(topo)
        found, layout = self._reader.discover()
        candidates: list[WorkloadReading] = []
        for workload in found.values():
            self._reader.read_threads(workload, cpu_node)
            if workload.threads and workload.cpu_total >= self._settings.min_cpu_seconds:
                candidates.append(workload)
        candidates.sort(key=lambda w: (-w.cpu_total, w.identity.name))
        kept = candidates[: self._settings.max_workloads]
        self._dropped += len(candidates) - len(kept)
        kept.sort(key=lambda w: w.identity.name)
        for workload in kept:
            self._reader.label_job(workload)
            if self._pods is not None:
                workload.identity = self._pods.label(workload.identity)

        # No GPU on the PCI bus, no GPU device file to find: skip the descriptor scan.
        scan_fds = self._settings.gpu_fds and bool(topo.gpus)
        minor_to_gpu = self._reader.minor_to_gpu(topo) if scan_fds else {}
        nvml_gpus = self._nvml_gpus()
        if topo is not self._locality_for:
            self._locality, self._locality_for = NicLocality.of(topo), topo
        locality = self._locality
        per_node_cpu = self._account_cpu(kept)
        traffic = self._memory_traffic(kept, topo)
        sm_shares = (
            self._process_utilization.gpu_process_utilization()
            if self._process_utilization is not None
            else {}
        )
        figures: list[WorkloadFigures] = []
        for workload in kept:
            counts: dict[str, int] = {}
            for _, _, node in workload.threads:
                counts[node] = counts.get(node, 0) + 1
            memory = self._reader.memory(workload, layout)
            gpus = self._reader.gpus_from_fds(workload, minor_to_gpu) if scan_fds else set()
            gpu_used: dict[int, int] = {}
            for pid in workload.live_pids:
                for gpu, used in nvml_gpus.get(pid, {}).items():
                    gpus.add(gpu)
                    if used is not None:
                        gpu_used[gpu] = gpu_used.get(gpu, 0) + used
            figures.append(
                WorkloadFigures(
                    identity=workload.identity,
                    root_pid=workload.root_pid,
                    comm=workload.comm,
                    cpu_seconds=per_node_cpu[workload.identity.name],
                    threads=counts,
                    memory={str(node): float(value) for node, value in memory.items()},
                    gpus=frozenset(gpus),
                    gpu_used=gpu_used,
                    nics_used=tuple(
                        self._nic_use.uses(
                            locality,
                            workload.live_pids,
                            nvml_gpus,
                            frozenset(gpus),
                            workload.identity.cgroup,
                            layout,
                        )
                    ),
                    memory_traffic=traffic.get(workload.identity.name, {}),
                    gpu_sm_share=_sm_shares(sm_shares, gpus, workload.live_pids),
                )
            )
        gpu_nodes = {g.index: g.numa_node for g in topo.gpus}
        activity = self._gpu_activity.gpu_activity() if self._gpu_activity is not None else {}
        return WorkloadSnapshot(figures, gpu_nodes, self._dropped, activity, locality)

    def _memory_traffic(
        self, kept: list[WorkloadReading], topo: Topology
    ) -> dict[str, dict[tuple[str, str], float]]:
        """Each kept workload's resctrl MBM bytes by (NUMA node, locality), from the MON
        groups all of whose threads it holds (:mod:`toposcope.host.resctrl_groups`); empty
        where resctrl is not mounted.
        """
        root = resctrl_mount(self._paths)
        if root is None:
            return {}
        groups = read_mon_groups(root)
        if not groups:
            return {}
        owner = {tid: w.identity.name for w in kept for (tid, _), _, _ in w.threads}
        for w in kept:
            owner.update((pid, w.identity.name) for pid in w.live_pids)
        if topo is not self._l3_for:
            self._l3_cpus, self._l3_for = SysfsNodes(self._paths.sysfs).l3_cache_cpus(), topo
        l3_cpus = self._l3_cpus
        cpu_node = topo.cpu_to_node()
        return {
            name: workload_traffic(mine, l3_cpus, cpu_node)
            for name, mine in attribute(groups, owner).items()
        }

    def _nvml_gpus(self) -> dict[int, dict[int, int | None]]:
        """``{pid: {gpu: bytes used or None}}`` from the GPU source (empty without one)."""
        nvml_gpus: dict[int, dict[int, int | None]] = {}
        if self._gpu_processes is None:
            return nvml_gpus
        for proc in self._gpu_processes.gpu_processes():
            per_gpu = nvml_gpus.setdefault(proc.pid, {})
            used = proc.used_bytes
            if proc.gpu not in per_gpu or per_gpu[proc.gpu] is None:
                per_gpu[proc.gpu] = used
            elif used is not None:
                per_gpu[proc.gpu] = (per_gpu[proc.gpu] or 0) + used
        return nvml_gpus

    def _account_cpu(self, kept: list[WorkloadReading]) -> dict[str, dict[str, float]]:
        """Add each thread's CPU time since the last snapshot to its current node."""
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


def _sm_shares(
    by_gpu: dict[int, dict[int, float]], gpus: set[int], pids: Iterable[int]
) -> dict[int, float]:
    """A workload's share of each GPU it holds that has per-process samples: its processes'
    shares summed (0 when none of them has a sample: they ran no kernel), at most 1.
    """
    mine = set(pids)
    return {
        gpu: min(sum(share for pid, share in by_gpu[gpu].items() if pid in mine), 1.0)
        for gpu in sorted(gpus)
        if gpu in by_gpu
    }
