"""Writing a machine's topology as a sysfs tree that the sysfs builder reads back.

:func:`write_topology_sysfs` writes any :class:`~toposcope.topology.model.Topology` (the
simulator's templates, an imported machine); :func:`write_synthetic_topology` a small
made-up machine; :func:`copy_topology` copies a real snapshot's ``sys/`` (and ``proc/``
files). Every PCI directory is checked to lie inside the tree before it is written.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from toposcope.cpulist import format_cpulist
from toposcope.sim.paths import contained
from toposcope.topology.model import Topology

_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}", re.IGNORECASE)
_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.IGNORECASE)


def write_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def symlink(path: Path, target: str) -> None:
    """Point ``path`` at ``target``, replacing what was there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def write_synthetic_topology(root: Path, nodes: int = 2, cpus_per_node: int = 4) -> None:
    """A minimal sysfs: ``nodes`` NUMA nodes of ``cpus_per_node`` CPUs, one socket each, and
    one NVIDIA 3D controller (class 0x030200) per node with its ``numa_node``.
    """
    sys = root / "sys"
    total = nodes * cpus_per_node
    write_file(sys / "devices/system/cpu/online", f"0-{total - 1}\n")
    for cpu in range(total):
        node = cpu // cpus_per_node
        topo = sys / f"devices/system/cpu/cpu{cpu}/topology"
        write_file(topo / "physical_package_id", f"{node}\n")
        write_file(topo / "core_id", f"{cpu % cpus_per_node}\n")
    for node in range(nodes):
        base = sys / f"devices/system/node/node{node}"
        first = node * cpus_per_node
        write_file(base / "cpulist", f"{first}-{first + cpus_per_node - 1}\n")
        write_file(base / "meminfo", f"Node {node} MemTotal:       16777216 kB\n")
        row = " ".join("10" if peer == node else "21" for peer in range(nodes))
        write_file(base / "distance", row + "\n")
        first = node * cpus_per_node
        pci = sys / f"bus/pci/devices/0000:{0x3B + 0x40 * node:02x}:00.0"
        write_file(pci / "vendor", "0x10de\n")
        write_file(pci / "device", "0x20b0\n")
        write_file(pci / "class", "0x030200\n")
        write_file(pci / "numa_node", f"{node}\n")
        write_file(pci / "local_cpulist", f"{first}-{first + cpus_per_node - 1}\n")


def copy_topology(source: Path, root: Path) -> None:
    """Copy a snapshot's ``sys/`` (symlinks kept) and its top-level ``proc/`` files."""
    shutil.copytree(source / "sys", root / "sys", symlinks=True, dirs_exist_ok=True)
    proc = source / "proc"
    if proc.is_dir():
        for entry in proc.iterdir():
            if entry.is_file() and not entry.is_symlink():
                (root / "proc").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(entry, root / "proc" / entry.name)


def pcie_path(
    host_bridge: str | None, bridges: tuple[str, ...], bus_id: str, listed: set[str]
) -> str | None:
    """The directory of a PCI function below ``devices/``, as Linux lays it out: its host
    bridge, the listed bridges above it (farthest first), then the function itself.

    ``None`` when the host bridge is not named as sysfs names one (``pciDDDD:BB``; hwloc's
    ``DDDD:[BB-BB]`` from an imported XML) or a bus id is not ``DDDD:BB:DD.F``: such a
    function is written flat, under ``bus/pci/devices`` only, as before the tree was known.
    """
    if host_bridge is None or _HOST_BRIDGE.fullmatch(host_bridge) is None:
        return None
    parts = [host_bridge, *(b for b in reversed(bridges) if b in listed), bus_id]
    if any(_BUS_ID.fullmatch(part) is None for part in parts[1:]):
        return None
    return "/".join(parts)


def write_topology_sysfs(
    root: Path, topology: Topology, *, cpu_dir: Path | None = None, pci_dir: Path | None = None
) -> None:
    """Write ``topology`` as a sysfs tree under ``root/sys`` that the sysfs builder reads back.

    CPUs (``devices/system/cpu``: ``online``, ``cpuN/topology/{physical_package_id,
    core_id}``), NUMA nodes (``devices/system/node``: ``online``, ``nodeN/{cpulist,
    distance, meminfo}``) and PCI functions (``bus/pci/devices/<bdf>/{vendor, device,
    class, numa_node, local_cpulist}``; a function with a host bridge lives in the PCIe tree,
    ``devices/<host bridge>/<bridges>/<bdf>``, linked from ``bus/pci/devices``, so that the
    builder reads its bridges back). When ``cpu_dir`` / ``pci_dir`` are given, those two
    directories are written there once and linked into ``root/sys`` (the simulator shares
    them between nodes of one template). ``meminfo`` starts with every byte free. A PCI
    bus id that would lead outside the PCI directory (``../x`` from an imported topology)
    raises :class:`~toposcope.sim.paths.UnsafePathError` before anything is written there.
    """
    sys = root / "sys"
    cpu_target = cpu_dir if cpu_dir is not None else sys / "devices/system/cpu"
    if not (cpu_target / "online").exists():
        online = [c.id for c in topology.cpus if c.online] or list(topology.cpu_to_node())
        write_file(cpu_target / "online", format_cpulist(sorted(online)) + "\n")
        write_file(cpu_target / "possible", format_cpulist(sorted(online)) + "\n")
        for cpu in topology.cpus:
            topo = cpu_target / f"cpu{cpu.id}" / "topology"
            write_file(
                topo / "physical_package_id", f"{-1 if cpu.package is None else cpu.package}\n"
            )
            write_file(topo / "core_id", f"{cpu.core if cpu.core is not None else cpu.id}\n")
    if cpu_dir is not None:
        symlink(sys / "devices/system/cpu", str(cpu_dir))
    pci_target = pci_dir if pci_dir is not None else sys / "bus/pci/devices"
    if not pci_target.exists():
        tree = pci_dir.parent / "pci-tree" if pci_dir is not None else sys / "devices"
        listed = {d.bus_id for d in topology.pci_devices}
        paths = [
            pcie_path(d.host_bridge, d.bridges, d.bus_id, listed) for d in topology.pci_devices
        ]
        bases = [
            contained(pci_target, pci_target / d.bus_id)
            if path is None
            else contained(tree, tree / path)
            for d, path in zip(topology.pci_devices, paths, strict=True)
        ]
        pci_target.mkdir(parents=True, exist_ok=True)
        for device, base, path in zip(topology.pci_devices, bases, paths, strict=True):
            if path is not None:  # the function lives in the tree, linked from here
                base.mkdir(parents=True, exist_ok=True)
                link = pci_target / device.bus_id
                symlink(link, os.path.relpath(base, link.parent))
            write_file(base / "vendor", f"0x{device.vendor:04x}\n")
            write_file(base / "device", f"0x{device.device:04x}\n")
            write_file(base / "class", f"0x{device.class_id:04x}00\n")
            numa = -1 if device.numa_node is None else device.numa_node
            write_file(base / "numa_node", f"{numa}\n")
            write_file(base / "local_cpulist", format_cpulist(device.local_cpus) + "\n")
    if pci_dir is not None:
        symlink(sys / "bus/pci/devices", str(pci_dir))
    node_base = sys / "devices/system/node"
    ids = [n.id for n in topology.numa_nodes]
    write_file(node_base / "online", format_cpulist(ids) + "\n")
    write_file(node_base / "possible", format_cpulist(ids) + "\n")
    for node in topology.numa_nodes:
        base = node_base / f"node{node.id}"
        write_file(base / "cpulist", format_cpulist(node.cpus) + "\n")
        row = " ".join(str(node.distances.get(peer, 10 if peer == node.id else 20)) for peer in ids)
        write_file(base / "distance", row + "\n")
        kib = node.memory_bytes // 1024
        write_file(
            base / "meminfo",
            f"Node {node.id} MemTotal:       {kib} kB\nNode {node.id} MemFree:        {kib} kB\n"
            f"Node {node.id} MemUsed:        0 kB\n",
        )
