"""The ``kubelet`` collector's families for Dynamic Resource Allocation and device alignment.

The DRA labels are named as dcgm-exporter names them on its GPU series (``dra_claim_name``,
``dra_claim_namespace``, ``dra_driver_name``, ``dra_pool_name``, ``dra_device_name``, and
``dra_mig_profile``/``dra_mig_device_uuid`` for MIG devices; its
``internal/pkg/transformation/const.go``), so the two join on them and on ``gpu``.
"""

from __future__ import annotations

from toposcope.catalogue.model import MetricSpec, row

_WHO = ("namespace", "pod", "container")
#: dcgm-exporter's names for a DRA device's claim and identity
DRA_LABELS = (
    "dra_claim_namespace",
    "dra_claim_name",
    "dra_driver_name",
    "dra_pool_name",
    "dra_device_name",
)
DRA_MIG_LABELS = ("dra_mig_profile", "dra_mig_device_uuid")
#: what a device's alignment row names
_DEVICE = ("source", "resource", "device_id", "gpu", "numa_node")

DRA_SPECS: tuple[MetricSpec, ...] = (
    row(
        "toposcope_kubelet_dra_device_info",
        "info",
        [*_WHO, *DRA_LABELS, *DRA_MIG_LABELS, "gpu", "GPU_I_ID", "numa_node", "pcie_root"],
        "A device a container holds through a ResourceClaim (pod-resources dynamic_resources), "
        "value 1, with dcgm-exporter's DRA label names. gpu is the NVML index of the GPU (the "
        "parent GPU of a MIG device, whose GPU instance is GPU_I_ID as on dcgm-exporter's MIG "
        "series), numa_node and pcie_root (comma-separated when several) "
        "come from the node's ResourceSlice or, for the NUMA node, the host topology; empty "
        "when unknown (no --kubernetes.dra-slices).",
    ),
    row(
        "toposcope_kubelet_device_numa_aligned",
        "gauge",
        [*_WHO, *_DEVICE, "against"],
        "Whether a container's device sits on one of the NUMA nodes of its exclusive CPUs "
        "(against=exclusive_cpus), cgroup cpuset.cpus.effective (cpuset_cpus) or "
        "cpuset.mems.effective (cpuset_mems): 1 aligned, 0 not. source=dra for devices "
        "allocated through ResourceClaims (the Topology Manager never aligns them), "
        "device_plugin for device-plugin GPUs (misaligned only where its policy is none or "
        "best-effort).",
    ),
    row(
        "toposcope_kubelet_device_numa_distance",
        "gauge",
        [*_WHO, *_DEVICE, "against", "tier"],
        "SLIT distance from a container's device's NUMA node to the nearest NUMA node of the "
        "set named by against (10 = aligned), and the tier crossed: numa, socket (another node "
        "of the same package) or system (another package).",
    ),
    row(
        "toposcope_kubelet_dra_claim_pcie_roots",
        "gauge",
        ["namespace", "pod", "dra_claim_namespace", "dra_claim_name", "dra_driver_name"],
        "Distinct PCIe roots (resource.kubernetes.io/pcieRoot) of one driver's devices in a "
        "ResourceClaim a pod uses on this node; above 1, the claim's devices talk across the "
        "host bridge. Only devices that publish the attribute count.",
    ),
)

__all__ = ["DRA_LABELS", "DRA_MIG_LABELS", "DRA_SPECS"]
