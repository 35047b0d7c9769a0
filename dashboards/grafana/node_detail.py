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
    Target,
    dashboard,
    gpu_variable,
    host_variables,
    instant_table,
    matrix,
    organize,
    query,
    table_panel,
    timeseries_panel,
    to_json,
)
from toposcope.dashboards.grafana.panels import (
    Panel,
    PanelRow,
    ratio_panel,
    with_rows,
    with_variables,
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


def _gpu_series(series: str, legend: str) -> Target:
    """Toposcope's ``series`` of the chosen GPUs, one line per label set."""
    return query(f"{series}{{{GPUS}}}", legend)


def _gpu_or_dcgm(toposcope_metric: str, dcgm_metric: str, dcgm_scale: str = "") -> Target:
    """Per chosen GPU: toposcope's series, else dcgm-exporter's (:func:`gpu_with_dcgm`)."""
    return query(gpu_with_dcgm(toposcope_metric, dcgm_metric, dcgm_scale), "GPU {{gpu}}")


def _host_series(series: str, legend: str = "node {{numa_node}}") -> Target:
    """Toposcope's ``series`` of the chosen host, one line per label set (NUMA node ...)."""
    return query(f"{series}{{{INSTANCE}}}", legend)


def _numa_topology_row() -> PanelRow:
    """The host's NUMA nodes (package, CPUs, memory) and their SLIT distances."""
    return PanelRow(
        "NUMA topology",
        (
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
            ),
            table_panel(
                "NUMA distances",
                "SLIT distance from each NUMA node (row) to each other (column); "
                "10 is local, larger is farther.",
                [instant_table(f"toposcope_numa_distance{{{INSTANCE}}}")],
                transformations=[matrix("numa_node", "peer_node", "Value")],
            ),
        ),
    )


def _numa_memory_and_cpu_row() -> PanelRow:
    """Memory, CPU time and allocations per NUMA node, and traffic between packages."""
    return PanelRow(
        "NUMA memory and CPU",
        (
            timeseries_panel(
                "Memory used and free per NUMA node",
                "Used and free memory of each NUMA node (node*/meminfo).",
                [
                    _host_series("toposcope_numa_memory_used_bytes", "node {{numa_node}} used"),
                    _host_series("toposcope_numa_memory_free_bytes", "node {{numa_node}} free"),
                ],
                "bytes",
                min_value=0,
            ),
            ratio_panel(
                "Free memory share per NUMA node",
                "Share of each NUMA node's memory that is free "
                "(numa_node:toposcope_numa_memory_free:ratio); one node near 0 while others "
                "have room sends allocations across the socket link.",
                [_host_series("numa_node:toposcope_numa_memory_free:ratio")],
            ),
            timeseries_panel(
                "Memory by page type per NUMA node",
                "File, anonymous, shared, slab and huge-page memory of each NUMA node.",
                [_host_series("toposcope_numa_memory_pages_bytes", "node {{numa_node}} {{type}}")],
                "bytes",
                stacked=True,
            ),
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
            ),
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
            ),
            timeseries_panel(
                "Cross-socket traffic per package pair",
                "Bytes per second from each package to each other over the inter-socket link "
                '(package:toposcope_cross_socket_bytes:rate5m). source="estimate" is the '
                "numastat-based model, not a measurement.",
                [
                    _host_series(
                        "package:toposcope_cross_socket_bytes:rate5m",
                        "{{package}} → {{peer_package}} ({{source}})",
                    )
                ],
                "Bps",
                min_value=0,
            ),
        ),
    )


def _gpu_locality_table() -> Panel:
    """Each GPU's identity and the NUMA node, package and CPUs closest to it."""
    return table_panel(
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


def _gpu_use_panels() -> tuple[Panel, ...]:
    """Utilization, memory, power and temperature per GPU, from toposcope or dcgm-exporter."""
    return (
        ratio_panel(
            "GPU utilization",
            "Share of time a kernel ran on each GPU (NVML utilization.gpu). Falls back to "
            "dcgm-exporter's DCGM_FI_DEV_GPU_UTIL / 100.",
            [_gpu_or_dcgm("toposcope_gpu_utilization_ratio", "DCGM_FI_DEV_GPU_UTIL", "/ 100")],
        ),
        timeseries_panel(
            "GPU memory used",
            "Framebuffer memory in use on each GPU. Falls back to dcgm-exporter's "
            "DCGM_FI_DEV_FB_USED (MiB).",
            [_gpu_or_dcgm("toposcope_gpu_memory_used_bytes", "DCGM_FI_DEV_FB_USED", "* 1048576")],
            "bytes",
            min_value=0,
        ),
        timeseries_panel(
            "GPU power",
            "Power draw of each GPU (falls back to dcgm-exporter's DCGM_FI_DEV_POWER_USAGE) "
            "and its enforced power limit (toposcope only).",
            [
                _gpu_or_dcgm("toposcope_gpu_power_watts", "DCGM_FI_DEV_POWER_USAGE"),
                query(
                    f"max by (gpu) (toposcope_gpu_power_limit_watts{{{GPUS}}})",
                    "GPU {{gpu}} limit",
                ),
            ],
            "watt",
            min_value=0,
        ),
        timeseries_panel(
            "GPU temperature",
            "Core temperature of each GPU. Falls back to dcgm-exporter's DCGM_FI_DEV_GPU_TEMP.",
            [_gpu_or_dcgm("toposcope_gpu_temperature_celsius", "DCGM_FI_DEV_GPU_TEMP")],
            "celsius",
        ),
    )


def _gpu_health_panels() -> tuple[Panel, ...]:
    """Throttling, clocks, PCIe throughput, XID errors and the GPU interconnect matrix."""
    return (
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
        ),
        timeseries_panel(
            "GPU clocks",
            "SM and memory clock of each GPU; SM clocks below their usual value while "
            "busy mean throttling.",
            [_gpu_series("toposcope_gpu_clock_hertz", "GPU {{gpu}} {{clock}}")],
            "hertz",
        ),
        timeseries_panel(
            "GPU PCIe throughput",
            "PCIe bytes per second to (rx) and from (tx) each GPU, sampled in the "
            "background by the exporter.",
            [_gpu_series("toposcope_gpu_pcie_bytes_per_second", "GPU {{gpu}} {{direction}}")],
            "Bps",
            min_value=0,
        ),
        timeseries_panel(
            "GPU XID errors (10 minutes)",
            "XID errors per GPU and code in the last 10 minutes "
            "(gpu_xid:toposcope_gpu_xid_errors:increase10m); ToposcopeGpuXidFatal and "
            "ToposcopeGpuXidErrors explain the codes.",
            [
                _gpu_series(
                    "gpu_xid:toposcope_gpu_xid_errors:increase10m", "GPU {{gpu}} XID {{xid}}"
                )
            ],
            "none",
            min_value=0,
        ),
        table_panel(
            "GPU interconnect",
            "How each pair of GPUs is connected, as nvidia-smi topo -m shows it: NV# "
            "(NVLink), PIX/PXB (PCIe switches), PHB (host bridge), NODE (within a NUMA "
            "node), SYS (across sockets).",
            [instant_table(f"toposcope_gpu_link_info{{{INSTANCE}}}")],
            transformations=[matrix("gpu", "peer_gpu", "link")],
        ),
    )


def _gpus_row() -> PanelRow:
    """The host's GPUs: locality first, then use, then health and interconnect."""
    return PanelRow("GPUs", (_gpu_locality_table(), *_gpu_use_panels(), *_gpu_health_panels()))


def build() -> dict[str, Any]:
    """The node detail dashboard's JSON model."""
    builder = dashboard(
        UID,
        TITLE,
        "One host in depth: NUMA nodes, distances and memory, CPU time per NUMA node, "
        "cross-socket traffic, and each GPU's use, health and locality.",
    )
    builder = with_variables(builder, [*host_variables(multi=False), gpu_variable()])
    rows = [_numa_topology_row(), _numa_memory_and_cpu_row(), _gpus_row()]
    return to_json(with_rows(builder, rows))
