"""The exporter's metric families: its own health, topology, NUMA memory and CPU, traffic
between sockets and workloads, in the order ``docs/metrics.md`` lists them (the GPU families
are in :mod:`.gpu_metrics`).
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
    row(
        "toposcope_gpu_pcie_link_speed_transfers_per_second",
        "gauge",
        ["gpu", "pci_bus_id", "state"],
        "A GPU's PCIe link speed from sysfs (state=max: the most the device can do, "
        "max_link_speed; state=current: now, current_link_speed, lower while the GPU idles); "
        "absent where sysfs does not say. 16e9 is PCIe Gen4.",
    ),
    row(
        "toposcope_gpu_pcie_link_width_lanes",
        "gauge",
        ["gpu", "pci_bus_id", "state"],
        "A GPU's PCIe link width in lanes from sysfs (state=max: max_link_width; "
        "state=current: current_link_width, below max when the link trained down); absent "
        "where sysfs does not say.",
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
    # RDMA NIC ports (InfiniBand, RoCE), from /sys/class/infiniband
    row(
        "toposcope_nic_info",
        "info",
        ["device", "board_id", "firmware_version", "hca_type"],
        "An RDMA device (InfiniBand HCA or RoCE NIC) and its board, firmware and HCA type "
        "(empty when the driver does not say), value 1.",
    ),
    row(
        "toposcope_nic_port_info",
        "info",
        ["device", "port", "link_layer", "state", "phys_state"],
        "An RDMA port, its link layer (InfiniBand, Ethernet for RoCE) and the names of its "
        "logical and physical states (ACTIVE, DOWN; LinkUp, Disabled), value 1.",
    ),
    row(
        "toposcope_nic_port_state_id",
        "gauge",
        ["device", "port"],
        "Logical state of an RDMA port (1 down, 2 init, 3 armed, 4 active, 5 active defer).",
    ),
    row(
        "toposcope_nic_port_physical_state_id",
        "gauge",
        ["device", "port"],
        "Physical state of an RDMA port (1 sleep, 2 polling, 3 disabled, 4 port configuration "
        "training, 5 link up, 6 link error recovery, 7 phy test).",
    ),
    row(
        "toposcope_nic_port_rate_bytes_per_second",
        "gauge",
        ["device", "port"],
        "Signalling rate of an RDMA port (the rate file's Gb/s x 125,000,000).",
        "bytes",
    ),
    row(
        "toposcope_nic_port_bytes_total",
        "counter",
        ["device", "port", "direction"],
        "Bytes an RDMA port sent (tx) or received (rx): port_xmit_data / port_rcv_data x 4, "
        "from the 64-bit counters_ext where present.",
        "bytes",
    ),
    row(
        "toposcope_nic_port_packets_total",
        "counter",
        ["device", "port", "direction"],
        "Packets an RDMA port sent (tx) or received (rx), from the 64-bit counters_ext where "
        "present.",
    ),
    row(
        "toposcope_nic_port_errors_total",
        "counter",
        ["device", "port", "counter"],
        "Errors of an RDMA port by counter file: counters/ (symbol_error, port_rcv_errors, "
        "link_downed, port_xmit_discards, ...) and hw_counters/ (out_of_buffer, "
        "packet_seq_err, local_ack_timeout_err, ...).",
    ),
    row(
        "toposcope_nic_port_counter_saturated",
        "gauge",
        ["device", "port", "counter"],
        "1 when a fixed-width counter behind an RDMA port's figures stands at its maximum "
        "(a 32-bit port_xmit_data at 4294967295, a 16-bit symbol_error at 65535) and has "
        "stopped counting, else 0; rates computed from it are then wrong.",
    ),
)

#: who a workload is, on every workload series: dcgm-exporter's pod label names, filled in on
#: Kubernetes nodes (empty elsewhere)
_WHO = ("namespace", "pod", "container")

#: the Slurm job a workload belongs to: on every workload series, as the pod labels are
#: (functions of ``workload``, so they add no series)
_JOB = ("slurm_job_id", "slurm_user", "slurm_account", "slurm_partition")

#: who a workload is, on every per-workload value series
_WORKLOAD_WHO = (*_WHO, *_JOB)
#: the same, for the catalogue modules of other parts (the fabric's per-workload NIC families)
WORKLOAD_WHO: tuple[str, ...] = _WORKLOAD_WHO

#: what a workload is, on its info series only (functions of ``workload``, so they add no
#: series; join them to the value series with ``group_left``)
_IDENTITY = (
    "workload_kind",
    *_JOB,
    "owner_kind",
    "owner_name",
    "qos_class",
)

#: the shared label of a workload's GPU activity series, said once
_SHARED = (
    "; shared=true when several workloads hold the GPU (each then carries the whole GPU's "
    "figure: it is not split)"
)

#: a workload's GPU throughput and activity: its GPUs' figures (the toposcope_gpu_*
#: families of the same names), attributed through the GPUs it holds
WORKLOAD_ACTIVITY_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_workload_gpu_pcie_bytes_total",
        "counter",
        ["workload", *_WORKLOAD_WHO, "gpu", "direction", "source", "shared"],
        "PCIe bytes of a GPU the workload holds (toposcope_gpu_pcie_bytes_total)" + _SHARED + ".",
        "bytes",
    ),
    row(
        "toposcope_workload_gpu_nvlink_bytes_total",
        "counter",
        ["workload", *_WORKLOAD_WHO, "gpu", "direction", "source", "shared"],
        "NVLink bytes of a GPU the workload holds, summed over its links "
        "(toposcope_gpu_nvlink_bytes_total)" + _SHARED + ".",
        "bytes",
    ),
    row(
        "toposcope_workload_gpu_sm_active_ratio",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "gpu", "source", "shared"],
        "SM activity of a GPU the workload holds (toposcope_gpu_sm_active_ratio)" + _SHARED + ".",
        "ratio",
    ),
    row(
        "toposcope_workload_gpu_sm_occupancy_ratio",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "gpu", "source", "shared"],
        "SM occupancy of a GPU the workload holds (toposcope_gpu_sm_occupancy_ratio)"
        + _SHARED
        + ".",
        "ratio",
    ),
    row(
        "toposcope_workload_gpu_tensor_active_ratio",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "gpu", "source", "shared"],
        "Tensor pipe activity of a GPU the workload holds (toposcope_gpu_tensor_active_ratio)"
        + _SHARED
        + ".",
        "ratio",
    ),
    row(
        "toposcope_workload_gpu_sm_utilization_ratio",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "gpu", "shared"],
        "The workload's own share of a GPU's time: NVML's per-process utilization samples "
        "(nvmlDeviceGetProcessUtilization smUtil, the time its kernels ran) of its processes, "
        "summed and averaged since the previous sample; what it gets of a GPU it time-slices "
        "with others (shared=true when several workloads hold the GPU). 0 when the GPU has "
        "samples but none of its processes ran a kernel; absent when NVML gives the GPU no "
        "per-process samples (none since the previous sample, or not supported: MIG mode, "
        "vGPU).",
        "ratio",
    ),
    row(
        "toposcope_workload_gpu_dram_active_ratio",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "gpu", "source", "shared"],
        "DRAM activity of a GPU the workload holds (toposcope_gpu_dram_active_ratio)"
        + _SHARED
        + ".",
        "ratio",
    ),
)

#: per-workload placement, and the kubelet's allocations
WORKLOAD_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_workload_info",
        "info",
        ["workload", "pid", "comm", "cgroup", "pod", "namespace", "container", *_IDENTITY],
        "A tracked workload (cgroup or process tree), value 1. workload_kind is pod, "
        "slurm_job, container, systemd_unit, process or cgroup; the slurm_* labels name a "
        "Slurm job's id, user, account and partition; owner_kind/owner_name a pod's "
        "controller (Deployment, StatefulSet, Job...) and qos_class its QoS class. Empty "
        "when unknown; join them to the other workload series on workload.",
    ),
    row(
        "toposcope_workload_gpu_memory_used_bytes",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "gpu"],
        "GPU memory used by a workload's processes, summed.",
        "bytes",
    ),
    row(
        "toposcope_workload_gpu_info",
        "info",
        ["workload", *_WORKLOAD_WHO, "gpu"],
        "A GPU a workload holds open (/dev/nvidiaN descriptors or NVML), value 1.",
    ),
    *WORKLOAD_ACTIVITY_SPECS,
    row(
        "toposcope_workload_cpu_seconds_total",
        "counter",
        ["workload", *_WORKLOAD_WHO, "numa_node"],
        "CPU time of a workload's threads attributed to the NUMA node of the CPU each "
        "thread last ran on.",
        "seconds",
    ),
    row(
        "toposcope_workload_threads",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "numa_node"],
        "Threads of a workload by the NUMA node of the CPU each last ran on.",
    ),
    row(
        "toposcope_workload_memory_bytes",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "numa_node"],
        "Memory of a workload resident on each NUMA node (cgroup memory.numa_stat or numa_maps).",
        "bytes",
    ),
    row(
        "toposcope_workload_memory_bandwidth_bytes_total",
        "counter",
        ["workload", *_WORKLOAD_WHO, "numa_node", "locality"],
        "Memory traffic of a workload's threads from resctrl memory bandwidth monitoring "
        "(MBM mbm_total_bytes and mbm_local_bytes of the MON groups all of whose tasks the "
        "workload holds), by the NUMA node of the L3 domain the threads ran in and whether the "
        "memory was that node's own (locality=local) or another node's (locality=remote). "
        "Absent where resctrl is not mounted or no MON group monitors the workload.",
        "bytes",
    ),
    row(
        "toposcope_workload_locality_ratio",
        "gauge",
        ["workload", *_WORKLOAD_WHO, "resource"],
        "Share of a workload's CPU time (resource=cpu) or memory (resource=memory) on the NUMA "
        "node(s) of its GPUs, or of its dominant node without GPUs (1 = all local).",
        "ratio",
    ),
    row(
        "toposcope_workload_sample_age_seconds",
        "gauge",
        [],
        "Age of the workload sample this scrape serves. Reading every thread of every "
        "workload costs more than a scrape may, so a background sampler reads them on its own "
        "interval (--collector.workloads.sample-interval) and scrapes serve the last complete "
        "sample; 0 when the scrape read them itself.",
        "seconds",
    ),
    row(
        "toposcope_workloads_dropped_total",
        "counter",
        [],
        "Workloads not exported because the configured maximum was reached.",
    ),
    row(
        "toposcope_kubelet_device_allocation_info",
        "info",
        [*_WHO, "resource", "device_id", "gpu", "numa_node"],
        "A device the kubelet's device plugin gave a container (pod-resources List), value 1; "
        "gpu is the NVML index of a GPU whose UUID is the device id, numa_node the plugin's "
        "topology hint.",
    ),
    row(
        "toposcope_kubelet_exclusive_cpus",
        "gauge",
        [*_WHO, "numa_node"],
        "CPUs the kubelet's CPU manager gave a container exclusively, per NUMA node.",
    ),
    row(
        "toposcope_kubelet_allocatable",
        "gauge",
        ["resource", "numa_node"],
        "Devices (by resource) and CPUs (resource=cpu) the kubelet can allocate, per NUMA node "
        "(pod-resources GetAllocatableResources, Kubernetes >= 1.21).",
    ),
)
