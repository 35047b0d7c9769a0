"""The exporter's metric families: its own health, topology, NUMA memory and CPU, traffic
between sockets, GPUs (NVML) and workloads, in the order ``docs/metrics.md`` lists them.
"""

from __future__ import annotations

from toposcope.catalogue.model import MetricSpec, row

#: exporter self-observability, topology, NUMA memory and CPU, cross-socket traffic
HOST_SPECS: tuple[MetricSpec, ...] = (
    # exporter self-observability
    row(
        "toposcope_scrape_collector_success",
        "gauge",
        ["collector"],
        "Whether a collector succeeded on this scrape (1) or failed or found no data (0).",
    ),
    row(
        "toposcope_scrape_collector_duration_seconds",
        "gauge",
        ["collector"],
        "How long a collector took on this scrape.",
        "seconds",
    ),
    row(
        "toposcope_exporter_build_info",
        "info",
        ["version", "hostname"],
        "Exporter version and the hostname it reports for, value 1.",
    ),
    # topology
    row(
        "toposcope_numa_node_info",
        "info",
        ["numa_node", "package", "cpus"],
        "A NUMA node, its package (socket) and its cpulist, value 1. "
        "Memory-only nodes have an empty cpulist.",
    ),
    row(
        "toposcope_numa_distance",
        "gauge",
        ["numa_node", "peer_node"],
        "SLIT distance between two NUMA nodes (10 = local).",
    ),
    row(
        "toposcope_package_info",
        "info",
        ["package", "cpus"],
        "A processor package (socket) and its cpulist, value 1.",
    ),
    row(
        "toposcope_cpus_online",
        "gauge",
        ["numa_node"],
        "Number of online CPUs per NUMA node.",
    ),
    row(
        "toposcope_pci_device_info",
        "info",
        ["pci_bus_id", "vendor", "device", "class", "numa_node", "cpu_affinity"],
        "A PCI device and its locality (numa_node empty when unknown), value 1. "
        "Only GPUs, network and storage controllers and PCI bridges with such devices below.",
    ),
    row(
        "toposcope_gpu_locality_info",
        "info",
        ["gpu", "pci_bus_id", "numa_node", "cpu_affinity", "package"],
        "A GPU found on the PCI bus and its locality from sysfs, value 1 "
        "(independent of NVML; toposcope_gpu_info carries the NVML identity).",
    ),
    # NUMA memory
    row(
        "toposcope_numa_memory_total_bytes",
        "gauge",
        ["numa_node"],
        "Total memory of a NUMA node (node*/meminfo MemTotal).",
        "bytes",
    ),
    row(
        "toposcope_numa_memory_free_bytes",
        "gauge",
        ["numa_node"],
        "Free memory of a NUMA node (node*/meminfo MemFree).",
        "bytes",
    ),
    row(
        "toposcope_numa_memory_used_bytes",
        "gauge",
        ["numa_node"],
        "Used memory of a NUMA node (node*/meminfo MemUsed, or MemTotal - MemFree).",
        "bytes",
    ),
    row(
        "toposcope_numa_memory_pages_bytes",
        "gauge",
        ["numa_node", "type"],
        "Memory of a NUMA node by page type: file, anon, shmem, slab, hugepages "
        "(node*/meminfo FilePages, AnonPages, Shmem, Slab, HugePages_Total x size).",
        "bytes",
    ),
    row(
        "toposcope_numa_allocations_total",
        "counter",
        ["numa_node", "result"],
        "Page allocations by result from node*/numastat "
        "(hit, miss, foreign, local, other, interleave_hit), in pages.",
    ),
    # NUMA CPU
    row(
        "toposcope_numa_cpu_seconds_total",
        "counter",
        ["numa_node", "mode"],
        "CPU time of a NUMA node's CPUs by mode, summed from /proc/stat.",
        "seconds",
    ),
    # cross-socket
    row(
        "toposcope_numa_memory_bandwidth_bytes_total",
        "counter",
        ["numa_node", "locality", "source"],
        "Memory traffic served to a NUMA node's CPUs, local or remote, measured where the host "
        "has a source (resctrl MBM, uncore counters); source names it.",
        "bytes",
    ),
    row(
        "toposcope_cross_socket_bytes_total",
        "counter",
        ["package", "peer_package", "source"],
        "Traffic between two packages over the inter-socket link. source is the counter it was "
        "measured with (uncore, pcm) or 'estimate' for the documented numastat-based model.",
        "bytes",
    ),
    row(
        "toposcope_cross_socket_source_info",
        "info",
        ["source", "measured"],
        "Which cross-socket traffic source this host uses and whether it is a measurement "
        "(measured=true) or an estimate (measured=false), value 1.",
    ),
)

#: GPUs as NVML reports them
GPU_SPECS: tuple[MetricSpec, ...] = (
    row(
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
    row("toposcope_gpu_up", "gauge", ["gpu"], "1 when the GPU answers NVML, 0 when lost."),
    row(
        "toposcope_gpu_utilization_ratio",
        "gauge",
        ["gpu"],
        "Share of the last sample period a kernel ran on the GPU (NVML utilization.gpu / 100).",
        "ratio",
    ),
    row(
        "toposcope_gpu_memory_utilization_ratio",
        "gauge",
        ["gpu"],
        "Share of the last sample period the memory controller was busy (utilization.memory).",
        "ratio",
    ),
    row("toposcope_gpu_memory_used_bytes", "gauge", ["gpu"], "Framebuffer memory used.", "bytes"),
    row(
        "toposcope_gpu_memory_total_bytes",
        "gauge",
        ["gpu"],
        "Framebuffer memory installed.",
        "bytes",
    ),
    row("toposcope_gpu_power_watts", "gauge", ["gpu"], "Power draw.", "watts"),
    row(
        "toposcope_gpu_power_limit_watts",
        "gauge",
        ["gpu"],
        "Enforced power limit.",
        "watts",
    ),
    row(
        "toposcope_gpu_energy_joules_total",
        "counter",
        ["gpu"],
        "Energy consumed since the driver was loaded.",
        "joules",
    ),
    row(
        "toposcope_gpu_temperature_celsius",
        "gauge",
        ["gpu"],
        "GPU core temperature.",
        "celsius",
    ),
    row(
        "toposcope_gpu_clock_hertz",
        "gauge",
        ["gpu", "clock"],
        "Current clock frequency (clock=sm or memory).",
        "hertz",
    ),
    row(
        "toposcope_gpu_clock_event_active",
        "gauge",
        ["gpu", "reason"],
        "1 while a clock event (throttle) reason is active, else 0.",
    ),
    row(
        "toposcope_gpu_pcie_bytes_per_second",
        "gauge",
        ["gpu", "direction"],
        "PCIe throughput sampled in the background (direction=tx or rx).",
        "bytes",
    ),
    row(
        "toposcope_gpu_pcie_sample_age_seconds",
        "gauge",
        ["gpu"],
        "Age of the background PCIe throughput sample.",
        "seconds",
    ),
    row(
        "toposcope_gpu_xid_errors_total",
        "counter",
        ["gpu", "xid"],
        "XID errors seen through NVML events since the exporter started.",
    ),
    row(
        "toposcope_gpu_ecc_errors_total",
        "counter",
        ["gpu", "error_type", "counter"],
        "ECC errors (error_type=corrected/uncorrected, counter=volatile/aggregate).",
    ),
    row(
        "toposcope_gpu_nvlink_up",
        "gauge",
        ["gpu", "link"],
        "1 when an NVLink is active, 0 when inactive.",
    ),
    row(
        "toposcope_gpu_link_info",
        "info",
        ["gpu", "peer_gpu", "link"],
        "Connection between two GPUs as nvidia-smi topo -m reports it "
        "(NV#, PIX, PXB, PHB, NODE, SYS), value 1.",
    ),
    row(
        "toposcope_gpu_locality_mismatch_total",
        "counter",
        ["gpu"],
        "Times NVML's CPU/NUMA affinity for a GPU disagreed with sysfs (sysfs wins).",
    ),
)

#: per-workload placement
WORKLOAD_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_workload_info",
        "info",
        ["workload", "pid", "comm", "cgroup", "pod", "namespace", "container"],
        "A tracked workload (cgroup or process tree), value 1.",
    ),
    row(
        "toposcope_workload_gpu_memory_used_bytes",
        "gauge",
        ["workload", "gpu"],
        "GPU memory used by a workload's processes, summed.",
        "bytes",
    ),
    row(
        "toposcope_workload_gpu_info",
        "info",
        ["workload", "gpu"],
        "A GPU a workload holds open (/dev/nvidiaN descriptors or NVML), value 1.",
    ),
    row(
        "toposcope_workload_cpu_seconds_total",
        "counter",
        ["workload", "numa_node"],
        "CPU time of a workload's threads attributed to the NUMA node of the CPU each "
        "thread last ran on.",
        "seconds",
    ),
    row(
        "toposcope_workload_threads",
        "gauge",
        ["workload", "numa_node"],
        "Threads of a workload by the NUMA node of the CPU each last ran on.",
    ),
    row(
        "toposcope_workload_memory_bytes",
        "gauge",
        ["workload", "numa_node"],
        "Memory of a workload resident on each NUMA node (cgroup memory.numa_stat or numa_maps).",
        "bytes",
    ),
    row(
        "toposcope_workload_locality_ratio",
        "gauge",
        ["workload", "resource"],
        "Share of a workload's CPU time (resource=cpu) or memory (resource=memory) on the NUMA "
        "node(s) of its GPUs, or of its dominant node without GPUs (1 = all local).",
        "ratio",
    ),
    row(
        "toposcope_workloads_dropped_total",
        "counter",
        [],
        "Workloads not exported because the configured maximum was reached.",
    ),
)
