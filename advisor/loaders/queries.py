"""One class per query need of the advisor, each built from a catalogue metric name.

Every class names its metric (checked against :mod:`toposcope.catalogue` when the module is
imported) and how samples are reduced over the run's window; :meth:`Query.promql` writes the
PromQL. Series keep all their labels (``job``, ``instance``, ``node``...) so that the model
builder can tell nodes apart; nothing is aggregated away in PromQL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toposcope.advisor.loaders.base import LoadedData, MetricsBackend, Query, QueryResult, Window
from toposcope.advisor.loaders.screen import NameScreen
from toposcope.catalogue import spec
from toposcope.identity.node import AUTO

LOG = logging.getLogger("toposcope.advisor.loaders")


# topology ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class BuildInfoLoader(Query):
    """Exporter version and reported hostname per scrape target (maps instance to host)."""

    name = "build-info"
    metric = "toposcope_exporter_build_info"


@dataclass(frozen=True)
class NumaNodeLoader(Query):
    """NUMA nodes with their package and cpulist (``toposcope_numa_node_info``)."""

    name = "numa-nodes"
    metric = "toposcope_numa_node_info"


@dataclass(frozen=True)
class NumaDistanceLoader(Query):
    """SLIT distances between NUMA nodes (10 = local)."""

    name = "numa-distance"
    metric = "toposcope_numa_distance"


@dataclass(frozen=True)
class CpusOnlineLoader(Query):
    """Online CPUs per NUMA node (capacity for pinning)."""

    name = "cpus-online"
    metric = "toposcope_cpus_online"


@dataclass(frozen=True)
class NumaMemoryTotalLoader(Query):
    """Memory installed per NUMA node."""

    name = "numa-memory-total"
    metric = "toposcope_numa_memory_total_bytes"


@dataclass(frozen=True)
class NumaMemoryFreeLoader(Query):
    """Free memory per NUMA node, the lowest over the window (capacity is the worst case)."""

    name = "numa-memory-free"
    metric = "toposcope_numa_memory_free_bytes"
    reduction = "min"


# GPUs -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuInfoLoader(Query):
    """GPU identity and NUMA node from NVML (``toposcope_gpu_info``)."""

    name = "gpu-info"
    metric = "toposcope_gpu_info"


@dataclass(frozen=True)
class GpuLocalityLoader(Query):
    """GPU NUMA node from sysfs, used when NVML reports none."""

    name = "gpu-locality"
    metric = "toposcope_gpu_locality_info"


@dataclass(frozen=True)
class GpuLinkLoader(Query):
    """The GPU-to-GPU link matrix (NV#, PIX, PXB, PHB, NODE, SYS)."""

    name = "gpu-links"
    metric = "toposcope_gpu_link_info"


@dataclass(frozen=True)
class GpuUpLoader(Query):
    """Whether each GPU answers NVML now (lost GPUs are never placement targets)."""

    name = "gpu-up"
    metric = "toposcope_gpu_up"


@dataclass(frozen=True)
class GpuUtilizationLoader(Query):
    """Mean GPU utilization over the window."""

    name = "gpu-utilization"
    metric = "toposcope_gpu_utilization_ratio"
    reduction = "avg"


@dataclass(frozen=True)
class GpuUtilizationMaxLoader(Query):
    """Highest GPU utilization sample in the window (idle means even the peak is low)."""

    name = "gpu-utilization-max"
    metric = "toposcope_gpu_utilization_ratio"
    reduction = "max"


@dataclass(frozen=True)
class GpuUtilizationSamplesLoader(Query):
    """Number of utilization samples in the window (too few: cannot decide)."""

    name = "gpu-utilization-samples"
    metric = "toposcope_gpu_utilization_ratio"
    reduction = "count"


@dataclass(frozen=True)
class GpuUtilizationHistoryLoader(Query):
    """GPU utilization as a range query: which part of the window the samples cover."""

    name = "gpu-utilization-history"
    metric = "toposcope_gpu_utilization_ratio"
    query_type = "range"


@dataclass(frozen=True)
class GpuMemoryUsedLoader(Query):
    """Mean framebuffer memory used over the window."""

    name = "gpu-memory-used"
    metric = "toposcope_gpu_memory_used_bytes"
    reduction = "avg"


@dataclass(frozen=True)
class GpuMemoryTotalLoader(Query):
    """Framebuffer memory installed per GPU."""

    name = "gpu-memory-total"
    metric = "toposcope_gpu_memory_total_bytes"


@dataclass(frozen=True)
class GpuClockEventLoader(Query):
    """Share of the window each clock-event (throttle) reason was active, per GPU.

    Only reasons active at some point in the window are asked for: a GPU exports one series
    per reason (nine), almost all zero, and node-settings reads only shares above zero. On
    1,000 nodes this cut the answer from 13 MB to what is throttling.
    """

    name = "gpu-clock-events"
    metric = "toposcope_gpu_clock_event_active"
    reduction = "avg"
    positive_only = True


@dataclass(frozen=True)
class SlurmGresMatchLoader(Query):
    """Whether each GPU's gres.conf Cores=/Links= match the topology (``slurm_gres``)."""

    name = "slurm-gres-match"
    metric = "toposcope_slurm_gres_config_match"


@dataclass(frozen=True)
class SlurmGresExpectedLoader(Query):
    """The gres.conf line toposcope writes for each GPU (``slurm_gres`` collector)."""

    name = "slurm-gres-expected"
    metric = "toposcope_slurm_gres_expected_info"


# workloads --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadInfoLoader(Query):
    """Tracked workloads and their identity (pid, cgroup, pod...)."""

    name = "workload-info"
    metric = "toposcope_workload_info"


@dataclass(frozen=True)
class WorkloadCpuLoader(Query):
    """Cores a workload used per NUMA node over the window (rate of its CPU seconds)."""

    name = "workload-cpu"
    metric = "toposcope_workload_cpu_seconds_total"
    reduction = "rate"


@dataclass(frozen=True)
class WorkloadThreadsLoader(Query):
    """Threads of a workload by the NUMA node they last ran on."""

    name = "workload-threads"
    metric = "toposcope_workload_threads"


@dataclass(frozen=True)
class WorkloadMemoryLoader(Query):
    """Where a workload's memory lives now, per NUMA node."""

    name = "workload-memory"
    metric = "toposcope_workload_memory_bytes"


@dataclass(frozen=True)
class WorkloadLocalityLoader(Query):
    """The exporter's locality ratios (cpu, memory) averaged over the window (evidence)."""

    name = "workload-locality"
    metric = "toposcope_workload_locality_ratio"
    reduction = "avg"


@dataclass(frozen=True)
class WorkloadGpuLoader(Query):
    """GPUs each workload holds open."""

    name = "workload-gpus"
    metric = "toposcope_workload_gpu_info"


@dataclass(frozen=True)
class WorkloadGpuMemoryLoader(Query):
    """GPU memory a workload's processes use, per GPU."""

    name = "workload-gpu-memory"
    metric = "toposcope_workload_gpu_memory_used_bytes"


QUERY_TYPES: tuple[type[Query], ...] = (
    BuildInfoLoader,
    NumaNodeLoader,
    NumaDistanceLoader,
    CpusOnlineLoader,
    NumaMemoryTotalLoader,
    NumaMemoryFreeLoader,
    GpuInfoLoader,
    GpuLocalityLoader,
    GpuLinkLoader,
    GpuUpLoader,
    GpuUtilizationLoader,
    GpuUtilizationMaxLoader,
    GpuUtilizationSamplesLoader,
    GpuUtilizationHistoryLoader,
    GpuMemoryUsedLoader,
    GpuMemoryTotalLoader,
    GpuClockEventLoader,
    SlurmGresMatchLoader,
    SlurmGresExpectedLoader,
    WorkloadInfoLoader,
    WorkloadCpuLoader,
    WorkloadThreadsLoader,
    WorkloadMemoryLoader,
    WorkloadLocalityLoader,
    WorkloadGpuLoader,
    WorkloadGpuMemoryLoader,
)

#: the queries a placement (``toposcope place``) needs: topology and GPU state, no workloads
#: beyond which GPUs they hold
PLACEMENT_QUERIES: frozenset[str] = frozenset(
    {
        "build-info",
        "numa-nodes",
        "gpu-info",
        "gpu-locality",
        "gpu-links",
        "gpu-up",
        "workload-info",
        "workload-gpus",
    }
)

for _query in QUERY_TYPES:
    spec(_query.metric)  # every query reads a catalogue metric; KeyError at import otherwise


def queries(selector: str = "", names: Iterable[str] | None = None) -> list[Query]:
    """Instances of the query classes (all, or those named), with ``selector`` applied."""
    wanted = set(names) if names is not None else None
    return [q(selector) for q in QUERY_TYPES if wanted is None or q.name in wanted]


def load_all(
    backend: MetricsBackend, window: Window, needs: Sequence[Query], *, node_label: str = AUTO
) -> LoadedData:
    """Run every query against ``backend`` and gather the results and warnings.

    Connection errors propagate (the run cannot go on); an empty result is kept as missing
    data for the policies to report as "cannot decide". Series whose node or workload name
    breaks the naming rules are dropped and counted (:mod:`.screen`; ``node_label`` is the
    run's ``--node-label``, a label that names nodes too).
    """
    results: dict[str, QueryResult] = {}
    notes: list[str] = []
    timings: dict[str, float] = {}
    screen = NameScreen(node_label)
    for query in needs:
        started = time.perf_counter()
        result = screen.screened(backend.load(query, window), query.metric)
        timings[query.name] = time.perf_counter() - started
        LOG.debug(
            "query %s: %d sample(s), %d series in %.3f s",
            query.name,
            len(result.samples),
            len(result.series),
            timings[query.name],
        )
        results[query.name] = result
        notes.extend(f"{query.name}: {w}" for w in result.warnings)
        if result.dropped:
            notes.append(f"{query.name}: dropped {result.dropped} NaN/Inf sample(s)")
        if result.empty:
            LOG.debug("query %s (%s) returned no series", query.name, result.query)
    notes += screen.notes()
    data = LoadedData(backend.source, window, results, tuple(notes), timings, dict(screen.dropped))
    LOG.debug("%d queries to %s in %.2f s", len(timings), backend.source, data.query_seconds)
    return data
