"""Cluster overview: every node's GPUs busy and idle, locality, cross-socket traffic, NUMA
memory balance and collector health, side by side.

Per-node panels read the recording rules of ``alerts/*.rules.yml`` (one series per scrape
target) and name hosts through :func:`~toposcope.dashboards.grafana.common.by_host`.
"""

from __future__ import annotations

from typing import Any

from toposcope.dashboards.grafana.common import (
    INSTANCE,
    Target,
    by_host,
    dashboard,
    host_variables,
    instant_table,
    merge,
    organize,
    query,
    table_panel,
    timeseries_panel,
    to_json,
)
from toposcope.dashboards.grafana.panels import (
    PanelRow,
    ratio_panel,
    value_stat,
    with_rows,
    with_variables,
)

UID = "toposcope-cluster-overview"
TITLE = "toposcope / Cluster overview"


def _per_host(series: str, legend: str = "{{hostname}}") -> Target:
    """The chosen hosts' ``series`` (one per scrape target), named by host."""
    return query(by_host(f"{series}{{{INSTANCE}}}"), legend)


def _fleet_row() -> PanelRow:
    """Single numbers over the chosen hosts: exporters, GPUs by state, busy ratio, failures."""
    return PanelRow(
        "Fleet",
        (
            value_stat(
                "Exporters reporting",
                "toposcope exporters scraped on the chosen hosts.",
                f"count(toposcope_exporter_build_info{{{INSTANCE}}})",
            ),
            value_stat(
                "GPUs healthy",
                "GPUs answering NVML (toposcope_gpu_up 1).",
                f"count(toposcope_gpu_up{{{INSTANCE}}} == 1) or vector(0)",
            ),
            value_stat(
                "GPUs lost",
                "GPUs that stopped answering NVML (toposcope_gpu_up 0); "
                "ToposcopeGpuLost fires for each.",
                f"count(toposcope_gpu_up{{{INSTANCE}}} == 0) or vector(0)",
            ),
            value_stat(
                "GPUs idle",
                "GPUs whose 5-minute mean utilization is under 5 % "
                "(the idle threshold of the recording rules).",
                f"count(gpu:toposcope_gpu_utilization:avg_over_time5m{{{INSTANCE}}} < 0.05)"
                " or vector(0)",
            ),
            value_stat(
                "GPU busy ratio",
                "Mean 5-minute utilization over all GPUs of the chosen hosts.",
                f"avg(instance:toposcope_gpu_utilization:avg5m{{{INSTANCE}}})",
                "percentunit",
            ),
            value_stat(
                "Collectors failing",
                "Collectors that failed or found no data on the last scrape, summed over "
                "hosts (a host without GPUs counts its gpu collector).",
                f"sum(instance:toposcope_scrape_collectors_failed:sum{{{INSTANCE}}})",
            ),
        ),
    )


def _gpu_use_row() -> PanelRow:
    """Each node's GPU busy ratio and share of idle GPUs over time."""
    return PanelRow(
        "GPUs busy and idle per node",
        (
            ratio_panel(
                "GPU busy ratio per node",
                "Mean 5-minute utilization of each node's GPUs "
                "(instance:toposcope_gpu_utilization:avg5m).",
                [_per_host("instance:toposcope_gpu_utilization:avg5m")],
            ),
            ratio_panel(
                "Idle GPU share per node",
                "Share of each node's GPUs under 5 % utilization over 5 minutes "
                "(instance:toposcope_gpus_idle:ratio).",
                [_per_host("instance:toposcope_gpus_idle:ratio")],
            ),
        ),
    )


def _locality_row() -> PanelRow:
    """Each node's workload locality, NUMA allocation misses and cross-socket traffic."""
    worst = f"(workload:toposcope_workload_locality:min{{{INSTANCE}}})"
    return PanelRow(
        "Locality per node",
        (
            ratio_panel(
                "Workload locality per node",
                "Share of the workloads' CPU time and memory on the NUMA node(s) of their GPUs "
                "(1 = all local): the mean and the worst workload of each node "
                "(workload:toposcope_workload_locality:min).",
                [
                    query(by_host(f"avg without (workload) {worst}"), "{{hostname}} mean"),
                    query(by_host(f"min without (workload) {worst}"), "{{hostname}} worst"),
                ],
            ),
            timeseries_panel(
                "NUMA allocation misses per node",
                "Share of page allocations that missed their preferred NUMA node over 5 minutes "
                "(numastat numa_miss / (numa_hit + numa_miss); "
                "instance:toposcope_numa_allocations_miss:ratio_rate5m).",
                [_per_host("instance:toposcope_numa_allocations_miss:ratio_rate5m")],
                "percentunit",
                min_value=0,
            ),
            timeseries_panel(
                "Cross-socket traffic per node",
                "Bytes per second over the inter-socket links of each node, both directions "
                '(instance:toposcope_cross_socket_bytes:rate5m). source="estimate" is the '
                "numastat-based model, not a measurement.",
                [
                    _per_host(
                        "instance:toposcope_cross_socket_bytes:rate5m", "{{hostname}} ({{source}})"
                    )
                ],
                "Bps",
                width=24,
                min_value=0,
            ),
        ),
    )


def _numa_memory_row() -> PanelRow:
    """Each node's NUMA memory imbalance and free memory share."""
    return PanelRow(
        "NUMA memory per node",
        (
            ratio_panel(
                "NUMA memory imbalance per node",
                "Free share of each node's emptiest NUMA node minus that of its fullest "
                "(0 = balanced; instance:toposcope_numa_memory_free_imbalance:ratio).",
                [_per_host("instance:toposcope_numa_memory_free_imbalance:ratio")],
            ),
            ratio_panel(
                "Free memory per node",
                "Share of each node's memory that is free (MemFree; page cache counts as used; "
                "instance:toposcope_numa_memory_free:ratio).",
                [_per_host("instance:toposcope_numa_memory_free:ratio")],
            ),
        ),
    )


def _collector_health_row() -> PanelRow:
    """Failing collectors per node over time, and each collector's last result."""
    return PanelRow(
        "Collector health",
        (
            timeseries_panel(
                "Collectors failing per node",
                "Collectors that failed or found no data on each scrape "
                "(instance:toposcope_scrape_collectors_failed:sum). The table shows which.",
                [_per_host("instance:toposcope_scrape_collectors_failed:sum")],
                "none",
                min_value=0,
            ),
            table_panel(
                "Collector status",
                "Each collector's result on the last scrape (1 worked, 0 failed or found no "
                "data) and how long it took. The exporter log names the error.",
                [
                    instant_table(by_host(f"toposcope_scrape_collector_success{{{INSTANCE}}}")),
                    instant_table(
                        by_host(f"toposcope_scrape_collector_duration_seconds{{{INSTANCE}}}")
                    ),
                ],
                transformations=[
                    merge(),
                    organize(
                        order=("hostname", "instance", "collector", "Value #A", "Value #B"),
                        rename={"Value #A": "success", "Value #B": "duration (s)"},
                    ),
                ],
            ),
        ),
    )


def build() -> dict[str, Any]:
    """The cluster overview dashboard's JSON model."""
    builder = dashboard(
        UID,
        TITLE,
        "Every node's GPU use, CPU and memory locality, cross-socket traffic, NUMA memory "
        "balance and exporter health. Pick hosts with the Host variable; the node detail "
        "dashboard shows one host in depth.",
        time_from="now-6h",
    )
    builder = with_variables(builder, host_variables(multi=True))
    rows = [
        _fleet_row(),
        _gpu_use_row(),
        _locality_row(),
        _numa_memory_row(),
        _collector_health_row(),
    ]
    return to_json(with_rows(builder, rows))
