"""What every NIC builder shares: NUMA locality as hwloc computes it, InfiniBand port words,
and the GPU-to-NIC matrix in the GPU pairs' PCIe labels.

A NIC is placed by its local CPUs, as hwloc places a PCI function: under the smallest
object covering them, so its NUMA nodes are the nodes those CPUs touch, whatever the
firmware's ``numa_node`` says (often ``-1``, sometimes another node). The GPU-to-NIC labels
are :func:`~toposcope.topology.pcie.pcie_link` of the two PCI functions, the rule the GPU
pairs follow, so a GPU and the NIC behind the same switch are PIX, as ``nvidia-smi topo -m``
prints them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from toposcope.topology.model import Gpu, GpuNicLink, Nic, NumaNode, PciDevice
from toposcope.topology.pcie import MAX_PCIE_MATRIX_GPUS, pcie_link

#: InfiniBand port states by number (``ports/N/state`` reads ``4: ACTIVE``; hwloc's
#: ``PortNState`` info keeps the number only).
IB_PORT_STATES = {1: "down", 2: "init", 3: "armed", 4: "active", 5: "active_defer"}
#: ``4: ACTIVE``, ``5: LinkUp``: a port state file's id and name
_IB_STATE_RE = re.compile(r"^\s*([0-9]{1,3})\s*:\s*([A-Za-z][A-Za-z0-9 _-]{0,31}?)\s*$")
#: ``40 Gb/sec (4X QDR)``, ``2.5 Gb/sec (1X SDR)``: the rate is the leading number.
_IB_RATE_RE = re.compile(r"^\s*([0-9]{1,6}(?:\.[0-9]{1,3})?)\s*Gb/sec")
#: the most NICs whose GPU matrix is computed (a host has tens; a document with more is not
#: one machine's, and a crafted one must not cost minutes)
MAX_MATRIX_NICS = 1024


def numa_nodes_of(
    cpus: Sequence[int], nodes: Sequence[NumaNode], fallback: int | None
) -> tuple[int, ...]:
    """The NUMA nodes a device with these local CPUs belongs to, as hwloc attaches it.

    The nodes whose CPUs the local CPUs touch; without local CPUs (or when they touch no
    node), the firmware's node ``fallback`` when known.
    """
    wanted = set(cpus)
    touching = tuple(n.id for n in nodes if n.cpus and wanted.intersection(n.cpus))
    if touching:
        return tuple(sorted(touching))
    return () if fallback is None else (fallback,)


def ib_state_pair(text: str) -> tuple[int, str] | None:
    """The id and name of a sysfs port state file (``state``: ``4: ACTIVE``; ``phys_state``:
    ``5: LinkUp``), or ``None`` for anything else (a name of at most 32 letters, digits,
    spaces, ``_`` and ``-``, so that it can be a label value).
    """
    match = _IB_STATE_RE.match(text)
    return (int(match.group(1)), match.group(2)) if match else None


def ib_port_state(text: str) -> str | None:
    """An InfiniBand port state, ``4: ACTIVE`` or hwloc's ``4``, as a lower-case word."""
    pair = ib_state_pair(text)
    if pair is not None:
        return pair[1].lower()
    head = text.strip()
    if head.isascii() and head.isdigit() and len(head) <= 2:
        return IB_PORT_STATES.get(int(head))
    return None


def ib_rate_gbps(text: str) -> float | None:
    """The Gb/s of an InfiniBand ``rate`` file (``200 Gb/sec (4X HDR)``), else ``None``."""
    match = _IB_RATE_RE.match(text)
    return float(match.group(1)) if match else None


def gpu_nic_links(
    gpus: Sequence[Gpu], nics: Sequence[Nic], devices: Sequence[PciDevice]
) -> tuple[GpuNicLink, ...]:
    """Every GPU's label to every NIC, from their PCIe paths (GPU order, then NIC order).

    A GPU or NIC that is not among ``devices`` (no PCI bus id) gets no label, and nothing is
    computed beyond :data:`~toposcope.topology.pcie.MAX_PCIE_MATRIX_GPUS` GPUs or
    :data:`MAX_MATRIX_NICS` NICs.
    """
    if len(gpus) > MAX_PCIE_MATRIX_GPUS or len(nics) > MAX_MATRIX_NICS:
        return ()
    by_bus = {d.bus_id: d for d in devices}
    links: list[GpuNicLink] = []
    for gpu in gpus:
        mine = by_bus.get(gpu.pci_bus_id or "")
        if mine is None:
            continue
        for nic in nics:
            theirs = by_bus.get(nic.pci_bus_id or "")
            if theirs is not None:
                links.append(GpuNicLink(gpu.index, nic.name, pcie_link(mine, theirs).value))
    return tuple(links)
