"""Topology model and its builders (sysfs, hwloc XML, ``nvidia-smi topo -m``)."""

from toposcope.topology.model import (
    Cpu,
    Gpu,
    GpuLink,
    LinkType,
    NumaNode,
    Package,
    PciDevice,
    Topology,
    link_type,
)

__all__ = [
    "Cpu",
    "Gpu",
    "GpuLink",
    "LinkType",
    "NumaNode",
    "Package",
    "PciDevice",
    "Topology",
    "link_type",
]
