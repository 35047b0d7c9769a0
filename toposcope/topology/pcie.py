"""GPU-to-GPU links from the PCIe tree and NVLink counts, in ``nvidia-smi topo -m`` terms.

Builders that know where each PCI function sits (its chain of bridges up to a host bridge:
hwloc XML, sysfs device paths) and, optionally, which GPUs share NVLinks, turn that into
the model's link matrix here, with NVIDIA's definitions:

* ``NV#``: a bonded set of ``#`` NVLinks (directly, or through NVSwitches);
* ``PIX``: at most one PCIe switch between the two (the closest common bridge is a switch
  or a port, and each GPU hangs at most one bridge below it);
* ``PXB``: several bridges, but not the host bridge;
* ``PHB``: through the PCIe host bridge (same root complex);
* ``NODE``: across host bridges within one NUMA node;
* ``SYS``: across the interconnect between NUMA nodes (or locality unknown).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toposcope.topology.model import Gpu, GpuLink, LinkType, PciDevice

LOG = logging.getLogger(__name__)

#: above this many GPUs the PCIe part of the matrix (quadratic in GPUs) is left out: no
#: node has that many (an NVLink domain of a rack has 72), so such a document is not one
#: machine's, and a crafted one must not cost minutes
MAX_PCIE_MATRIX_GPUS = 512


@dataclass(frozen=True)
class NvLink:
    """NVLinks between two GPUs: how many, and whether they go through NVSwitches."""

    count: int
    nvswitch: bool = False

    @property
    def label(self) -> str:
        """The ``nvidia-smi topo -m`` label, ``NV<count>``."""
        return f"NV{self.count}"


def pcie_link(a: PciDevice, b: PciDevice) -> LinkType:
    """How two PCI functions reach each other over PCIe (PIX, PXB, PHB, NODE or SYS).

    Under one host bridge, the closest common bridge decides: none (they meet at the host
    bridge) is PHB; a common bridge with at most one bridge below it on either side (the
    downstream ports of one switch) is PIX; more bridges is PXB. Under different host bridges
    the NUMA nodes decide: the same known node is NODE, anything else SYS.
    """
    if a.host_bridge is not None and a.host_bridge == b.host_bridge:
        up_a, up_b = a.bridges[::-1], b.bridges[::-1]  # host-bridge side first
        shared = 0
        while shared < min(len(up_a), len(up_b)) and up_a[shared] == up_b[shared]:
            shared += 1
        if shared == 0:
            return LinkType.PHB
        below = max(len(up_a), len(up_b)) - shared
        return LinkType.PIX if below <= 1 else LinkType.PXB
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return LinkType.NODE
    return LinkType.SYS


def gpu_links(
    gpus: Sequence[Gpu],
    devices: Sequence[PciDevice],
    nvlinks: Mapping[frozenset[int], NvLink] | None = None,
) -> tuple[GpuLink, ...]:
    """The full GPU link matrix (every ordered pair of distinct GPUs).

    ``nvlinks`` maps a pair of GPU indexes to its NVLinks, which win over PCIe. A pair whose
    GPUs are not both among ``devices`` (no bus id) gets no PCIe link and is left out, as is
    every PCIe pair of a document with over :data:`MAX_PCIE_MATRIX_GPUS` GPUs.
    """
    by_bus = {d.bus_id: d for d in devices}
    nvlinks = nvlinks or {}
    if len(gpus) > MAX_PCIE_MATRIX_GPUS:
        LOG.warning(
            "%d GPUs: over %d, so the GPU link matrix keeps only NVLinks (no PCIe paths)",
            len(gpus),
            MAX_PCIE_MATRIX_GPUS,
        )
        known = {gpu.index for gpu in gpus}
        return tuple(
            GpuLink(a, b, link.label, link.nvswitch)
            for pair, link in sorted(nvlinks.items(), key=lambda item: sorted(item[0]))
            if len(pair) == 2 and pair <= known
            for a, b in (sorted(pair), sorted(pair, reverse=True))
        )
    links: list[GpuLink] = []
    for gpu in gpus:
        for peer in gpus:
            if peer.index == gpu.index:
                continue
            nvlink = nvlinks.get(frozenset((gpu.index, peer.index)))
            if nvlink is not None:
                links.append(GpuLink(gpu.index, peer.index, nvlink.label, nvlink.nvswitch))
                continue
            mine = by_bus.get(gpu.pci_bus_id or "")
            theirs = by_bus.get(peer.pci_bus_id or "")
            if mine is not None and theirs is not None:
                links.append(GpuLink(gpu.index, peer.index, pcie_link(mine, theirs).value))
    return tuple(links)
