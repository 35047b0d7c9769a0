"""Per-workload NIC series: which RDMA NICs a workload's GPUs are nearest to, how many of its
GPUs have none near, and which NICs it uses, near or far (:mod:`toposcope.host.nic_use`).

Written by the ``workloads`` collector into its own sinks, one call per workload, only on
hosts with RDMA NICs whose GPU-to-NIC matrix is known (the topology's ``gpu_nic_links``);
elsewhere the three families stay empty and are left out of the scrape.
"""

from __future__ import annotations

from collections.abc import Mapping

from toposcope.exporters.collectors.gpu_activity import Sink
from toposcope.exporters.workload_snapshot import WorkloadFigures
from toposcope.topology.nic_locality import NicLocality

#: the families this module fills, in exposition order
WORKLOAD_NIC_FAMILIES = (
    "toposcope_workload_nic_nearest_gpus",
    "toposcope_workload_nic_far_gpus",
    "toposcope_workload_nic_used_info",
)


def add_workload_nics(
    sinks: Mapping[str, Sink], who: list[str], workload: WorkloadFigures, locality: NicLocality
) -> None:
    """Add one workload's NIC series; ``who`` are its labels."""
    if not locality.nics:
        return
    nearest: dict[tuple[str, str], int] = {}
    for gpu in workload.gpus:
        entry = locality.nearest.get(gpu)
        if entry is None:
            continue
        link, nics = entry
        for nic in nics:
            nearest[(nic, link)] = nearest.get((nic, link), 0) + 1
    for (nic, link), count in sorted(nearest.items()):
        sinks["toposcope_workload_nic_nearest_gpus"].add_metric([*who, nic, link], float(count))
    if any(gpu in locality.nearest for gpu in workload.gpus):
        far = float(locality.far_gpus(workload.gpus))
        sinks["toposcope_workload_nic_far_gpus"].add_metric(who, far)
    for use in workload.nics_used:
        near = "true" if use.near else "false"
        for source in use.sources:
            sinks["toposcope_workload_nic_used_info"].add_metric(
                [*who, use.nic, source, use.link, near], 1.0
            )
