"""The advisor's query needs as one table, one :class:`~.base.QueryRow` a need.

Every row names its query (the key of its answer), its catalogue metric (checked against
:mod:`toposcope.catalogue` when the module is imported) and how samples are reduced over the
run's window; :meth:`~.base.Query.promql` writes the PromQL of every row alike. Series keep
all their labels (``job``, ``instance``, ``node``...) so that the model builder can tell
nodes apart; nothing is aggregated away in PromQL. A new need is one more row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

from toposcope.advisor.loaders.base import (
    LoadedData,
    MetricsBackend,
    Query,
    QueryResult,
    QueryRow,
    Window,
)
from toposcope.advisor.loaders.screen import NameScreen
from toposcope.catalogue import spec
from toposcope.identity.node import AUTO

LOG = logging.getLogger("toposcope.advisor.loaders")

#: every need of the advisor, in the order they are asked
QUERY_TABLE: tuple[QueryRow, ...] = (
    # topology -----------------------------------------------------------------------------
    # exporter version and reported hostname per scrape target (maps instance to host)
    QueryRow("build-info", "toposcope_exporter_build_info"),
    # NUMA nodes with their package and cpulist
    QueryRow("numa-nodes", "toposcope_numa_node_info"),
    # SLIT distances between NUMA nodes (10 = local)
    QueryRow("numa-distance", "toposcope_numa_distance"),
    # online CPUs per NUMA node (capacity for pinning)
    QueryRow("cpus-online", "toposcope_cpus_online"),
    # memory installed per NUMA node
    QueryRow("numa-memory-total", "toposcope_numa_memory_total_bytes"),
    # free memory per NUMA node, the lowest over the window (capacity is the worst case)
    QueryRow("numa-memory-free", "toposcope_numa_memory_free_bytes", reduction="min"),
    # GPUs ---------------------------------------------------------------------------------
    # GPU identity and NUMA node from NVML
    QueryRow("gpu-info", "toposcope_gpu_info"),
    # GPU NUMA node from sysfs, used when NVML reports none
    QueryRow("gpu-locality", "toposcope_gpu_locality_info"),
    # the GPU-to-GPU link matrix (NV#, PIX, PXB, PHB, NODE, SYS)
    QueryRow("gpu-links", "toposcope_gpu_link_info"),
    # each GPU's PCIe link from sysfs: the most speed the device can do (the current speed
    # drops while a GPU idles, so it is not read), and the widest its link ran in the window
    # (a link that trained down stays narrow): what the link prices rest on
    QueryRow("gpu-pcie-speed", "toposcope_gpu_pcie_link_speed_transfers_per_second"),
    QueryRow("gpu-pcie-width", "toposcope_gpu_pcie_link_width_lanes", reduction="max"),
    # whether each GPU answers NVML now (lost GPUs are never placement targets)
    QueryRow("gpu-up", "toposcope_gpu_up"),
    # mean GPU utilization over the window
    QueryRow("gpu-utilization", "toposcope_gpu_utilization_ratio", reduction="avg"),
    # highest GPU utilization sample in the window (idle means even the peak is low)
    QueryRow("gpu-utilization-max", "toposcope_gpu_utilization_ratio", reduction="max"),
    # number of utilization samples in the window (too few: cannot decide)
    QueryRow("gpu-utilization-samples", "toposcope_gpu_utilization_ratio", reduction="count"),
    # GPU utilization as a range query: which part of the window the samples cover
    QueryRow("gpu-utilization-history", "toposcope_gpu_utilization_ratio", query_type="range"),
    # mean framebuffer memory used over the window
    QueryRow("gpu-memory-used", "toposcope_gpu_memory_used_bytes", reduction="avg"),
    # framebuffer memory installed per GPU
    QueryRow("gpu-memory-total", "toposcope_gpu_memory_total_bytes"),
    # share of the window each clock-event (throttle) reason was active, per GPU; only the
    # reasons active at some point in the window are asked for: a GPU exports one series per
    # reason (nine), almost all zero, and node-settings reads only shares above zero (on
    # 1,000 nodes this cut the answer from 13 MB to what is throttling)
    QueryRow(
        "gpu-clock-events", "toposcope_gpu_clock_event_active", reduction="avg", positive_only=True
    ),
    # bytes per second over PCIe and over each NVLink, per direction (rates of the counters)
    QueryRow("gpu-pcie-rate", "toposcope_gpu_pcie_bytes_total", reduction="rate"),
    QueryRow("gpu-nvlink-rate", "toposcope_gpu_nvlink_bytes_total", reduction="rate"),
    # mean SM activity, occupancy, tensor and DRAM activity (dcgm-exporter's PROF fields)
    QueryRow("gpu-sm-active", "toposcope_gpu_sm_active_ratio", reduction="avg"),
    QueryRow("gpu-sm-occupancy", "toposcope_gpu_sm_occupancy_ratio", reduction="avg"),
    QueryRow("gpu-tensor-active", "toposcope_gpu_tensor_active_ratio", reduction="avg"),
    QueryRow("gpu-dram-active", "toposcope_gpu_dram_active_ratio", reduction="avg"),
    # whether each GPU's gres.conf Cores=/Links= match the topology (slurm_gres collector)
    QueryRow("slurm-gres-match", "toposcope_slurm_gres_config_match"),
    # the gres.conf line toposcope writes for each GPU (slurm_gres collector)
    QueryRow("slurm-gres-expected", "toposcope_slurm_gres_expected_info"),
    # workloads ----------------------------------------------------------------------------
    # tracked workloads and their identity (pid, cgroup, pod...)
    QueryRow("workload-info", "toposcope_workload_info"),
    # cores a workload used per NUMA node over the window (rate of its CPU seconds)
    QueryRow("workload-cpu", "toposcope_workload_cpu_seconds_total", reduction="rate"),
    # threads of a workload by the NUMA node they last ran on
    QueryRow("workload-threads", "toposcope_workload_threads"),
    # where a workload's memory lives now, per NUMA node
    QueryRow("workload-memory", "toposcope_workload_memory_bytes"),
    # the exporter's locality ratios (cpu, memory) averaged over the window (evidence)
    QueryRow("workload-locality", "toposcope_workload_locality_ratio", reduction="avg"),
    # GPUs each workload holds open
    QueryRow("workload-gpus", "toposcope_workload_gpu_info"),
    # GPU memory a workload's processes use, per GPU
    QueryRow("workload-gpu-memory", "toposcope_workload_gpu_memory_used_bytes"),
    # each workload's GPUs' traffic (bytes per second) and SM activity, with shared="true"
    # where another workload holds the GPU too
    QueryRow("workload-gpu-pcie-rate", "toposcope_workload_gpu_pcie_bytes_total", reduction="rate"),
    QueryRow(
        "workload-gpu-nvlink-rate", "toposcope_workload_gpu_nvlink_bytes_total", reduction="rate"
    ),
    QueryRow("workload-gpu-sm-active", "toposcope_workload_gpu_sm_active_ratio", reduction="avg"),
    # each workload's own share of each GPU's time (NVML's per-process samples), over the window
    QueryRow(
        "workload-gpu-sm-share", "toposcope_workload_gpu_sm_utilization_ratio", reduction="avg"
    ),
    # each workload's memory traffic (bytes per second) by NUMA node and locality (resctrl MBM)
    QueryRow(
        "workload-memory-traffic",
        "toposcope_workload_memory_bandwidth_bytes_total",
        reduction="rate",
    ),
    # seconds until the scheduler ends each running job (optional: a scheduler publishes it)
    QueryRow("workload-time-left", "toposcope_queue_job_time_left_seconds"),
    # Kubernetes DRA ------------------------------------------------------------------------
    # devices containers hold through ResourceClaims, with their GPU, NUMA node and PCIe root
    QueryRow("dra-devices", "toposcope_kubelet_dra_device_info"),
    # whether each device sat on a NUMA node of its container's CPUs at some point of the window
    QueryRow("dra-device-aligned", "toposcope_kubelet_device_numa_aligned", reduction="max"),
    # PCIe roots each claim's devices of one driver span
    QueryRow("dra-claim-pcie-roots", "toposcope_kubelet_dra_claim_pcie_roots", reduction="max"),
    # RDMA NICs ----------------------------------------------------------------------------
    # each GPU's PCIe tier to each RDMA NIC of its host, nearest flagged
    QueryRow("gpu-nic-links", "toposcope_gpu_nic_link_info"),
    # the RDMA NICs each workload uses (NCCL_IB_HCA, RDMA cgroup, uverbs), near or far
    QueryRow("workload-nic-used", "toposcope_workload_nic_used_info"),
    # RDMA ports with their state (the ports an NCCL_IB_HCA entry names), their traffic
    # (bytes per second per direction) and their signalling rate
    QueryRow("nic-ports", "toposcope_nic_port_info"),
    QueryRow("nic-port-traffic", "toposcope_nic_port_bytes_total", reduction="rate"),
    QueryRow("nic-port-speed", "toposcope_nic_port_rate_bytes_per_second"),
    # whether each running multi-node job's ranks sit on the same rails (fabric exporter)
    QueryRow("job-rail-aligned", "toposcope_job_fabric_rail_aligned"),
    # the GPUs each running multi-node job holds on each of its nodes (fabric exporter)
    QueryRow("job-fabric-node-gpus", "toposcope_job_fabric_node_gpus"),
    # which NIC ports of each node are cabled to a leaf switch (fabric exporter)
    QueryRow("fabric-node-ports", "toposcope_fabric_node_info"),
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
        "gpu-pcie-speed",
        "gpu-pcie-width",
        "gpu-up",
        "workload-info",
        "workload-gpus",
    }
)


def _check_table(rows: Sequence[QueryRow]) -> None:
    """Refuse, at import, a row whose metric the catalogue lacks or whose name is taken."""
    names: set[str] = set()
    for row in rows:
        spec(row.metric)  # KeyError for a metric that is not in the catalogue
        if row.name in names:
            raise ValueError(f"query name {row.name!r} is in the query table more than once")
        names.add(row.name)
    if unknown := PLACEMENT_QUERIES - names:
        raise ValueError(f"placement queries {sorted(unknown)} are not in the query table")


_check_table(QUERY_TABLE)


def queries(selector: str = "", names: Iterable[str] | None = None) -> list[Query]:
    """The queries of the table's rows (all, or those named), with ``selector`` applied."""
    wanted = set(names) if names is not None else None
    return [row.bind(selector) for row in QUERY_TABLE if wanted is None or row.name in wanted]


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
