"""The GPU throughput and activity families, per GPU and per workload.

One :class:`~toposcope.host.nvml.records.GpuActivity` per GPU (read by
:class:`~toposcope.host.nvml.activity.ActivityReader`) becomes PCIe and NVLink byte counters,
four activity ratios and one ``toposcope_gpu_activity_source_info`` row per decided quantity,
whose ``source`` is ``none`` where the GPU supports no source (the quantity then has no value
series, as dcgm-exporter leaves out a field a GPU does not support, while the info row says
why). The workloads collector attributes the same figures to each workload holding the GPU,
with ``shared="true"`` when several workloads hold it (never split between them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from toposcope.host.nvml.records import GpuActivity

#: The value family of each activity ratio, per GPU and per workload.
RATIO_FAMILIES: dict[str, tuple[str, str]] = {
    "sm_active": ("toposcope_gpu_sm_active_ratio", "toposcope_workload_gpu_sm_active_ratio"),
    "sm_occupancy": (
        "toposcope_gpu_sm_occupancy_ratio",
        "toposcope_workload_gpu_sm_occupancy_ratio",
    ),
    "tensor_active": (
        "toposcope_gpu_tensor_active_ratio",
        "toposcope_workload_gpu_tensor_active_ratio",
    ),
    "dram_active": ("toposcope_gpu_dram_active_ratio", "toposcope_workload_gpu_dram_active_ratio"),
}

#: The per-GPU families, in exposition order (after every family the collector had before).
GPU_ACTIVITY_FAMILIES: tuple[str, ...] = (
    "toposcope_gpu_activity_source_info",
    "toposcope_gpu_pcie_bytes_total",
    "toposcope_gpu_nvlink_bytes_total",
    *(gpu for gpu, _ in RATIO_FAMILIES.values()),
)

#: The per-workload families, in exposition order.
WORKLOAD_ACTIVITY_FAMILIES: tuple[str, ...] = (
    "toposcope_workload_gpu_pcie_bytes_total",
    "toposcope_workload_gpu_nvlink_bytes_total",
    *(workload for _, workload in RATIO_FAMILIES.values()),
)


class Sink(Protocol):
    """Where one family's samples go (a family writer or a client_python family)."""

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        """Add one sample."""
        ...


def add_gpu_activity(values: Mapping[str, Sink], keys: list[str], activity: GpuActivity) -> None:
    """Add one GPU's activity families; ``keys`` are its join keys (the catalogue's GPU_KEYS)."""
    for quantity, source in activity.sources:
        values["toposcope_gpu_activity_source_info"].add_metric([*keys, quantity, source], 1.0)
    pcie_source = activity.source("pcie_bytes") or ""
    for direction, total in activity.pcie_bytes:
        values["toposcope_gpu_pcie_bytes_total"].add_metric([*keys, direction, pcie_source], total)
    nvlink_source = activity.source("nvlink_bytes") or ""
    for link, direction, total in activity.nvlink_bytes:
        values["toposcope_gpu_nvlink_bytes_total"].add_metric(
            [*keys, "" if link is None else str(link), direction, nvlink_source], total
        )
    for quantity, ratio in activity.ratios:
        values[RATIO_FAMILIES[quantity][0]].add_metric(
            [*keys, activity.source(quantity) or ""], ratio
        )


def add_workload_activity(
    values: Mapping[str, Sink], who: list[str], activity: GpuActivity, shared: bool
) -> None:
    """Add one GPU's figures to a workload holding it; ``who`` are the workload's labels."""
    gpu = [*who, str(activity.index)]
    flag = "true" if shared else "false"
    pcie_source = activity.source("pcie_bytes") or ""
    for direction, total in activity.pcie_bytes:
        values["toposcope_workload_gpu_pcie_bytes_total"].add_metric(
            [*gpu, direction, pcie_source, flag], total
        )
    nvlink_source = activity.source("nvlink_bytes") or ""
    summed: dict[str, float] = {}
    for _, direction, total in activity.nvlink_bytes:
        summed[direction] = summed.get(direction, 0.0) + total
    for direction, total in summed.items():
        values["toposcope_workload_gpu_nvlink_bytes_total"].add_metric(
            [*gpu, direction, nvlink_source, flag], total
        )
    for quantity, ratio in activity.ratios:
        values[RATIO_FAMILIES[quantity][1]].add_metric(
            [*gpu, activity.source(quantity) or "", flag], ratio
        )
