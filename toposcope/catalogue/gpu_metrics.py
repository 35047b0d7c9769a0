"""The exporter's GPU metric families (NVML), with the join keys dcgm-exporter puts on its
series, in the order ``docs/metrics.md`` lists them.
"""

from __future__ import annotations

from toposcope.catalogue.model import MetricSpec, row

#: The labels every GPU series carries, with dcgm-exporter's names and value formats (gpu is
#: the NVML index, device ``nvidia<gpu>``, pci_bus_id NVML's ``00000000:07:00.0``, Hostname
#: the node name), so that PromQL joins them to ``DCGM_FI_*`` series on any of them.
GPU_KEYS: tuple[str, ...] = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")

#: Throughput and activity of a GPU, each from the best source it supports (``source``:
#: ``gpm``, ``field_values`` or ``pcie_throughput``; see :mod:`toposcope.host.nvml.activity`).
ACTIVITY_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_gpu_activity_source_info",
        "info",
        [*GPU_KEYS, "quantity", "source"],
        "Which source gives each throughput or activity quantity of a GPU (quantity=pcie_bytes, "
        "nvlink_bytes, sm_active, sm_occupancy, tensor_active, dram_active; source=gpm, "
        "field_values, pcie_throughput, or none when the GPU supports no source: then the "
        "quantity has no series), value 1.",
    ),
    row(
        "toposcope_gpu_pcie_bytes_total",
        "counter",
        [*GPU_KEYS, "direction", "source"],
        "Bytes moved over PCIe (direction=tx from the GPU, rx to it): the driver's counter "
        "(field_values), or rates integrated by the exporter since it started (gpm, "
        "pcie_throughput: an estimate from 20 ms samples).",
        "bytes",
    ),
    row(
        "toposcope_gpu_nvlink_bytes_total",
        "counter",
        [*GPU_KEYS, "link", "direction", "source"],
        "Bytes moved over an NVLink (direction=tx or rx; link empty where the source gives the "
        "total over all links only): the driver's data counter (field_values) or GPM rates "
        "integrated by the exporter since it started (gpm).",
        "bytes",
    ),
    row(
        "toposcope_gpu_sm_active_ratio",
        "gauge",
        [*GPU_KEYS, "source"],
        "Share of SMs busy over the last scrape interval (GPM SM_UTIL; dcgm-exporter's "
        "DCGM_FI_PROF_SM_ACTIVE).",
        "ratio",
    ),
    row(
        "toposcope_gpu_sm_occupancy_ratio",
        "gauge",
        [*GPU_KEYS, "source"],
        "Resident warps over the SMs' maximum over the last scrape interval (GPM SM_OCCUPANCY; "
        "DCGM_FI_PROF_SM_OCCUPANCY).",
        "ratio",
    ),
    row(
        "toposcope_gpu_tensor_active_ratio",
        "gauge",
        [*GPU_KEYS, "source"],
        "Share of time the SMs ran any tensor (matrix) instruction over the last scrape "
        "interval (GPM ANY_TENSOR_UTIL; DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).",
        "ratio",
    ),
    row(
        "toposcope_gpu_dram_active_ratio",
        "gauge",
        [*GPU_KEYS, "source"],
        "Device memory bandwidth used over its peak over the last scrape interval (GPM "
        "DRAM_BW_UTIL; DCGM_FI_PROF_DRAM_ACTIVE).",
        "ratio",
    ),
)

#: GPUs as NVML reports them
GPU_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_gpu_info",
        "info",
        [
            *GPU_KEYS,
            "numa_node",
            "cpu_affinity",
            "driver_version",
            "mig_mode",
            "GPU_I_ID",
            "GPU_I_PROFILE",
        ],
        "Identity and locality of a GPU or MIG instance, value 1 (dcgm-exporter label names).",
    ),
    row("toposcope_gpu_up", "gauge", GPU_KEYS, "1 when the GPU answers NVML, 0 when lost."),
    row(
        "toposcope_gpu_utilization_ratio",
        "gauge",
        GPU_KEYS,
        "Share of the last sample period a kernel ran on the GPU (NVML utilization.gpu / 100).",
        "ratio",
    ),
    row(
        "toposcope_gpu_memory_utilization_ratio",
        "gauge",
        GPU_KEYS,
        "Share of the last sample period the memory controller was busy (utilization.memory).",
        "ratio",
    ),
    row("toposcope_gpu_memory_used_bytes", "gauge", GPU_KEYS, "Framebuffer memory used.", "bytes"),
    row(
        "toposcope_gpu_memory_total_bytes",
        "gauge",
        GPU_KEYS,
        "Framebuffer memory installed.",
        "bytes",
    ),
    row("toposcope_gpu_power_watts", "gauge", GPU_KEYS, "Power draw.", "watts"),
    row(
        "toposcope_gpu_power_limit_watts",
        "gauge",
        GPU_KEYS,
        "Enforced power limit.",
        "watts",
    ),
    row(
        "toposcope_gpu_energy_joules_total",
        "counter",
        GPU_KEYS,
        "Energy consumed since the driver was loaded.",
        "joules",
    ),
    row(
        "toposcope_gpu_temperature_celsius",
        "gauge",
        GPU_KEYS,
        "GPU core temperature.",
        "celsius",
    ),
    row(
        "toposcope_gpu_clock_hertz",
        "gauge",
        [*GPU_KEYS, "clock"],
        "Current clock frequency (clock=sm or memory).",
        "hertz",
    ),
    row(
        "toposcope_gpu_clock_event_active",
        "gauge",
        [*GPU_KEYS, "reason"],
        "1 while a clock event (throttle) reason is active, else 0.",
    ),
    row(
        "toposcope_gpu_pcie_bytes_per_second",
        "gauge",
        [*GPU_KEYS, "direction"],
        "PCIe throughput sampled in the background (direction=tx or rx).",
        "bytes",
    ),
    row(
        "toposcope_gpu_pcie_sample_age_seconds",
        "gauge",
        GPU_KEYS,
        "Age of the background PCIe throughput sample.",
        "seconds",
    ),
    row(
        "toposcope_gpu_xid_errors_total",
        "counter",
        [*GPU_KEYS, "xid"],
        "XID errors seen through NVML events since the exporter started.",
    ),
    row(
        "toposcope_gpu_ecc_errors_total",
        "counter",
        [*GPU_KEYS, "error_type", "counter"],
        "ECC errors (error_type=corrected: single-bit, uncorrected: double-bit; "
        "counter=volatile since the last driver load, aggregate over the GPU's life).",
    ),
    row(
        "toposcope_gpu_remapped_rows_total",
        "counter",
        [*GPU_KEYS, "error_type"],
        "Memory rows remapped over the GPU's life after correctable or uncorrectable ECC errors "
        "(error_type=correctable/uncorrectable); absent on GPUs without row remapping.",
    ),
    row(
        "toposcope_gpu_row_remap_pending",
        "gauge",
        GPU_KEYS,
        "1 while a row remap waits for the next GPU reset to take effect, else 0.",
    ),
    row(
        "toposcope_gpu_row_remap_failed",
        "gauge",
        GPU_KEYS,
        "1 when a row remap failed (no spare rows left: the GPU needs service), else 0.",
    ),
    row(
        "toposcope_gpu_retired_pages",
        "gauge",
        [*GPU_KEYS, "cause"],
        "Framebuffer pages retired (cause=single_bit: repeated single-bit, double_bit: a "
        "double-bit ECC error); absent on GPUs that remap rows instead (Ampere and later).",
    ),
    row(
        "toposcope_gpu_retired_pages_pending",
        "gauge",
        GPU_KEYS,
        "1 while a page retirement waits for the next GPU reset to take effect, else 0.",
    ),
    row(
        "toposcope_gpu_nvlink_errors_total",
        "counter",
        [*GPU_KEYS, "link", "error_type"],
        "NVLink data-link errors per link since the driver loaded "
        "(error_type=replay, recovery, crc_flit, crc_data).",
    ),
    row(
        "toposcope_gpu_pcie_replays_total",
        "counter",
        GPU_KEYS,
        "PCIe packets the GPU had to replay since the driver loaded (link errors).",
    ),
    row(
        "toposcope_gpu_nvlink_up",
        "gauge",
        [*GPU_KEYS, "link"],
        "1 when an NVLink is active, 0 when inactive.",
    ),
    row(
        "toposcope_gpu_link_info",
        "info",
        [*GPU_KEYS, "peer_gpu", "link"],
        "Connection between two GPUs as nvidia-smi topo -m reports it "
        "(NV#, PIX, PXB, PHB, NODE, SYS), value 1.",
    ),
    row(
        "toposcope_gpu_locality_mismatch_total",
        "counter",
        GPU_KEYS,
        "Times NVML's CPU/NUMA affinity for a GPU disagreed with sysfs (sysfs wins).",
    ),
    *ACTIVITY_SPECS,
)
