"""NICs read from sysfs: RDMA devices (``class/infiniband``) and PCI network interfaces.

* ``class/infiniband/DEV`` is an RDMA device (``mlx5_0``); its ``device`` link names its PCI
  function and ``ports/N/{state,rate,link_layer}`` its ports. A device whose ports are all
  ``Ethernet`` is RoCE, else InfiniBand (kernels before ``link_layer`` only had InfiniBand).
* ``class/net/IF`` with a ``device`` link to a listed PCI function is a network interface.
  Interfaces on an RDMA device's function (``ib0``, a RoCE port's ``eth2``) are listed as
  that device's ``interfaces``; the others make one Ethernet NIC per PCI function, named by
  its first interface (``type`` 32, IPoIB without an RDMA device, is InfiniBand), with a
  port per interface (``operstate``, ``speed`` in Mb/s, ``dev_port``).

Virtual interfaces (``lo``, bridges, VLANs: no ``device`` link) and devices off the PCI bus
(``scif0`` of a Xeon Phi) are not NICs. Locality comes from the PCI function the builder
already read (its online local CPUs): :func:`~toposcope.topology.nics.numa_nodes_of`.
Missing or garbled port files leave that field unknown.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

from toposcope.topology.model import Nic, NicKind, NicPort, NumaNode, PciDevice
from toposcope.topology.nics import ib_port_state, ib_rate_gbps, numa_nodes_of
from toposcope.topology.sysfs_files import read_int, read_text

LOG = logging.getLogger("toposcope.topology.sysfs")

#: names of class entries and port directories worth reading (kernel names are short)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")
_PORT_RE = re.compile(r"^[0-9]{1,3}$")
#: ``class/net/IF/type`` of an IPoIB interface (ARPHRD_INFINIBAND)
_ARPHRD_INFINIBAND = 32
#: the most entries read from one class directory: a Kubernetes node may hold thousands of
#: virtual interfaces (``cali*``, ``veth*``) beside its NICs, a crafted snapshot millions
MAX_CLASS_ENTRIES = 65536


def _entries(directory: Path) -> list[Path]:
    """The usable names under a class directory, sorted; none when it does not exist."""
    try:
        found = sorted(p for p in directory.iterdir() if _NAME_RE.match(p.name))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    if len(found) > MAX_CLASS_ENTRIES:
        LOG.warning(
            "%s: %d entries, reading the first %d", directory, len(found), MAX_CLASS_ENTRIES
        )
    return found[:MAX_CLASS_ENTRIES]


def _pci_function(entry: Path, listed: dict[str, PciDevice]) -> PciDevice | None:
    """The listed PCI function an entry's ``device`` link points to, if any."""
    try:
        name = (entry / "device").resolve().name.lower()
    except (OSError, RuntimeError):  # a link loop in a hand-made snapshot
        return None
    if not (entry / "device").exists():
        return None
    return listed.get(name)


def _word(path: Path) -> str | None:
    text = read_text(path)
    return text.strip() if text is not None and text.strip() else None


def _ib_ports(device: Path) -> tuple[NicPort, ...]:
    ports: list[NicPort] = []
    for port in _entries(device / "ports"):
        if _PORT_RE.match(port.name) is None:
            continue
        state = _word(port / "state")
        rate = _word(port / "rate")
        ports.append(
            NicPort(
                number=int(port.name),
                state=ib_port_state(state) if state else None,
                rate_gbps=ib_rate_gbps(rate) if rate else None,
                link_layer=_word(port / "link_layer"),
            )
        )
    return tuple(sorted(ports, key=lambda p: p.number))


def _net_port(interface: Path, number: int) -> NicPort:
    speed = read_int(interface / "speed")  # Mb/s; -1 or unreadable while the link is down
    kind = read_int(interface / "type")
    dev_port = read_int(interface / "dev_port")
    state = _word(interface / "operstate")
    return NicPort(
        number=dev_port + 1 if dev_port is not None and 0 <= dev_port < 256 else number,
        state=state.lower() if state else None,
        rate_gbps=speed / 1000 if speed is not None and 0 < speed < 10**7 else None,
        link_layer="InfiniBand" if kind == _ARPHRD_INFINIBAND else "Ethernet",
    )


def read_nics(sysfs: Path, pci: Sequence[PciDevice], nodes: Sequence[NumaNode]) -> tuple[Nic, ...]:
    """The RDMA devices, then the other PCI network functions, each in name order."""
    listed = {d.bus_id: d for d in pci}
    interfaces: dict[str, list[Path]] = {}
    for interface in _entries(sysfs / "class" / "net"):
        function = _pci_function(interface, listed)
        if function is not None:
            interfaces.setdefault(function.bus_id, []).append(interface)

    def locality(function: PciDevice) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return numa_nodes_of(function.local_cpus, nodes, function.numa_node), function.local_cpus

    nics: list[Nic] = []
    rdma_functions: set[str] = set()
    for device in _entries(sysfs / "class" / "infiniband"):
        function = _pci_function(device, listed)
        if function is None:
            LOG.debug("skipping RDMA device %s: not on a listed PCI function", device.name)
            continue
        rdma_functions.add(function.bus_id)
        ports = _ib_ports(device)
        layers = {p.link_layer for p in ports}
        kind = NicKind.ROCE if layers == {"Ethernet"} else NicKind.INFINIBAND
        numa_nodes, cpus = locality(function)
        names = tuple(i.name for i in interfaces.get(function.bus_id, ()))
        nics.append(Nic(device.name, function.bus_id, kind, numa_nodes, cpus, ports, names))
    ethernet: list[Nic] = []
    for bus_id, found in interfaces.items():
        if bus_id in rdma_functions:
            continue
        ports = tuple(_net_port(interface, n) for n, interface in enumerate(found, start=1))
        kind = (
            NicKind.INFINIBAND
            if any(p.link_layer == "InfiniBand" for p in ports)
            else NicKind.ETHERNET
        )
        numa_nodes, cpus = locality(listed[bus_id])
        names = tuple(i.name for i in found)
        ethernet.append(Nic(names[0], bus_id, kind, numa_nodes, cpus, ports, names))
    return tuple(nics) + tuple(sorted(ethernet, key=lambda nic: nic.name))
