"""The exporter's collectors, one module each, and the table that lists them."""

from __future__ import annotations

from toposcope.exporters.collectors import (
    cross_socket,
    gpu,
    infiniband,
    kubelet,
    numa_cpu,
    numa_memory,
    pcie_link,
    slurm_gres,
    topology,
    workloads,
)
from toposcope.exporters.registry import CollectorTable


def default_table() -> CollectorTable:
    """A fresh table of every collector toposcope ships, in scrape order."""
    return CollectorTable(
        [
            topology.ENTRY,
            numa_memory.ENTRY,
            numa_cpu.ENTRY,
            cross_socket.ENTRY,
            workloads.ENTRY,
            gpu.ENTRY,
            kubelet.ENTRY,
            slurm_gres.ENTRY,
            infiniband.ENTRY,
            pcie_link.ENTRY,
        ]
    )
