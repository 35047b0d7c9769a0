"""The advisor's picture of the cluster: frozen dataclasses built from loader results
(:func:`toposcope.advisor.model_builder.build_model` builds them).

Per node: NUMA nodes (package, CPUs, memory, distances), GPUs (NUMA node, utilization,
memory, throttling) and the GPU link matrix. Per workload: where its CPU time and memory
sit per NUMA node, the exporter's locality ratios, the GPUs it holds and their use. From
these the model answers capacity questions (free memory and CPU load per NUMA node, free
GPUs) for the policies. Nothing here reads the outside world or decides anything.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from toposcope.advisor.dra_state import DraDevice
from toposcope.advisor.link_prices import Measured, NodePrices
from toposcope.advisor.nic_state import NicState
from toposcope.topology.model import LinkType, link_type

if TYPE_CHECKING:
    from toposcope.advisor.memory_matrix import MemoryMatrix
    from toposcope.rm import WorkloadView

LOG = logging.getLogger("toposcope.advisor.model")

#: SLIT distance assumed between two NUMA nodes when the exporter published none
DEFAULT_REMOTE_DISTANCE = 21
LOCAL_DISTANCE = 10
#: mean GPU utilization over the window above which a GPU no workload holds is busy with
#: something unnamed, not free (idle GPUs read 0; a few per cent is a monitoring tool's probe)
BUSY_UNHELD = 0.10


@dataclass(frozen=True)
class NumaNodeState:
    """One NUMA node of a machine with its capacity (``None``: not published)."""

    id: int
    package: int | None = None
    cpus: tuple[int, ...] = ()
    cpus_online: int | None = None
    memory_total_bytes: float | None = None
    memory_free_bytes: float | None = None
    distances: Mapping[int, int] = field(default_factory=dict)

    @property
    def cpu_count(self) -> int:
        """Online CPUs when known, else the cpulist's length."""
        return self.cpus_online if self.cpus_online is not None else len(self.cpus)


@dataclass(frozen=True)
class GpuState:
    """One GPU: identity, locality and use over the window (``None``: no series).

    ``utilization`` is the window's mean, ``utilization_max`` its peak, ``utilization_last``
    its latest sample, ``samples`` the
    sample count and ``covered_seconds`` the span between the first and last sample in the
    window (how much of the window the data covers). ``clock_events`` maps a throttle
    reason to the share of the window it was active. ``gres_match`` maps a gres.conf field
    (``cores``, ``links``) to whether the node's gres.conf matches the topology for this GPU,
    ``gres_line`` is the line toposcope writes for it (both from the ``slurm_gres``
    collector; empty without it).

    Measured activity over the window (``None`` where the GPU publishes no such series, or
    where only counter totals are known: a single scrape has no rate):
    ``pcie_bytes_per_second`` and ``nvlink_bytes_per_second`` are the mean bytes per second
    sent plus received over PCIe and over all NVLinks; ``pcie_each_way_bytes_per_second`` the
    smaller of the two PCIe directions (a peer exchange moves as much each way, host copies
    mostly one way; ``None`` unless both are published); ``sm_active``, ``sm_occupancy``,
    ``tensor_active`` and ``dram_active`` the mean ratios (dcgm-exporter's
    ``DCGM_FI_PROF_*`` fields).

    ``pcie_gts`` and ``pcie_lanes`` are the GPU's PCIe link speed (GT/s, the most the device
    can do: the current speed drops while it idles) and width (the widest its link ran over
    the window), from sysfs through the exporter (``None``: not published);
    :mod:`~toposcope.advisor.link_prices` prices its pairs by them.
    """

    index: int
    numa_node: int | None = None
    uuid: str = ""
    model: str = ""
    pci_bus_id: str = ""
    up: bool | None = None
    utilization: float | None = None
    utilization_max: float | None = None
    utilization_last: float | None = None
    samples: int | None = None
    covered_seconds: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    clock_events: Mapping[str, float] = field(default_factory=dict)
    gres_match: Mapping[str, bool] = field(default_factory=dict)
    gres_line: str = ""
    pcie_bytes_per_second: float | None = None
    pcie_each_way_bytes_per_second: float | None = None
    nvlink_bytes_per_second: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    pcie_gts: float | None = None
    pcie_lanes: int | None = None


@dataclass(frozen=True)
class NodeModel:
    """One machine: its NUMA nodes, GPUs and GPU links (``(gpu, peer) -> "NV12"``), the
    GPU-to-GPU bandwidths measured on it (``--p2p-bandwidth``; empty when none) and its
    measured memory bandwidths between NUMA nodes (``--memory-bandwidth``; ``None`` when none).
    """

    name: str
    numa_nodes: tuple[NumaNodeState, ...] = ()
    gpus: tuple[GpuState, ...] = ()
    links: Mapping[tuple[int, int], str] = field(default_factory=dict)
    measured_bandwidth: Mapping[tuple[int, int], Measured] = field(default_factory=dict)
    measured_memory: MemoryMatrix | None = None

    @cached_property
    def prices(self) -> NodePrices:
        """Every GPU pair's link price (:mod:`~toposcope.advisor.link_prices`), built once."""
        return NodePrices(self)

    def numa(self, node_id: int) -> NumaNodeState | None:
        """The NUMA node ``node_id`` or ``None``."""
        return next((n for n in self.numa_nodes if n.id == node_id), None)

    def gpu(self, index: int) -> GpuState | None:
        """The GPU with index ``index`` or ``None``."""
        return next((g for g in self.gpus if g.index == index), None)

    def mean_utilization(self, indexes: Sequence[int]) -> float | None:
        """The mean utilization of the GPUs ``indexes`` that this node has; ``None`` when it
        has none of them or one of them has no utilization series.
        """
        utils = [g.utilization for i in indexes if (g := self.gpu(i)) is not None]
        if not utils or any(u is None for u in utils):
            return None
        return sum(u for u in utils if u is not None) / len(utils)

    def cpu_numa_nodes(self) -> tuple[NumaNodeState, ...]:
        """NUMA nodes that have CPUs (memory-only nodes cannot run threads)."""
        return tuple(n for n in self.numa_nodes if n.cpus)

    def distance(self, a: int, b: int) -> int:
        """SLIT distance from NUMA node ``a`` to ``b`` (10 local; 21 assumed when unknown)."""
        if a == b:
            return LOCAL_DISTANCE
        node = self.numa(a)
        if node is not None and b in node.distances:
            return node.distances[b]
        return DEFAULT_REMOTE_DISTANCE

    def package_of(self, numa_node: int | None) -> int | None:
        """The package (socket) of a NUMA node, when known."""
        node = self.numa(numa_node) if numa_node is not None else None
        return node.package if node else None

    def link(self, a: int, b: int) -> LinkType | None:
        """The class of the connection between two GPUs.

        From the published link matrix; without one, GPUs on one NUMA node count as
        ``NODE`` and GPUs on different packages as ``SYS`` (``None`` when nothing is known).
        """
        text = self.links.get((a, b)) or self.links.get((b, a))
        if text:
            try:
                return link_type(text)
            except ValueError:
                LOG.debug("node %s: unknown GPU link label %r", self.name, text)
        ga, gb = self.gpu(a), self.gpu(b)
        if ga is None or gb is None or ga.numa_node is None or gb.numa_node is None:
            return None
        if ga.numa_node == gb.numa_node:
            return LinkType.NODE
        pa, pb = self.package_of(ga.numa_node), self.package_of(gb.numa_node)
        if pa is not None and pa == pb:
            return LinkType.NODE
        return LinkType.SYS


@dataclass(frozen=True)
class WorkloadModel:
    """One workload on one node and where it runs.

    ``cpu_by_numa`` is cores used per NUMA node over the window, or CPU seconds since start
    when ``cpu_cumulative`` (the scraper cannot take a rate). ``threads_by_numa`` counts
    threads by the NUMA node they last ran on; ``memory_by_numa`` is resident bytes.
    ``locality`` holds the exporter's own ratios (``cpu``, ``memory``) as evidence.
    ``time_left_seconds`` is how long until the scheduler ends it (its time limit; ``None``:
    no limit, or no scheduler publishes it).

    ``gpu_pcie_bytes_per_second``, ``gpu_nvlink_bytes_per_second`` and ``gpu_sm_active`` map
    each of its GPUs to that GPU's measured traffic and SM activity over the window, from the
    exporter's per-workload families (empty where not published), and
    ``gpu_pcie_each_way_bytes_per_second`` the smaller PCIe direction as for a GPU's
    ``pcie_each_way_bytes_per_second``; ``gpus_shared`` is true
    when another workload holds one of them too (the figures are then the whole GPU's).
    ``gpu_sm_share`` maps each of its GPUs with per-process samples to its own share of that
    GPU's time over the window (its processes' NVML samples; empty where not published):
    what it gets of a GPU it time-slices with others.
    ``memory_bytes_per_second`` is its threads' memory traffic over the window by
    ``local``/``remote`` memory (resctrl MBM; empty where not published).
    """

    name: str
    node: str
    pid: str = ""
    comm: str = ""
    cgroup: str = ""
    pod: str = ""
    namespace: str = ""
    container: str = ""
    cpu_by_numa: Mapping[int, float] = field(default_factory=dict)
    cpu_cumulative: bool = False
    threads_by_numa: Mapping[int, int] = field(default_factory=dict)
    memory_by_numa: Mapping[int, float] = field(default_factory=dict)
    locality: Mapping[str, float] = field(default_factory=dict)
    gpus: tuple[int, ...] = ()
    gpu_memory_bytes: Mapping[int, float] = field(default_factory=dict)
    time_left_seconds: float | None = None
    gpu_pcie_bytes_per_second: Mapping[int, float] = field(default_factory=dict)
    gpu_pcie_each_way_bytes_per_second: Mapping[int, float] = field(default_factory=dict)
    gpu_nvlink_bytes_per_second: Mapping[int, float] = field(default_factory=dict)
    gpu_sm_active: Mapping[int, float] = field(default_factory=dict)
    gpu_sm_share: Mapping[int, float] = field(default_factory=dict)
    gpus_shared: bool = False
    memory_bytes_per_second: Mapping[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``node/workload``: unique across the cluster."""
        return f"{self.node}/{self.name}"

    def cpu_shares(self) -> dict[int, float]:
        """Share of CPU per NUMA node: from CPU time when any was used, else from threads."""
        total = sum(self.cpu_by_numa.values())
        if total > 0:
            return {n: v / total for n, v in self.cpu_by_numa.items()}
        threads = sum(self.threads_by_numa.values())
        if threads > 0:
            return {n: v / threads for n, v in self.threads_by_numa.items()}
        return {}

    def cpu_from_threads(self) -> bool:
        """True when :meth:`cpu_shares` had to fall back to thread placement."""
        return sum(self.cpu_by_numa.values()) <= 0 and sum(self.threads_by_numa.values()) > 0

    def memory_shares(self) -> dict[int, float]:
        """Share of resident memory per NUMA node (empty without memory series)."""
        total = sum(self.memory_by_numa.values())
        if total <= 0:
            return {}
        return {n: v / total for n, v in self.memory_by_numa.items()}

    @property
    def memory_bytes(self) -> float:
        """Resident memory over all NUMA nodes."""
        return sum(self.memory_by_numa.values())

    def cores_used(self) -> float | None:
        """Cores the workload kept busy over the window; ``None`` when no rate is known."""
        if self.cpu_cumulative or not self.cpu_by_numa:
            return None
        return sum(self.cpu_by_numa.values())


@dataclass(frozen=True)
class PendingWorkload:
    """A job waiting for GPUs, as the resource manager reports it (for placement).

    ``gpus_requested`` is per node when the job asks for several nodes (``nodes_requested``,
    a Slurm ``--nodes=N`` job); :attr:`gpus_total` is what it asks for in all.
    """

    name: str
    gpus_requested: int
    nodes_requested: int = 1

    @property
    def gpus_total(self) -> int:
        """The GPUs the job asks for over all its nodes."""
        return self.gpus_requested * max(1, self.nodes_requested)


def pending_from(workloads: Iterable[WorkloadView]) -> tuple[PendingWorkload, ...]:
    """The pending GPU jobs among a resource manager's ``workloads``, for placement."""
    return tuple(
        PendingWorkload(w.name, w.gpus_requested, w.nodes_requested)
        for w in workloads
        if w.state == "pending" and w.gpus_requested > 0
    )


@dataclass(frozen=True)
class NumaCapacity:
    """Free capacity of one NUMA node: CPUs not kept busy, memory free (``None``: unknown).

    ``cores_known`` is false when some workload's CPU use has no rate (scraped counters), so
    ``cores_used`` undercounts.
    """

    numa_node: int
    cpus: int
    cores_used: float
    memory_free_bytes: float | None
    cores_known: bool = True

    @property
    def cores_free(self) -> float:
        """CPUs minus the cores the node's workloads keep busy (never below 0)."""
        return max(0.0, self.cpus - self.cores_used)


@dataclass(frozen=True)
class GpuCapacity:
    """Whether a GPU is free for a new job, and its free framebuffer memory."""

    gpu: int
    free: bool
    holders: tuple[str, ...]
    memory_free_bytes: float | None


@dataclass(frozen=True)
class ClusterModel:
    """Every node and workload of one advisor run, with the run's window and data notes.

    ``present`` names the catalogue metrics that had series (policies report missing ones as
    "cannot decide"); ``notes`` carries loader warnings into the report;
    ``dropped_series`` counts by reason the series the loaders left out for a bad name.
    ``gpu_activity_source`` names where the GPU traffic and activity figures came from
    (``toposcope`` or ``dcgm``: see ``--gpu-metrics-source``). ``dra_devices`` are the devices
    pods hold through ResourceClaims (:mod:`~toposcope.advisor.dra_state`); ``nics`` the RDMA
    NICs near each GPU and those each workload uses (:mod:`~toposcope.advisor.nic_state`).
    """

    nodes: Mapping[str, NodeModel]
    workloads: tuple[WorkloadModel, ...] = ()
    window: str = "1h"
    window_seconds: float = 3600.0
    source: str = ""
    present: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()
    pending: tuple[PendingWorkload, ...] = ()
    dropped_series: Mapping[str, int] = field(default_factory=dict)
    gpu_activity_source: str = "toposcope"
    dra_devices: tuple[DraDevice, ...] = ()
    nics: NicState = field(default_factory=NicState)
    #: running multi-node jobs: job -> node -> GPUs held (:mod:`~toposcope.advisor.fabric_jobs`)
    fabric_jobs: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def node(self, name: str) -> NodeModel | None:
        """The node called ``name`` or ``None``."""
        return self.nodes.get(name)

    @cached_property
    def _by_node(self) -> dict[str, tuple[WorkloadModel, ...]]:
        grouped: dict[str, list[WorkloadModel]] = defaultdict(list)
        for workload in self.workloads:
            grouped[workload.node].append(workload)
        return {node: tuple(items) for node, items in grouped.items()}

    @cached_property
    def _holders(self) -> dict[str, dict[int, tuple[str, ...]]]:
        result: dict[str, dict[int, tuple[str, ...]]] = {}
        for node, workloads in self._by_node.items():
            holders: dict[int, list[str]] = defaultdict(list)
            for workload in workloads:
                for gpu in workload.gpus:
                    holders[gpu].append(workload.name)
            result[node] = {g: tuple(names) for g, names in holders.items()}
        return result

    def workloads_on(self, node: str) -> tuple[WorkloadModel, ...]:
        """Workloads running on ``node`` (indexed once per model: policies ask per node)."""
        return self._by_node.get(node, ())

    def gpu_holders(self, node: str) -> dict[int, list[str]]:
        """GPU index to the workloads holding it on ``node``."""
        return {g: list(names) for g, names in self._holders.get(node, {}).items()}

    def gpu_capacity(self, node: str) -> dict[int, GpuCapacity]:
        """Per GPU of ``node``: free when up (or unknown), held by no workload and not busy.

        A GPU busy (utilization at least :data:`BUSY_UNHELD` in the window's latest sample,
        or over the window where no sample is known) that no workload holds runs something
        the window does not name: a workload whose series a scrape gap lost, or a process
        outside every workload's cgroup. It is not offered to a new job: placing one there
        would time-slice the GPU with whatever runs on it. A GPU a job left during the
        window reads idle in its latest sample and is free.
        """
        model = self.nodes.get(node)
        if model is None:
            return {}
        holders = self._holders.get(node, {})
        result = {}
        for gpu in model.gpus:
            held = tuple(holders.get(gpu.index, ()))
            memory_free = (
                gpu.memory_total_bytes - gpu.memory_used_bytes
                if gpu.memory_total_bytes is not None and gpu.memory_used_bytes is not None
                else None
            )
            now = gpu.utilization_last if gpu.utilization_last is not None else gpu.utilization
            busy = now is not None and now >= BUSY_UNHELD
            result[gpu.index] = GpuCapacity(
                gpu.index, gpu.up is not False and not held and not busy, held, memory_free
            )
        return result

    @cached_property
    def _free(self) -> dict[str, tuple[int, ...]]:
        return {
            name: tuple(sorted(g for g, c in self.gpu_capacity(name).items() if c.free))
            for name in self.nodes
        }

    def free_gpus(self, node: str) -> tuple[int, ...]:
        """Indexes of the GPUs of ``node`` that a new job could get."""
        return self._free.get(node, ())

    def numa_capacity(self, node: str) -> dict[int, NumaCapacity]:
        """Per NUMA node of ``node``: CPUs, cores its workloads keep busy, free memory."""
        model = self.nodes.get(node)
        if model is None:
            return {}
        used: dict[int, float] = defaultdict(float)
        unknown: set[int] = set()
        for workload in self.workloads_on(node):
            cores = workload.cores_used()
            for numa, share in workload.cpu_shares().items():
                if cores is None:
                    unknown.add(numa)
                else:
                    used[numa] += share * cores
        return {
            n.id: NumaCapacity(
                n.id, n.cpu_count, used.get(n.id, 0.0), n.memory_free_bytes, n.id not in unknown
            )
            for n in model.numa_nodes
        }

    def has(self, metric: str) -> bool:
        """True when the catalogue metric ``metric`` had series in this run."""
        return metric in self.present
