"""The metric catalogue: one row per metric family toposcope publishes.

This table is the contract between the exporters (which build their families from it),
the alerting rules and dashboards (whose tests check every metric they name against it),
the advisor's loaders (which build PromQL from it) and ``docs/metrics.md`` (generated from
it by ``toposcope docs metrics``). Names follow the Prometheus naming rules: the
``toposcope_`` namespace, base units, ``_total`` for counters and ``_info`` for identity
series whose value is always 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

MetricType = Literal["gauge", "counter", "info"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: its name, type, unit, label names, help text and owning part."""

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str
    unit: str = ""
    part: str = "exporter"

    def family(self) -> GaugeMetricFamily | CounterMetricFamily:
        """A fresh, empty client_python family with this spec's name, help and labels."""
        if self.type == "counter":
            return CounterMetricFamily(self.name, self.help, labels=list(self.labels))
        return GaugeMetricFamily(self.name, self.help, labels=list(self.labels))


def _spec(
    name: str,
    type_: MetricType,
    labels: Sequence[str],
    help_: str,
    unit: str = "",
    part: str = "exporter",
) -> MetricSpec:
    return MetricSpec(name, type_, tuple(labels), help_, unit, part)


_SPECS: tuple[MetricSpec, ...] = (
    # exporter self-observability
    _spec(
        "toposcope_scrape_collector_success",
        "gauge",
        ["collector"],
        "Whether a collector succeeded on this scrape (1) or failed or found no data (0).",
    ),
    _spec(
        "toposcope_scrape_collector_duration_seconds",
        "gauge",
        ["collector"],
        "How long a collector took on this scrape.",
        "seconds",
    ),
    _spec(
        "toposcope_exporter_build_info",
        "info",
        ["version", "hostname"],
        "Exporter version and the hostname it reports for, value 1.",
    ),
    # topology
    _spec(
        "toposcope_numa_node_info",
        "info",
        ["numa_node", "package", "cpus"],
        "A NUMA node, its package (socket) and its cpulist, value 1. "
        "Memory-only nodes have an empty cpulist.",
    ),
    _spec(
        "toposcope_numa_distance",
        "gauge",
        ["numa_node", "peer_node"],
        "SLIT distance between two NUMA nodes (10 = local).",
    ),
    _spec(
        "toposcope_package_info",
        "info",
        ["package", "cpus"],
        "A processor package (socket) and its cpulist, value 1.",
    ),
    _spec(
        "toposcope_cpus_online",
        "gauge",
        ["numa_node"],
        "Number of online CPUs per NUMA node.",
    ),
    _spec(
        "toposcope_pci_device_info",
        "info",
        ["pci_bus_id", "vendor", "device", "class", "numa_node", "cpu_affinity"],
        "A PCI device and its locality (numa_node empty when unknown), value 1. "
        "Only GPUs, network and storage controllers and PCI bridges with such devices below.",
    ),
    _spec(
        "toposcope_gpu_locality_info",
        "info",
        ["gpu", "pci_bus_id", "numa_node", "cpu_affinity", "package"],
        "A GPU found on the PCI bus and its locality from sysfs, value 1 "
        "(independent of NVML; toposcope_gpu_info carries the NVML identity).",
    ),
    # NUMA memory
    _spec(
        "toposcope_numa_memory_total_bytes",
        "gauge",
        ["numa_node"],
        "Total memory of a NUMA node (node*/meminfo MemTotal).",
        "bytes",
    ),
    _spec(
        "toposcope_numa_memory_free_bytes",
        "gauge",
        ["numa_node"],
        "Free memory of a NUMA node (node*/meminfo MemFree).",
        "bytes",
    ),
    _spec(
        "toposcope_numa_memory_used_bytes",
        "gauge",
        ["numa_node"],
        "Used memory of a NUMA node (node*/meminfo MemUsed, or MemTotal - MemFree).",
        "bytes",
    ),
    _spec(
        "toposcope_numa_memory_pages_bytes",
        "gauge",
        ["numa_node", "type"],
        "Memory of a NUMA node by page type: file, anon, shmem, slab, hugepages "
        "(node*/meminfo FilePages, AnonPages, Shmem, Slab, HugePages_Total x size).",
        "bytes",
    ),
    _spec(
        "toposcope_numa_allocations_total",
        "counter",
        ["numa_node", "result"],
        "Page allocations by result from node*/numastat "
        "(hit, miss, foreign, local, other, interleave_hit), in pages.",
    ),
    # NUMA CPU
    _spec(
        "toposcope_numa_cpu_seconds_total",
        "counter",
        ["numa_node", "mode"],
        "CPU time of a NUMA node's CPUs by mode, summed from /proc/stat.",
        "seconds",
    ),
    # cross-socket
    _spec(
        "toposcope_numa_memory_bandwidth_bytes_total",
        "counter",
        ["numa_node", "locality", "source"],
        "Memory traffic served to a NUMA node's CPUs, local or remote, measured where the host "
        "has a source (resctrl MBM, uncore counters); source names it.",
        "bytes",
    ),
    _spec(
        "toposcope_cross_socket_bytes_total",
        "counter",
        ["package", "peer_package", "source"],
        "Traffic between two packages over the inter-socket link. source is the counter it was "
        "measured with (uncore, pcm) or 'estimate' for the documented numastat-based model.",
        "bytes",
    ),
    _spec(
        "toposcope_cross_socket_source_info",
        "info",
        ["source", "measured"],
        "Which cross-socket traffic source this host uses and whether it is a measurement "
        "(measured=true) or an estimate (measured=false), value 1.",
    ),
    # GPU (NVML)
    _spec(
        "toposcope_gpu_info",
        "info",
        [
            "gpu",
            "UUID",
            "pci_bus_id",
            "modelName",
            "numa_node",
            "cpu_affinity",
            "driver_version",
            "mig_mode",
            "GPU_I_ID",
            "GPU_I_PROFILE",
        ],
        "Identity and locality of a GPU or MIG instance, value 1 (dcgm-exporter label names).",
    ),
    _spec("toposcope_gpu_up", "gauge", ["gpu"], "1 when the GPU answers NVML, 0 when lost."),
    _spec(
        "toposcope_gpu_utilization_ratio",
        "gauge",
        ["gpu"],
        "Share of the last sample period a kernel ran on the GPU (NVML utilization.gpu / 100).",
        "ratio",
    ),
    _spec(
        "toposcope_gpu_memory_utilization_ratio",
        "gauge",
        ["gpu"],
        "Share of the last sample period the memory controller was busy (utilization.memory).",
        "ratio",
    ),
    _spec("toposcope_gpu_memory_used_bytes", "gauge", ["gpu"], "Framebuffer memory used.", "bytes"),
    _spec(
        "toposcope_gpu_memory_total_bytes",
        "gauge",
        ["gpu"],
        "Framebuffer memory installed.",
        "bytes",
    ),
    _spec("toposcope_gpu_power_watts", "gauge", ["gpu"], "Power draw.", "watts"),
    _spec(
        "toposcope_gpu_power_limit_watts",
        "gauge",
        ["gpu"],
        "Enforced power limit.",
        "watts",
    ),
    _spec(
        "toposcope_gpu_energy_joules_total",
        "counter",
        ["gpu"],
        "Energy consumed since the driver was loaded.",
        "joules",
    ),
    _spec(
        "toposcope_gpu_temperature_celsius",
        "gauge",
        ["gpu"],
        "GPU core temperature.",
        "celsius",
    ),
    _spec(
        "toposcope_gpu_clock_hertz",
        "gauge",
        ["gpu", "clock"],
        "Current clock frequency (clock=sm or memory).",
        "hertz",
    ),
    _spec(
        "toposcope_gpu_clock_event_active",
        "gauge",
        ["gpu", "reason"],
        "1 while a clock event (throttle) reason is active, else 0.",
    ),
    _spec(
        "toposcope_gpu_pcie_bytes_per_second",
        "gauge",
        ["gpu", "direction"],
        "PCIe throughput sampled in the background (direction=tx or rx).",
        "bytes",
    ),
    _spec(
        "toposcope_gpu_pcie_sample_age_seconds",
        "gauge",
        ["gpu"],
        "Age of the background PCIe throughput sample.",
        "seconds",
    ),
    _spec(
        "toposcope_gpu_xid_errors_total",
        "counter",
        ["gpu", "xid"],
        "XID errors seen through NVML events since the exporter started.",
    ),
    _spec(
        "toposcope_gpu_ecc_errors_total",
        "counter",
        ["gpu", "error_type", "counter"],
        "ECC errors (error_type=corrected/uncorrected, counter=volatile/aggregate).",
    ),
    _spec(
        "toposcope_gpu_nvlink_up",
        "gauge",
        ["gpu", "link"],
        "1 when an NVLink is active, 0 when inactive.",
    ),
    _spec(
        "toposcope_gpu_link_info",
        "info",
        ["gpu", "peer_gpu", "link"],
        "Connection between two GPUs as nvidia-smi topo -m reports it "
        "(NV#, PIX, PXB, PHB, NODE, SYS), value 1.",
    ),
    _spec(
        "toposcope_gpu_locality_mismatch_total",
        "counter",
        ["gpu"],
        "Times NVML's CPU/NUMA affinity for a GPU disagreed with sysfs (sysfs wins).",
    ),
    # workloads
    _spec(
        "toposcope_workload_info",
        "info",
        ["workload", "pid", "comm", "cgroup", "pod", "namespace", "container"],
        "A tracked workload (cgroup or process tree), value 1.",
    ),
    _spec(
        "toposcope_workload_gpu_memory_used_bytes",
        "gauge",
        ["workload", "gpu"],
        "GPU memory used by a workload's processes, summed.",
        "bytes",
    ),
    _spec(
        "toposcope_workload_gpu_info",
        "info",
        ["workload", "gpu"],
        "A GPU a workload holds open (/dev/nvidiaN descriptors or NVML), value 1.",
    ),
    _spec(
        "toposcope_workload_cpu_seconds_total",
        "counter",
        ["workload", "numa_node"],
        "CPU time of a workload's threads attributed to the NUMA node of the CPU each "
        "thread last ran on.",
        "seconds",
    ),
    _spec(
        "toposcope_workload_threads",
        "gauge",
        ["workload", "numa_node"],
        "Threads of a workload by the NUMA node of the CPU each last ran on.",
    ),
    _spec(
        "toposcope_workload_memory_bytes",
        "gauge",
        ["workload", "numa_node"],
        "Memory of a workload resident on each NUMA node (cgroup memory.numa_stat or numa_maps).",
        "bytes",
    ),
    _spec(
        "toposcope_workload_locality_ratio",
        "gauge",
        ["workload", "resource"],
        "Share of a workload's CPU time (resource=cpu) or memory (resource=memory) on the NUMA "
        "node(s) of its GPUs, or of its dominant node without GPUs (1 = all local).",
        "ratio",
    ),
    _spec(
        "toposcope_workloads_dropped_total",
        "counter",
        [],
        "Workloads not exported because the configured maximum was reached.",
    ),
    # advisor
    _spec(
        "toposcope_advisor_recommendations",
        "gauge",
        ["kind", "severity"],
        "Open recommendations.",
        part="advisor",
    ),
    _spec(
        "toposcope_advisor_estimated_gain_ratio",
        "gauge",
        ["recommendation", "kind", "workload"],
        "Expected speed-up of a workload if a recommendation is applied.",
        "ratio",
        part="advisor",
    ),
    _spec(
        "toposcope_advisor_recommendation_age_seconds",
        "gauge",
        ["recommendation", "kind", "workload"],
        "Time since the advisor first made a recommendation that is still open.",
        "seconds",
        part="advisor",
    ),
    _spec(
        "toposcope_advisor_actions_total",
        "counter",
        ["kind", "result"],
        "Actions the advisor's applier carried out, by recommendation kind and result: "
        "applied, failed (could not be applied), reverted (undone), harmful (applied, then "
        "measured to slow the workload down).",
        part="advisor",
    ),
    _spec(
        "toposcope_advisor_verifications",
        "gauge",
        ["verdict"],
        "Recommendations the advisor service applied, by the verdict of their verification: "
        "pending, effective, ineffective, harmful (reverted), unverifiable, reverted.",
        part="advisor",
    ),
    _spec(
        "toposcope_advisor_analyses_total",
        "counter",
        ["result"],
        "Analyses the advisor service ran, by result (success, failure).",
        part="advisor",
    ),
    _spec(
        "toposcope_advisor_analysis_duration_seconds",
        "gauge",
        [],
        "How long the advisor service's latest analysis took (queries and policies).",
        "seconds",
        part="advisor",
    ),
    _spec(
        "toposcope_advisor_last_success_timestamp_seconds",
        "gauge",
        [],
        "Unix time at which the advisor service's latest successful analysis finished.",
        "seconds",
        part="advisor",
    ),
    # simulator ground truth (served at /truth/metrics by toposcope sim, never by a node)
    _spec(
        "toposcope_sim_time_seconds",
        "gauge",
        [],
        "Simulated time since the scenario started.",
        "seconds",
        part="sim",
    ),
    _spec(
        "toposcope_sim_node_info",
        "info",
        ["node", "template"],
        "A simulated node and the hardware template it was built from, value 1.",
        part="sim",
    ),
    _spec(
        "toposcope_sim_workload_info",
        "info",
        ["workload", "node", "kind", "state", "link_class"],
        "A simulated workload: its kind, state (pending, running), node and the worst link "
        "class among its GPUs (empty for fewer than two GPUs), value 1.",
        part="sim",
    ),
    _spec(
        "toposcope_sim_workload_throughput",
        "gauge",
        ["workload", "node"],
        "True throughput of a workload from the performance model, in its own unit per second "
        "(samples for training, requests for inference); 0 while pending or migrating.",
        part="sim",
    ),
    _spec(
        "toposcope_sim_workload_best_throughput",
        "gauge",
        ["workload", "node"],
        "Best throughput the workload could have: alone on the best allocation of its node's "
        "hardware (of any node's while pending).",
        part="sim",
    ),
    _spec(
        "toposcope_sim_workload_efficiency_ratio",
        "gauge",
        ["workload", "node"],
        "True throughput over best throughput (1 = as fast as it can be).",
        "ratio",
        part="sim",
    ),
    _spec(
        "toposcope_sim_workload_slowdown_ratio",
        "gauge",
        ["workload", "node", "factor"],
        "Slowdown of a running workload by model factor (numa, contention, link, "
        "interference, input) and in total (factor=total), 1 = no slowdown.",
        "ratio",
        part="sim",
    ),
    _spec(
        "toposcope_sim_workload_progress_ratio",
        "gauge",
        ["workload"],
        "Share of a workload's work done, for workloads with a duration.",
        "ratio",
        part="sim",
    ),
    _spec(
        "toposcope_sim_workloads",
        "gauge",
        ["state"],
        "Simulated workloads by state (pending, running, done).",
        part="sim",
    ),
    _spec(
        "toposcope_sim_cluster_efficiency_ratio",
        "gauge",
        [],
        "Sum of running workloads' true throughput over the sum of their best throughput.",
        "ratio",
        part="sim",
    ),
    _spec(
        "toposcope_sim_actions_total",
        "counter",
        ["kind", "result"],
        "Resource-manager actions the simulator carried out, by kind and result.",
        part="sim",
    ),
)

CATALOGUE: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}


def spec(name: str) -> MetricSpec:
    """Return the catalogue row for ``name``; ``KeyError`` names unknown metrics."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in the toposcope catalogue") from None


def families(names: Iterable[str]) -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    """Fresh families for several catalogue names, keyed by name."""
    return {name: spec(name).family() for name in names}


def known_series_names() -> set[str]:
    """Every sample name a toposcope family can produce on the wire.

    Counters appear as ``name`` (which already ends in ``_total``); used by tests that check
    metric names in rules and dashboards.
    """
    return {spec.name for spec in _SPECS}


def nonempty(families_: Iterable[Metric]) -> list[Metric]:
    """Drop families without samples so that a scrape never carries empty HELP/TYPE blocks."""
    return [f for f in families_ if f.samples]
