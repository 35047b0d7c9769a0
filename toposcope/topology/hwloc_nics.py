"""NICs in an hwloc XML document: the OpenFabrics and Network OS devices of PCI functions.

hwloc's Linux backend hangs an OS device under a PCI function for each RDMA device
(type OpenFabrics, ``mlx5_0``, with ``PortNState`` infos holding the InfiniBand state
number) and each network interface (type Network, ``eth0``/``ib0``, with ``Address`` and
``Port`` infos). The ``osdev_type`` attribute changed meaning in hwloc 3.0:

* hwloc 1.x and 2.x (``version`` absent or ``2.0``): a number, 2 for Network and 3 for
  OpenFabrics;
* hwloc 3.0: a bit mask, 16 for Network and 32 for OpenFabrics (an RDMA device is written
  48, both bits).

One NIC is made per PCI function with such devices: named by its OpenFabrics device when it
has one, else by its first interface. An RDMA device is RoCE when its function's interface
has a 6-byte (Ethernet) address and InfiniBand otherwise (IPoIB addresses are 20 bytes, and
without an interface the port speaks InfiniBand); a function with interfaces only is
Ethernet, or InfiniBand for an IPoIB address. hwloc records no port rate; port states come
from ``PortNState``. Locality is the PCI function's (the builder's local CPUs):
:func:`~toposcope.topology.nics.numa_nodes_of`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from toposcope.topology.hwloc_document import HwObj
from toposcope.topology.model import Nic, NicKind, NicPort, NumaNode, PciDevice
from toposcope.topology.nics import ib_port_state, numa_nodes_of

#: (Network, OpenFabrics) ``osdev_type`` values before hwloc 3.0 ...
_LEGACY_TYPES = (2, 3)
#: ... and the bits of hwloc 3.0's mask
_NETWORK_BIT = 16
_OPENFABRICS_BIT = 32
_PORT_STATE_RE = re.compile(r"^Port([0-9]{1,3})State$")
#: bytes of an IPoIB hardware address (an Ethernet MAC has 6)
_IPOIB_ADDRESS_BYTES = 20


def _osdev_kind(obj: HwObj, bitmask: bool) -> str | None:
    """``"openfabrics"``, ``"network"`` or ``None`` for an OS device of this document."""
    text = obj.element.get("osdev_type", "")
    if not (text.isascii() and text.isdigit() and len(text) <= 20):
        return None
    value = int(text)
    if bitmask:
        if value & _OPENFABRICS_BIT:
            return "openfabrics"
        return "network" if value & _NETWORK_BIT else None
    network, openfabrics = _LEGACY_TYPES
    return {network: "network", openfabrics: "openfabrics"}.get(value)


def _address_bytes(obj: HwObj) -> int:
    address = obj.info("Address") or ""
    return len(address.split(":")) if address else 0


def _port_number(obj: HwObj, default: int) -> int:
    text = obj.info("Port") or ""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 3 else default


def _nic(
    name: str,
    function: PciDevice,
    fabrics: list[HwObj],
    nets: list[HwObj],
    nodes: Sequence[NumaNode],
) -> Nic:
    ipoib = any(_address_bytes(n) == _IPOIB_ADDRESS_BYTES for n in nets)
    ports: tuple[NicPort, ...]
    if fabrics:
        kind = NicKind.ROCE if nets and not ipoib else NicKind.INFINIBAND
        states: dict[int, str | None] = {}
        for item in fabrics[0].element.findall("info"):
            match = _PORT_STATE_RE.match(item.get("name", ""))
            if match is not None:
                states[int(match.group(1))] = ib_port_state(item.get("value", ""))
        ports = tuple(NicPort(number, state) for number, state in sorted(states.items()))
    else:
        kind = NicKind.INFINIBAND if ipoib else NicKind.ETHERNET
        ports = tuple(NicPort(_port_number(n, i)) for i, n in enumerate(nets, start=1))
    return Nic(
        name=name,
        pci_bus_id=function.bus_id,
        kind=kind,
        numa_nodes=numa_nodes_of(function.local_cpus, nodes, function.numa_node),
        cpus=function.local_cpus,
        ports=ports,
        interfaces=tuple(n.element.get("name", "") for n in nets),
    )


def hwloc_nics(
    document_version: str | None,
    objects: Sequence[HwObj],
    pci: Sequence[PciDevice],
    nodes: Sequence[NumaNode],
) -> tuple[Nic, ...]:
    """The NICs below the PCI functions of ``objects``, in document order.

    ``document_version`` is the ``<topology version>`` attribute (``3.0`` reads
    ``osdev_type`` as a bit mask); ``pci`` are the builder's PCI functions, whose locality
    the NICs take.
    """
    bitmask = (document_version or "").split(".")[0] not in ("", "1", "2")
    by_bus = {d.bus_id: d for d in pci}
    nics: list[Nic] = []
    for obj in objects:
        bus_id = obj.element.get("pci_busid")
        function = by_bus.get(bus_id.lower()) if bus_id else None
        if function is None:
            continue
        fabrics: list[HwObj] = []
        nets: list[HwObj] = []
        for child in obj.children:
            kind = _osdev_kind(child, bitmask) if child.type == "OSDev" else None
            if kind == "openfabrics":
                fabrics.append(child)
            elif kind == "network":
                nets.append(child)
        nets.sort(key=lambda n: n.element.get("name", ""))
        if fabrics:
            nics.append(_nic(fabrics[0].element.get("name", ""), function, fabrics, nets, nodes))
        elif nets:
            nics.append(_nic(nets[0].element.get("name", ""), function, [], nets, nodes))
    return tuple(nics)
