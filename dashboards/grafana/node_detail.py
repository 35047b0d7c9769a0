"""Node detail: one host's NUMA topology and memory, CPU time per NUMA node, cross-socket
traffic, and its GPUs with their locality.

The GPU utilization, memory, power and temperature panels also work with dcgm-exporter:
each reads toposcope's series and falls back to dcgm-exporter's (``DCGM_FI_DEV_*``, matched
on its ``Hostname`` label) for GPUs toposcope does not report, per GPU index. They aggregate
``by (gpu)`` so that both sources end up with the same labels and ``or`` can prefer
toposcope's series.
"""

from __future__ import annotations

from typing import Any

from toposcope.dashboards.grafana.common import (
    DCGM_HOST,
    INSTANCE,
    RATE,
    dashboard,
    gpu_variable,
    host_variables,
    instant_table,
    matrix,
    organize,
    query,
    row,
    table_panel,
    timeseries_panel,
    to_json,
)

UID = "toposcope-node-detail"
TITLE = "toposcope / Node detail"

#: Selects the chosen host's GPUs among toposcope series.
GPUS = f'{INSTANCE}, gpu=~"$gpu"'
#: Selects the chosen host's GPUs among dcgm-exporter series.
DCGM_GPUS = f'{DCGM_HOST}, gpu=~"$gpu"'


def gpu_with_dcgm(toposcope_metric: str, dcgm_metric: str, dcgm_scale: str = "") -> str:
    """Per-GPU ``toposcope_metric``, or ``dcgm_metric`` (times ``dcgm_scale``) where missing."""
    dcgm = f"max by (gpu) ({dcgm_metric}{{{DCGM_GPUS}}})"
    if dcgm_scale:
        dcgm = f"{dcgm} {dcgm_scale}"
    return f"max by (gpu) ({toposcope_metric}{{{GPUS}}}) or {dcgm}"


def build() -> dict[str, Any]:
    """The node detail dashboard's JSON model."""
    builder = dashboard(
        UID,
        TITLE,
        "One host in depth: NUMA nodes, distances and memory, CPU time per NUMA node, "
        "cross-socket traffic, and each GPU's use, health and locality.",
    )
    for variable in [*host_variables(multi=False), gpu_variable()]:
        builder = builder.with_variable(variable)

    builder = (
        builder.with_row(row("NUMA topology"))
        .with_panel(
            table_panel(
                "NUMA nodes",
                "Each NUMA node's package (socket), CPUs and memory. Memory-only nodes have "
                "no CPUs.",
                [
                    instant_table(
                        f"toposcope_numa_memory_total_bytes{{{INSTANCE}}}"
                        " * on (job, instance, numa_node) group_left (package, cpus)"
                        " toposcope_numa_node_info"
                    )
                ],
                transformations=[
                    organize(
                        hide=("Time", "job", "instance"),
                        order=("numa_node", "package", "cpus", "Value"),
                        rename={"Value": "memory"},
                    )
                ],
                unit="bytes",
            )
        )
        .with_panel(
            table_panel(
                "NUMA distances",
                "SLIT distance from each NUMA node (row) to each other (column); "
                "10 is local, larger is farther.",
                [instant_table(f"toposcope_numa_distance{{{INSTANCE}}}")],
                transformations=[matrix("numa_node", "peer_node", "Value")],
            )
        )
    )

    builder = (
        builder.with_row(row("NUMA memory and CPU"))
        .with_panel(
            timeseries_panel(
                "Memory used and free per NUMA node",
                "Used and free memory of each NUMA node (node*/meminfo).",
                [
                    query(
                        f"toposcope_numa_memory_used_bytes{{{INSTANCE}}}", "node {{numa_node}} used"
                    ),
                    query(
                        f"toposcope_numa_memory_free_bytes{{{INSTANCE}}}", "node {{numa_node}} free"
                    ),
                ],
                "bytes",
                min_value=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "Free memory share per NUMA node",
                "Share of each NUMA node's memory that is free "
                "(numa_node:toposcope_numa_memory_free:ratio); one node near 0 while others "
                "have room sends allocations across the socket link.",
                [
                    query(
                        f"numa_node:toposcope_numa_memory_free:ratio{{{INSTANCE}}}",
                        "node {{numa_node}}",
                    )
                ],
                "percentunit",
                min_value=0,
                max_value=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "Memory by page type per NUMA node",
                "File, anonymous, shared, slab and huge-page memory of each NUMA node.",
                [
                    query(
                        f"toposcope_numa_memory_pages_bytes{{{INSTANCE}}}",
                        "node {{numa_node}} {{type}}",
                    )
                ],
                "bytes",
                stacked=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "CPU per NUMA node and mode",
                "CPUs busy on each NUMA node by mode (CPU seconds per second from /proc/stat; "
                "idle left out).",
                [
                    query(
                        "rate(toposcope_numa_cpu_seconds_total"
                        f'{{{INSTANCE}, mode!="idle"}}[{RATE}])',
                        "node {{numa_node}} {{mode}}",
                    )
                ],
                "short",
                stacked=True,
            )
        )
        .with_panel(
            timeseries_panel(
                "NUMA allocations per node and result",
                "Page allocations per second by numastat result (hit, miss, foreign, local, "
                "other, interleave_hit).",
                [
                    query(
                        f"rate(toposcope_numa_allocations_total{{{INSTANCE}}}[{RATE}])",
                        "node {{numa_node}} {{result}}",
                    )
                ],
                "short",
            )
        )
        .with_panel(
            timeseries_panel(
                "Cross-socket traffic per package pair",
                "Bytes per second from each package to each other over the inter-socket link "
                '(package:toposcope_cross_socket_bytes:rate5m). source="estimate" is the '
                "numastat-based model, not a measurement.",
                [
                    query(
                        f"package:toposcope_cross_socket_bytes:rate5m{{{INSTANCE}}}",
                        "{{package}} → {{peer_package}} ({{source}})",
                    )
                ],
                "Bps",
                min_value=0,
            )
        )
    )

    builder = (
        builder.with_row(row("GPUs"))
        .with_panel(
            table_panel(
                "GPU locality",
                "Each GPU's identity and locality from NVML: the NUMA node and CPUs closest to "
                "it (numa_node, cpu_affinity) and that node's package. Pin a GPU's data "
                "loaders and host buffers to these CPUs and this node.",
                [
                    instant_table(
                        f"toposcope_gpu_info{{{GPUS}}}"
                        " * on (job, instance, numa_node) group_left (package)"
                        " toposcope_numa_node_info"
                        f" or on (job, instance, gpu) toposcope_gpu_info{{{GPUS}}}"
                    )
                ],
                transformations=[
                    organize(
                        hide=("Time", "__name__", "job", "instance", "Value"),
                        order=(
                            "gpu",
                            "modelName",
                            "numa_node",
                            "package",
                            "cpu_affinity",
                            "pci_bus_id",
                            "UUID",
                            "mig_mode",
                            "GPU_I_ID",
                            "GPU_I_PROFILE",
                            "driver_version",
                        ),
                    )
                ],
                width=24,
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU utilization",
                "Share of time a kernel ran on each GPU (NVML utilization.gpu). Falls back to "
                "dcgm-exporter's DCGM_FI_DEV_GPU_UTIL / 100.",
                [
                    query(
                        gpu_with_dcgm(
                            "toposcope_gpu_utilization_ratio", "DCGM_FI_DEV_GPU_UTIL", "/ 100"
                        ),
                        "GPU {{gpu}}",
                    )
                ],
                "percentunit",
                min_value=0,
                max_value=1,
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU memory used",
                "Framebuffer memory in use on each GPU. Falls back to dcgm-exporter's "
                "DCGM_FI_DEV_FB_USED (MiB).",
                [
                    query(
                        gpu_with_dcgm(
                            "toposcope_gpu_memory_used_bytes", "DCGM_FI_DEV_FB_USED", "* 1048576"
                        ),
                        "GPU {{gpu}}",
                    )
                ],
                "bytes",
                min_value=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU power",
                "Power draw of each GPU (falls back to dcgm-exporter's DCGM_FI_DEV_POWER_USAGE) "
                "and its enforced power limit (toposcope only).",
                [
                    query(
                        gpu_with_dcgm("toposcope_gpu_power_watts", "DCGM_FI_DEV_POWER_USAGE"),
                        "GPU {{gpu}}",
                    ),
                    query(
                        f"max by (gpu) (toposcope_gpu_power_limit_watts{{{GPUS}}})",
                        "GPU {{gpu}} limit",
                    ),
                ],
                "watt",
                min_value=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU temperature",
                "Core temperature of each GPU. Falls back to dcgm-exporter's DCGM_FI_DEV_GPU_TEMP.",
                [
                    query(
                        gpu_with_dcgm("toposcope_gpu_temperature_celsius", "DCGM_FI_DEV_GPU_TEMP"),
                        "GPU {{gpu}}",
                    )
                ],
                "celsius",
            )
        )
        .with_panel(
            timeseries_panel(
                "GPUs throttled by reason",
                "How many of the chosen GPUs have each clock event (throttle) reason active: "
                "sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, hw_power_brake, ...",
                [
                    query(
                        f"sum by (reason) (toposcope_gpu_clock_event_active{{{GPUS}}})",
                        "{{reason}}",
                    )
                ],
                "none",
                min_value=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU clocks",
                "SM and memory clock of each GPU; SM clocks below their usual value while "
                "busy mean throttling.",
                [query(f"toposcope_gpu_clock_hertz{{{GPUS}}}", "GPU {{gpu}} {{clock}}")],
                "hertz",
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU PCIe throughput",
                "PCIe bytes per second to (rx) and from (tx) each GPU, sampled in the "
                "background by the exporter.",
                [
                    query(
                        f"toposcope_gpu_pcie_bytes_per_second{{{GPUS}}}",
                        "GPU {{gpu}} {{direction}}",
                    )
                ],
                "Bps",
                min_value=0,
            )
        )
        .with_panel(
            timeseries_panel(
                "GPU XID errors (10 minutes)",
                "XID errors per GPU and code in the last 10 minutes "
                "(gpu_xid:toposcope_gpu_xid_errors:increase10m); ToposcopeGpuXidFatal and "
                "ToposcopeGpuXidErrors explain the codes.",
                [
                    query(
                        f"gpu_xid:toposcope_gpu_xid_errors:increase10m{{{GPUS}}}",
                        "GPU {{gpu}} XID {{xid}}",
                    )
                ],
                "none",
                min_value=0,
            )
        )
        .with_panel(
            table_panel(
                "GPU interconnect",
                "How each pair of GPUs is connected, as nvidia-smi topo -m shows it: NV# "
                "(NVLink), PIX/PXB (PCIe switches), PHB (host bridge), NODE (within a NUMA "
                "node), SYS (across sockets).",
                [instant_table(f"toposcope_gpu_link_info{{{INSTANCE}}}")],
                transformations=[matrix("gpu", "peer_gpu", "link")],
            )
        )
    )
    return to_json(builder)
