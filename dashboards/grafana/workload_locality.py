"""Workload locality: where each workload's CPU time and memory are, compared with the NUMA
node(s) of its GPUs, and the GPU memory and utilization it holds.
"""

from __future__ import annotations

from typing import Any

from toposcope.dashboards.grafana.common import (
    INSTANCE,
    RATE,
    Target,
    any_of_variable,
    by_host,
    dashboard,
    host_variables,
    instant_table,
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

UID = "toposcope-workload-locality"
TITLE = "toposcope / Workload locality"

#: Selects the chosen workloads of the chosen hosts.
WORKLOADS = f'{INSTANCE}, workload=~"$workload"'


def _per_workload(series: str, legend: str = "{{workload}} node {{numa_node}}") -> Target:
    """Toposcope's ``series`` of the chosen workloads, one line per label set."""
    return query(f"{series}{{{WORKLOADS}}}", legend)


def _locality_row() -> PanelRow:
    """Workloads by worst locality, and each workload's CPU and memory locality over time."""
    return PanelRow(
        "Locality",
        (
            table_panel(
                "Workloads by worst locality",
                "Each workload's lower locality ratio of CPU time and memory (1 = all on the "
                "NUMA node(s) of its GPUs, or its dominant node without GPUs), with its pod, "
                "container and main process. Sort by the locality column to find the worst.",
                [
                    instant_table(
                        by_host(
                            f"workload:toposcope_workload_locality:min{{{WORKLOADS}}}"
                            " * on (job, instance, workload)"
                            " group_left (pod, namespace, container, comm, pid)"
                            " toposcope_workload_info"
                        )
                    )
                ],
                transformations=[
                    organize(
                        hide=("Time", "job"),
                        order=(
                            "hostname",
                            "workload",
                            "Value",
                            "namespace",
                            "pod",
                            "container",
                            "comm",
                            "pid",
                            "instance",
                        ),
                        rename={"Value": "locality"},
                    )
                ],
                unit="percentunit",
                width=24,
            ),
            ratio_panel(
                "CPU locality per workload",
                "Share of each workload's CPU time on the NUMA node(s) of its GPUs "
                '(toposcope_workload_locality_ratio{resource="cpu"}; cumulative since the '
                "exporter first saw the workload, so it moves slowly).",
                [
                    query(
                        f'toposcope_workload_locality_ratio{{{WORKLOADS}, resource="cpu"}}',
                        "{{workload}}",
                    )
                ],
            ),
            ratio_panel(
                "Memory locality per workload",
                "Share of each workload's resident memory on the NUMA node(s) of its GPUs "
                '(toposcope_workload_locality_ratio{resource="memory"}).',
                [
                    query(
                        f'toposcope_workload_locality_ratio{{{WORKLOADS}, resource="memory"}}',
                        "{{workload}}",
                    )
                ],
            ),
        ),
    )


def _numa_use_row() -> PanelRow:
    """Each workload's memory, CPU time and threads per NUMA node, and workloads not exported."""
    return PanelRow(
        "CPU and memory per NUMA node",
        (
            timeseries_panel(
                "Memory per NUMA node",
                "Each workload's resident memory on each NUMA node "
                "(cgroup memory.numa_stat or numa_maps).",
                [_per_workload("toposcope_workload_memory_bytes")],
                "bytes",
                stacked=True,
            ),
            timeseries_panel(
                "CPU per NUMA node",
                "CPUs each workload keeps busy on each NUMA node (CPU seconds per second, "
                "attributed to the node of the CPU each thread last ran on).",
                [
                    query(
                        f"rate(toposcope_workload_cpu_seconds_total{{{WORKLOADS}}}[{RATE}])",
                        "{{workload}} node {{numa_node}}",
                    )
                ],
                "short",
                stacked=True,
            ),
            timeseries_panel(
                "Threads per NUMA node",
                "Each workload's threads by the NUMA node of the CPU each last ran on.",
                [_per_workload("toposcope_workload_threads")],
                "none",
                stacked=True,
            ),
            value_stat(
                "Workloads not exported",
                "Workloads the exporters skipped because --workloads.max was reached; raise "
                "it if this is not 0.",
                f"sum(toposcope_workloads_dropped_total{{{INSTANCE}}})",
                width=12,
                height=8,
            ),
        ),
    )


def _gpus_row() -> PanelRow:
    """GPU memory each workload holds, and the utilization of its GPUs."""
    return PanelRow(
        "GPUs per workload",
        (
            timeseries_panel(
                "GPU memory per workload",
                "GPU memory used by each workload's processes on each GPU (NVML per-process "
                "memory, summed).",
                [
                    _per_workload(
                        "toposcope_workload_gpu_memory_used_bytes", "{{workload}} GPU {{gpu}}"
                    )
                ],
                "bytes",
                stacked=True,
            ),
            ratio_panel(
                "Utilization of each workload's GPUs",
                "Mean 5-minute utilization of the GPUs each workload holds "
                "(workload:toposcope_gpu_utilization:avg5m); low values while a workload "
                "holds GPUs mean idle allocations.",
                [_per_workload("workload:toposcope_gpu_utilization:avg5m", "{{workload}}")],
            ),
        ),
    )


def build() -> dict[str, Any]:
    """The workload locality dashboard's JSON model."""
    builder = dashboard(
        UID,
        TITLE,
        "Per workload (cgroup or process tree): the share of its CPU time and memory on the "
        "NUMA node(s) of its GPUs, where its threads run and its memory lives, and the GPU "
        "memory and utilization it holds.",
    )
    workload = any_of_variable(
        "workload",
        "Workload",
        f"label_values(toposcope_workload_info{{{INSTANCE}}}, workload)",
        "Workloads the exporters track on the chosen hosts.",
    )
    builder = with_variables(builder, [*host_variables(multi=True), workload])
    return to_json(with_rows(builder, [_locality_row(), _numa_use_row(), _gpus_row()]))
