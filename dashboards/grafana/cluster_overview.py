"""Cluster overview: every node's GPUs busy and idle, locality, cross-socket traffic, NUMA
memory balance and collector health, side by side.

Per-node panels read the recording rules of ``alerts/*.rules.yml`` (one series per scrape
target) and name hosts through :func:`~toposcope.dashboards.grafana.common.by_host`.
"""

from __future__ import annotations

from typing import Any

from toposcope.dashboards.grafana.common import (
    INSTANCE,
    by_host,
    dashboard,
    host_variables,
    instant_table,
    merge,
    organize,
    query,
    row,
    stat_panel,
    table_panel,
    timeseries_panel,
    to_json,
)

UID = "toposcope-cluster-overview"
TITLE = "toposcope / Cluster overview"


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
    for variable in host_variables(multi=True):
        builder = builder.with_variable(variable)

    builder = (
        builder.with_row(row("Fleet"))
        .with_panel(
            stat_panel(
                "Exporters reporting",
                "toposcope exporters scraped on the chosen hosts.",
                query(f"count(toposcope_exporter_build_info{{{INSTANCE}}})"),
                "none",
            )
        )
        .with_panel(
            stat_panel(
                "GPUs healthy",
                "GPUs answering NVML (toposcope_gpu_up 1).",
                query(f"count(toposcope_gpu_up{{{INSTANCE}}} == 1) or vector(0)"),
                "none",
            )
        )
        .with_panel(
            stat_panel(
                "GPUs lost",
                "GPUs that stopped answering NVML (toposcope_gpu_up 0); "
                "ToposcopeGpuLost fires for each.",
                query(f"count(toposcope_gpu_up{{{INSTANCE}}} == 0) or vector(0)"),
                "none",
            )
        )
        .with_panel(
            stat_panel(
                "GPUs idle",
                "GPUs whose 5-minute mean utilization is under 5 % "
                "(the idle threshold of the recording rules).",
                query(
                    f"count(gpu:toposcope_gpu_utilization:avg_over_time5m{{{INSTANCE}}} < 0.05)"
                    " or vector(0)"
                ),
                "none",
            )
        )
        .with_panel(
            stat_panel(
                "GPU busy ratio",
                "Mean 5-minute utilization over all GPUs of the chosen hosts.",
                query(f"avg(instance:toposcope_gpu_utilization:avg5m{{{INSTANCE}}})"),
                "percentunit",
            )
        )
        .with_panel(
            stat_panel(
                "Collectors failing",
                "Collectors that failed or found no data on the last scrape, summed over "
                "hosts (a host without GPUs counts its gpu collector).",
                query(f"sum(instance:toposcope_scrape_collectors_failed:sum{{{INSTANCE}}})"),
                "none",
            )
        )
    )

    builder = (
        builder.with_row(row("GPUs busy and idle per node"))
        .with_panel(
            timeseries_panel(
                "GPU busy ratio per node",
                "Mean 5-minute utilization of each node's GPUs "
                "(instance:toposcope_gpu_utilization:avg5m).",
                [
                    query(
                        by_host(f"instance:toposcope_gpu_utilization:avg5m{{{INSTANCE}}}"),
                        "{{hostname}}",
                    )
                ],
                "percentunit",
                min_value=0,
                max_value=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "Idle GPU share per node",
                "Share of each node's GPUs under 5 % utilization over 5 minutes "
                "(instance:toposcope_gpus_idle:ratio).",
                [
                    query(
                        by_host(f"instance:toposcope_gpus_idle:ratio{{{INSTANCE}}}"), "{{hostname}}"
                    )
                ],
                "percentunit",
                min_value=0,
                max_value=1,
            )
        )
    )

    builder = (
        builder.with_row(row("Locality per node"))
        .with_panel(
            timeseries_panel(
                "Workload locality per node",
                "Share of the workloads' CPU time and memory on the NUMA node(s) of their GPUs "
                "(1 = all local): the mean and the worst workload of each node "
                "(workload:toposcope_workload_locality:min).",
                [
                    query(
                        by_host(
                            "avg without (workload) "
                            f"(workload:toposcope_workload_locality:min{{{INSTANCE}}})"
                        ),
                        "{{hostname}} mean",
                    ),
                    query(
                        by_host(
                            "min without (workload) "
                            f"(workload:toposcope_workload_locality:min{{{INSTANCE}}})"
                        ),
                        "{{hostname}} worst",
                    ),
                ],
                "percentunit",
                min_value=0,
                max_value=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "NUMA allocation misses per node",
                "Share of page allocations that missed their preferred NUMA node over 5 minutes "
                "(numastat numa_miss / (numa_hit + numa_miss); "
                "instance:toposcope_numa_allocations_miss:ratio_rate5m).",
                [
                    query(
                        by_host(
                            f"instance:toposcope_numa_allocations_miss:ratio_rate5m{{{INSTANCE}}}"
                        ),
                        "{{hostname}}",
                    )
                ],
                "percentunit",
                min_value=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Cross-socket traffic per node",
                "Bytes per second over the inter-socket links of each node, both directions "
                '(instance:toposcope_cross_socket_bytes:rate5m). source="estimate" is the '
                "numastat-based model, not a measurement.",
                [
                    query(
                        by_host(f"instance:toposcope_cross_socket_bytes:rate5m{{{INSTANCE}}}"),
                        "{{hostname}} ({{source}})",
                    )
                ],
                "Bps",
                width=24,
                min_value=0,
            )
        )
    )

    builder = (
        builder.with_row(row("NUMA memory per node"))
        .with_panel(
            timeseries_panel(
                "NUMA memory imbalance per node",
                "Free share of each node's emptiest NUMA node minus that of its fullest "
                "(0 = balanced; instance:toposcope_numa_memory_free_imbalance:ratio).",
                [
                    query(
                        by_host(
                            f"instance:toposcope_numa_memory_free_imbalance:ratio{{{INSTANCE}}}"
                        ),
                        "{{hostname}}",
                    )
                ],
                "percentunit",
                min_value=0,
                max_value=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "Free memory per node",
                "Share of each node's memory that is free (MemFree; page cache counts as used; "
                "instance:toposcope_numa_memory_free:ratio).",
                [
                    query(
                        by_host(f"instance:toposcope_numa_memory_free:ratio{{{INSTANCE}}}"),
                        "{{hostname}}",
                    )
                ],
                "percentunit",
                min_value=0,
                max_value=1,
            )
        )
    )

    builder = (
        builder.with_row(row("Collector health"))
        .with_panel(
            timeseries_panel(
                "Collectors failing per node",
                "Collectors that failed or found no data on each scrape "
                "(instance:toposcope_scrape_collectors_failed:sum). The table shows which.",
                [
                    query(
                        by_host(f"instance:toposcope_scrape_collectors_failed:sum{{{INSTANCE}}}"),
                        "{{hostname}}",
                    )
                ],
                "none",
                min_value=0,
            )
        )
        .with_panel(
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
            )
        )
    )
    return to_json(builder)
