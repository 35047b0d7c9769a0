"""``workloads`` collector: where each workload's threads run, where its memory lives, which
GPUs it holds, and how much of that is local to its GPUs.

A *workload* is, in ``cgroup`` mode (the default), the set of processes of one cgroup that
holds processes, named by
:func:`~toposcope.host.workload_identity.classify_cgroup`: a Kubernetes
container (``<pod uid>/<container id[:12]>``), a Docker container (``<id[:12]>``), a Slurm
job (``slurm-job-<id>``, all steps), a systemd unit (``sshd.service``) or another cgroup
(its path). In ``process`` mode it is a top-level process tree (a child of pid 1 and its
descendants), named ``pid-<root pid>``. Include/exclude patterns see the workload's cgroup
path (its ``comm`` in process mode).

Every per-workload series carries ``namespace``, ``pod`` and ``container`` (dcgm-exporter's
names): on a Kubernetes node they are filled in from the container runtime's state and the
kubelet's pod-resources API
(:class:`~toposcope.host.podresources.mapper.KubeletMapper`), elsewhere empty;
and ``slurm_job_id``, ``slurm_user``, ``slurm_account``, ``slurm_partition``, the Slurm job
it belongs to (:mod:`~toposcope.host.slurm_identity`), empty elsewhere. All of
them are functions of ``workload``, so they add no series. ``toposcope_workload_info`` also
says what the workload is (``workload_kind``) and, with ``--kubernetes.pod-owners``, its
pod's controller and QoS class (:mod:`~toposcope.host.kube_owners`). Those
labels are read only for the workloads kept, after the ``max_workloads`` cut.

When the exporter serves (``--collector.workloads.sample-interval``, 15 s by default), the
host is read by a background sampler on that interval, never inside a scrape: a scrape
serves the families of the last complete sample, rendered once per sample, and
``toposcope_workload_sample_age_seconds`` says how old it is (the pod list of
``--kubernetes.pod-owners`` is read on that thread too). The first scrape, or ``--print``,
takes the first sample itself. With an interval of 0 (the simulator, tests) each scrape
reads the host itself and the age is 0.

Figures, per workload:

* ``toposcope_workload_cpu_seconds_total{numa_node}``: every thread's utime + stime is read
  each sample; the CPU time a thread used since the previous sample is added to the NUMA
  node of the CPU it last ran on (``stat`` field 39). A thread seen for the first time
  brings its whole past CPU time to its current node. The counter therefore never goes
  down while the workload lives, but time of threads that exited between samples is lost.
* ``toposcope_workload_threads{numa_node}``: live threads by the node of their last CPU.
* ``toposcope_workload_memory_bytes{numa_node}``: the cgroup's ``memory.numa_stat``
  (v2 anon + file bytes, v1 ``hierarchical_total`` pages x page size); without it, the sum
  of its processes' ``/proc/PID/numa_maps`` (shared pages count once per process).
* ``toposcope_workload_gpu_info{gpu}``: GPUs it holds: ``/dev/nvidiaN`` descriptors (the
  minor is mapped to the GPU index through ``/proc/driver/nvidia/gpus/*/information`` when
  present, else taken as the index; descriptors are not scanned on hosts whose PCI bus shows
  no GPU) and, with a GPU source, the GPUs NVML lists its pids on.
* ``toposcope_workload_gpu_memory_used_bytes{gpu}``: NVML's per-process GPU memory, summed.
* ``toposcope_workload_gpu_{pcie,nvlink}_bytes_total`` and
  ``toposcope_workload_gpu_{sm_active,sm_occupancy,tensor_active,dram_active}_ratio``: the
  throughput and activity of each GPU the workload holds, as the ``gpu`` collector last read
  them (:mod:`~toposcope.exporters.collectors.gpu_activity`), NVLink summed over links;
  ``shared="true"`` when more than one kept workload holds the GPU, whose figure each then
  carries whole (a GPU's activity cannot be told apart by process). Nothing without the
  ``gpu`` collector.
* ``toposcope_workload_gpu_sm_utilization_ratio{gpu,shared}``: the workload's own share of a
  GPU's SM time, its processes' NVML per-process samples (``smUtil``) summed: what it gets of
  a GPU it time-slices with others (:mod:`~toposcope.host.nvml.process_utilization`).
  Absent for a GPU without per-process samples (none since the last sample, or not
  supported: MIG, vGPU); 0 when the GPU has samples but none of the workload's processes.
* ``toposcope_workload_nic_nearest_gpus{nic,link}``, ``toposcope_workload_nic_far_gpus`` and
  ``toposcope_workload_nic_used_info{nic,source,link,near}``: on hosts with RDMA NICs, which
  NICs its GPUs are nearest to, how many of its GPUs have none nearer than NODE, and which
  NICs it uses by NCCL_IB_HCA or its cgroup's RDMA accounting
  (:mod:`~toposcope.exporters.collectors.workload_nics`, :mod:`~toposcope.host.nic_use`).
* ``toposcope_workload_memory_bandwidth_bytes_total{numa_node,locality}``: where resctrl is
  mounted with memory bandwidth monitoring, the MBM bytes of the MON groups all of whose
  threads the workload holds, by the NUMA node of the L3 domain its threads ran in and
  whether the memory was that domain's own (``local``) or another's (``remote``)
  (:mod:`~toposcope.host.resctrl_groups`). Nothing for a workload no group monitors.
* ``toposcope_workload_locality_ratio{resource}``: with GPUs whose NUMA node is known, the
  share of its CPU seconds (the cumulative counters above, i.e. since the exporter first saw
  it) and of its memory on the node(s) of those GPUs; without GPUs, the share on its
  dominant node. No series when the total is 0 or its GPUs' nodes are all unknown.
* ``toposcope_workloads_dropped_total``: when more than ``max_workloads`` qualify, the
  largest by current CPU seconds (ties by name) are kept and each sample adds the number
  left out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.catalogue.model import MetricSpec
from toposcope.config import HostPaths, WorkloadSettings
from toposcope.exporters.collectors.gpu_activity import (
    WORKLOAD_ACTIVITY_FAMILIES,
    add_workload_activity,
)
from toposcope.exporters.collectors.workload_nics import WORKLOAD_NIC_FAMILIES, add_workload_nics
from toposcope.exporters.context import (
    CollectorContext,
    HostTopology,
)
from toposcope.exporters.exposition import FamilyWriter, RenderedFamily
from toposcope.exporters.heap import release_free_memory
from toposcope.exporters.kubelet_attach import workload_mapper
from toposcope.exporters.registry import CollectorEntry
from toposcope.exporters.workload_snapshot import WorkloadSnapshot, WorkloadSnapshotter
from toposcope.host.kube_owners import PodDirectory, open_pod_directory
from toposcope.host.nvml.records import (
    GpuActivity,
    GpuActivitySource,
    GpuProcess,
    GpuProcessSource,
    GpuProcessUtilizationSource,
)
from toposcope.host.sampler import PeriodicSampler, Sample
from toposcope.host.workload_identity import WorkloadMapper


class WorkloadsCollector:
    """Publishes per-workload CPU, memory and GPU placement (see the module docstring).

    With ``settings.sample_interval`` 0 every scrape reads the host. Otherwise a
    :class:`~toposcope.host.sampler.PeriodicSampler` reads it on its own thread,
    started by the first scrape (or :meth:`start`) and stopped by :meth:`stop`; a scrape
    serves the families of the last complete sample, rendered once per sample, plus
    ``toposcope_workload_sample_age_seconds``.
    """

    def __init__(
        self,
        settings: WorkloadSettings,
        paths: HostPaths,
        topology: HostTopology,
        gpu_processes: GpuProcessSource | None = None,
        mapper: WorkloadMapper | None = None,
        pods: PodDirectory | None = None,
        gpu_activity: GpuActivitySource | None = None,
        process_utilization: GpuProcessUtilizationSource | None = None,
    ) -> None:
        self._snapshotter = WorkloadSnapshotter(
            settings,
            paths,
            topology.get,
            gpu_processes,
            mapper,
            pods,
            gpu_activity,
            process_utilization,
        )
        self.sampler: PeriodicSampler[list[RenderedFamily]] | None = None
        if settings.sample_interval > 0:
            self.sampler = PeriodicSampler(
                "workload-sampler", self._take_rendered, settings.sample_interval
            )
        self._lock = threading.Lock()

    def _take_rendered(self) -> list[RenderedFamily]:
        """One snapshot's families, written straight to bytes once (the sampler's ``take``)."""
        families = rendered_workload_families(self._snapshotter.take())
        release_free_memory()
        return families

    def start(self) -> None:
        """Start the background sampler, if there is one (idempotent)."""
        if self.sampler is not None:
            self.sampler.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the background sampler; ``False`` if a sample is still under way."""
        return self.sampler.stop(timeout) if self.sampler is not None else True

    # -- scrape ----------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """Yield the ``toposcope_workload*`` families of the last sample (or of a read now)."""
        age = FamilyWriter(spec("toposcope_workload_sample_age_seconds"))
        if self.sampler is None:
            with self._lock:
                families = plain_workload_families(self._snapshotter.take())
            age.add_metric([], 0.0)
            yield from families
            yield age.plain()
            return
        self.start()
        sample: Sample[list[RenderedFamily]] | None = self.sampler.latest()
        if sample is None:
            raise RuntimeError("no workload sample yet: the first one failed (see the log)")
        age.add_metric([], self.sampler.age(sample))
        yield from sample.value
        yield age.plain()


#: A workload's share of each GPU's SM time, from NVML's per-process samples.
SM_SHARE_FAMILY = "toposcope_workload_gpu_sm_utilization_ratio"

#: The workload families in exposition order; the dropped counter (last) is always written.
FAMILIES = (
    "toposcope_workload_info",
    "toposcope_workload_cpu_seconds_total",
    "toposcope_workload_threads",
    "toposcope_workload_memory_bytes",
    "toposcope_workload_gpu_info",
    "toposcope_workload_gpu_memory_used_bytes",
    "toposcope_workload_locality_ratio",
    *WORKLOAD_ACTIVITY_FAMILIES,
    SM_SHARE_FAMILY,
    *WORKLOAD_NIC_FAMILIES,
    "toposcope_workload_memory_bandwidth_bytes_total",
    "toposcope_workloads_dropped_total",
)


class FamilySink(Protocol):
    """Where one family's samples go: a
    :class:`~toposcope.exporters.exposition.FamilyWriter` (what the collector serves), or a
    client_python family (:func:`workload_families`, the reference the text is tested and
    benchmarked against).
    """

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        """Add one sample."""
        ...


S = TypeVar("S", bound=FamilySink)


def workload_families(snapshot: WorkloadSnapshot) -> list[Metric]:
    """The ``toposcope_workload*`` families of one snapshot as client_python families (only
    families with samples, and the dropped counter always): not served, the reference that
    the written text is compared with in tests and ``bench/exporter_host.py``.
    """
    families = fill_workload_families(snapshot, MetricSpec.family)
    return [*(f for f in families[:-1] if f.samples), families[-1]]


def _workload_writers(snapshot: WorkloadSnapshot) -> list[FamilyWriter]:
    """The families of :func:`workload_families`, written straight to text."""
    writers = fill_workload_families(snapshot, FamilyWriter)
    return [*(w for w in writers[:-1] if w), writers[-1]]


def plain_workload_families(snapshot: WorkloadSnapshot) -> list[RenderedFamily]:
    """The same families written straight to text, uncompressed (what a scrape serves when
    it reads the host itself: a sample interval of 0).
    """
    return [w.plain() for w in _workload_writers(snapshot)]


def rendered_workload_families(snapshot: WorkloadSnapshot) -> list[RenderedFamily]:
    """The same families written straight to bytes and compressed (what the background
    sampler keeps: one gzip member per family).
    """
    return [w.rendered() for w in _workload_writers(snapshot)]


def fill_workload_families(snapshot: WorkloadSnapshot, make: Callable[[MetricSpec], S]) -> list[S]:
    """Add every sample of one snapshot to a sink per family of :data:`FAMILIES` (``make``
    builds each from its catalogue row); returns the sinks in that order.
    """
    sinks = [make(spec(name)) for name in FAMILIES]
    info, cpu_seconds, threads, memory, gpu_info, gpu_memory, locality = sinks[:7]
    dropped = sinks[-1]
    activity_sinks = dict(zip(FAMILIES, sinks, strict=True))
    holders: dict[int, int] = {}
    for workload in snapshot.workloads:
        for gpu in workload.gpus:
            holders[gpu] = holders.get(gpu, 0) + 1
    for workload in snapshot.workloads:
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
                ident.kind.value,
                ident.slurm_job_id,
                ident.slurm_user,
                ident.slurm_account,
                ident.slurm_partition,
                ident.owner_kind,
                ident.owner_name,
                ident.qos_class,
            ],
            1.0,
        )
        who = [
            name,
            ident.namespace,
            ident.pod,
            ident.container,
            ident.slurm_job_id,
            ident.slurm_user,
            ident.slurm_account,
            ident.slurm_partition,
        ]
        for node, seconds in sorted(workload.cpu_seconds.items()):
            cpu_seconds.add_metric([*who, node], seconds)
        for node, count in sorted(workload.threads.items()):
            threads.add_metric([*who, node], float(count))
        for node, value in sorted(workload.memory.items(), key=lambda item: int(item[0])):
            memory.add_metric([*who, node], value)
        for gpu in sorted(workload.gpus):
            gpu_info.add_metric([*who, str(gpu)], 1.0)
        for gpu, used in sorted(workload.gpu_used.items()):
            gpu_memory.add_metric([*who, str(gpu)], float(used))
        cpu_ratio, memory_ratio = _locality(
            set(workload.gpus), snapshot.gpu_nodes, workload.cpu_seconds, workload.memory
        )
        if cpu_ratio is not None:
            locality.add_metric([*who, "cpu"], cpu_ratio)
        if memory_ratio is not None:
            locality.add_metric([*who, "memory"], memory_ratio)
        for gpu in sorted(workload.gpus):
            reading: GpuActivity | None = snapshot.gpu_activity.get(gpu)
            if reading is not None:
                add_workload_activity(activity_sinks, who, reading, holders[gpu] > 1)
        for gpu, share in sorted(workload.gpu_sm_share.items()):
            shared = "true" if holders.get(gpu, 0) > 1 else "false"
            activity_sinks[SM_SHARE_FAMILY].add_metric([*who, str(gpu), shared], share)
        add_workload_nics(activity_sinks, who, workload, snapshot.nic_locality)
        for (numa_label, where), value in sorted(workload.memory_traffic.items()):
            activity_sinks["toposcope_workload_memory_bandwidth_bytes_total"].add_metric(
                [*who, numa_label, where], value
            )
    dropped.add_metric([], float(snapshot.dropped_total))
    return sinks


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
    """Reads ``ctx.gpu_processes`` (and ``ctx.nvml``'s activity) at scrape time, so that it
    does not matter whether the GPU source was attached to the context before or after this
    collector was built.
    """

    def __init__(self, ctx: CollectorContext) -> None:
        self._ctx = ctx

    def gpu_processes(self) -> list[GpuProcess]:
        """The context's GPU processes now; empty while no GPU source is attached."""
        source = self._ctx.gpu_processes
        return source.gpu_processes() if source is not None else []

    def gpu_activity(self) -> dict[int, GpuActivity]:
        """The GPU source's latest activity reading; empty while none is attached."""
        source = self._ctx.nvml
        return source.gpu_activity() if source is not None else {}

    def gpu_process_utilization(self) -> dict[int, dict[int, float]]:
        """Each process's SM share per GPU since the last reading; empty without a source."""
        source = self._ctx.nvml
        return source.gpu_process_utilization() if source is not None else {}


def _build(ctx: CollectorContext) -> WorkloadsCollector:
    gpus = _ContextGpuProcesses(ctx)
    collector = WorkloadsCollector(
        ctx.config.workloads,
        ctx.config.paths,
        ctx.topology,
        gpus,
        mapper=workload_mapper(ctx),
        pods=open_pod_directory(ctx.config.pod_owners),
        gpu_activity=gpus,
        process_utilization=gpus,
    )
    if collector.sampler is not None:
        ctx.background.append(collector)
    return collector


ENTRY = CollectorEntry(
    name="workloads",
    default_enabled=True,
    factory=_build,
    description="per-workload (cgroup or process tree) CPU, memory and GPU NUMA locality",
)
