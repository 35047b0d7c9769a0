"""Build a :class:`~toposcope.topology.model.Topology` from a sysfs (and procfs) tree.

The root is configurable, like node_exporter's ``--path.sysfs``, so that tests run on real
machines' snapshots. The rules follow what the kernel and hwloc do on real hardware:

* NUMA nodes come from ``bus/node/devices`` (or ``devices/system/node``); ids may be sparse,
  nodes may have no CPU (CXL, HBM, NVIDIA GPU memory on POWER9) or no memory.
* Only online CPUs belong to a node, a package or a PCI device's locality (hwloc's view).
* A kernel without NUMA support shows no node directory; the machine is then one node 0
  holding every online CPU and the memory of ``/proc/meminfo``.
* A PCI device's ``numa_node`` of ``-1`` (firmware did not say) falls back to its
  ``local_cpus``: when they fall inside exactly one node, that node, as hwloc attaches it.
* A missing ``distance`` file leaves the node's distances empty.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from toposcope.cpulist import parse_cpulist, parse_cpumask
from toposcope.errors import SourceError
from toposcope.topology.model import Cpu, Gpu, NumaNode, Package, PciDevice, Topology

LOG = logging.getLogger(__name__)

_NODE_DIR_RE = re.compile(r"^node(\d+)$")
_CPU_DIR_RE = re.compile(r"^cpu(\d+)$")
_MEMINFO_RE = re.compile(r"^(?:Node\s+\d+\s+)?([A-Za-z_()0-9]+):\s+(\d+)(?:\s+kB)?\s*$")


def read_text(path: Path) -> str | None:
    """Read a small sysfs/procfs file; ``None`` when it does not exist or cannot be read."""
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError):
        return None
    except OSError as exc:
        LOG.debug("cannot read %s: %s", path, exc)
        return None


def read_int(path: Path) -> int | None:
    """Read a file holding one integer (decimal or ``0x`` hexadecimal); ``None`` if unusable."""
    text = read_text(path)
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text, 0)
    except ValueError:
        return None


def parse_meminfo(text: str) -> dict[str, int]:
    """Parse ``/proc/meminfo`` or ``node*/meminfo`` into bytes (kB fields) or counts.

    Lines that are not ``Key: value [kB]`` are skipped. HugePages_* counts stay counts.
    """
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = _MEMINFO_RE.match(line.strip())
        if not match:
            continue
        key, number = match.group(1), int(match.group(2))
        values[key] = number * 1024 if line.rstrip().endswith("kB") else number
    return values


def numa_dir(sysfs: Path) -> Path:
    """The directory listing NUMA nodes (``bus/node/devices`` preferred, as hwloc does)."""
    bus = sysfs / "bus" / "node" / "devices"
    return bus if bus.is_dir() else sysfs / "devices" / "system" / "node"


def cpu_dir(sysfs: Path) -> Path:
    """The directory listing CPUs (``bus/cpu/devices`` preferred)."""
    bus = sysfs / "bus" / "cpu" / "devices"
    return bus if bus.is_dir() else sysfs / "devices" / "system" / "cpu"


def node_dirs(sysfs: Path) -> dict[int, Path]:
    """NUMA node id -> its sysfs directory, for every node present (ids may be sparse)."""
    base = numa_dir(sysfs)
    result: dict[int, Path] = {}
    try:
        entries = list(base.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return result
    for entry in entries:
        match = _NODE_DIR_RE.match(entry.name)
        if match:
            result[int(match.group(1))] = entry
    return dict(sorted(result.items()))


def online_cpus(sysfs: Path) -> tuple[int, ...] | None:
    """CPUs listed in ``devices/system/cpu/online``; ``None`` when the file is absent."""
    text = read_text(sysfs / "devices" / "system" / "cpu" / "online")
    if text is None:
        return None
    return parse_cpulist(text)


def node_cpus(node_path: Path) -> tuple[int, ...]:
    """CPUs the kernel lists for a node (``cpulist``, else the ``cpumap`` mask)."""
    text = read_text(node_path / "cpulist")
    if text is not None:
        return parse_cpulist(text)
    mask = read_text(node_path / "cpumap")
    return parse_cpumask(mask) if mask is not None else ()


def _read_cpus(sysfs: Path) -> list[Cpu]:
    online = online_cpus(sysfs)
    base = cpu_dir(sysfs)
    cpus: list[Cpu] = []
    try:
        entries = list(base.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    for entry in entries:
        match = _CPU_DIR_RE.match(entry.name)
        if not match:
            continue
        cpu_id = int(match.group(1))
        if online is not None:
            is_online = cpu_id in online
        else:
            flag = read_int(entry / "online")
            is_online = flag != 0
        package = read_int(entry / "topology" / "physical_package_id")
        core = read_int(entry / "topology" / "core_id")
        cpus.append(
            Cpu(
                id=cpu_id,
                package=package if package is not None and package >= 0 else None,
                core=core,
                numa_node=None,
                online=is_online,
            )
        )
    if not cpus and online:
        cpus = [Cpu(id=c, package=None, core=None, numa_node=None) for c in online]
    return sorted(cpus, key=lambda c: c.id)


def _distances(node_path: Path, node_ids: list[int]) -> dict[int, int]:
    text = read_text(node_path / "distance")
    if text is None:
        return {}
    try:
        row = [int(x) for x in text.split()]
    except ValueError:
        LOG.warning("ignoring malformed NUMA distance file %s", node_path / "distance")
        return {}
    if len(row) != len(node_ids):
        LOG.warning(
            "NUMA distance row in %s has %d entries for %d nodes; ignored",
            node_path / "distance",
            len(row),
            len(node_ids),
        )
        return {}
    return dict(zip(node_ids, row, strict=True))


def _pci_bus_id(name: str) -> str:
    return name.lower()


def read_pci_devices(sysfs: Path, nodes: tuple[NumaNode, ...]) -> tuple[PciDevice, ...]:
    """Every PCI function under ``bus/pci/devices`` with its NUMA locality resolved."""
    base = sysfs / "bus" / "pci" / "devices"
    try:
        entries = sorted(base.iterdir(), key=lambda p: p.name)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    known_nodes = {n.id for n in nodes}
    devices: list[PciDevice] = []
    for entry in entries:
        vendor = read_int(entry / "vendor")
        device = read_int(entry / "device")
        pci_class = read_int(entry / "class")
        if vendor is None or device is None or pci_class is None:
            LOG.debug("skipping PCI device %s without vendor/device/class", entry.name)
            continue
        local_text = read_text(entry / "local_cpulist")
        if local_text is not None:
            local = parse_cpulist(local_text)
        else:
            mask = read_text(entry / "local_cpus")
            local = parse_cpumask(mask) if mask is not None else ()
        node_id = read_int(entry / "numa_node")
        numa_node = node_id if node_id is not None and node_id in known_nodes else None
        if numa_node is None:
            numa_node = node_of_cpus(local, nodes)
        devices.append(
            PciDevice(
                bus_id=_pci_bus_id(entry.name),
                vendor=vendor,
                device=device,
                class_id=pci_class >> 8,
                numa_node=numa_node,
                local_cpus=local,
            )
        )
    return tuple(devices)


def node_of_cpus(cpus: tuple[int, ...], nodes: tuple[NumaNode, ...]) -> int | None:
    """The one NUMA node whose CPUs the given set falls inside, else ``None``.

    Used for PCI devices whose firmware reported no node: hwloc attaches such a device
    under the smallest object covering its local CPUs, which is a single NUMA node only when
    the CPUs do not span several nodes.
    """
    if not cpus:
        return None
    wanted = set(cpus)
    touching = [n for n in nodes if n.cpus and wanted & set(n.cpus)]
    if len(touching) == 1 and wanted <= set(touching[0].cpus):
        return touching[0].id
    return None


def build_from_sysfs(sysfs: Path | str, procfs: Path | str | None = None) -> Topology:
    """Build the topology of the machine whose sysfs is rooted at ``sysfs``.

    ``procfs`` is only needed for machines without NUMA directories (the memory size of the
    single implicit node comes from ``/proc/meminfo``). Raises :class:`SourceError` when the
    root does not exist or shows no CPU at all.
    """
    sysfs = Path(sysfs)
    if not sysfs.is_dir():
        raise SourceError(f"sysfs root {sysfs} does not exist or is not a directory")
    all_cpus = _read_cpus(sysfs)
    online = {c.id for c in all_cpus if c.online}
    if not all_cpus:
        raise SourceError(f"no CPU found under {cpu_dir(sysfs)}")

    dirs = node_dirs(sysfs)
    node_ids = list(dirs)
    cpu_package = {c.id: c.package for c in all_cpus}
    nodes: list[NumaNode] = []
    if dirs:
        for node_id, path in dirs.items():
            cpus = tuple(c for c in node_cpus(path) if c in online)
            meminfo_text = read_text(path / "meminfo")
            memory = parse_meminfo(meminfo_text).get("MemTotal", 0) if meminfo_text else 0
            packages = {cpu_package.get(c) for c in cpus}
            package = packages.pop() if len(packages) == 1 else None
            nodes.append(
                NumaNode(
                    id=node_id,
                    package=package,
                    cpus=cpus,
                    memory_bytes=memory,
                    distances=_distances(path, node_ids),
                )
            )
    else:
        meminfo_text = read_text(Path(procfs) / "meminfo") if procfs is not None else None
        memory = parse_meminfo(meminfo_text).get("MemTotal", 0) if meminfo_text else 0
        packages = {c.package for c in all_cpus if c.online}
        nodes.append(
            NumaNode(
                id=0,
                package=packages.pop() if len(packages) == 1 else None,
                cpus=tuple(sorted(online)),
                memory_bytes=memory,
            )
        )
    node_tuple = tuple(nodes)
    cpu_node = {cpu: n.id for n in node_tuple for cpu in n.cpus}
    cpus = tuple(
        Cpu(c.id, c.package, c.core, cpu_node.get(c.id), c.online) for c in all_cpus
    )
    package_cpus: dict[int, list[int]] = {}
    for cpu in cpus:
        if cpu.online and cpu.package is not None:
            package_cpus.setdefault(cpu.package, []).append(cpu.id)
    packages_out = tuple(
        Package(id=pid, cpus=tuple(sorted(ids))) for pid, ids in sorted(package_cpus.items())
    )
    pci = read_pci_devices(sysfs, node_tuple)
    gpu_devices = [d for d in pci if d.is_gpu]
    gpu_devices.sort(key=lambda d: (d.vendor != 0x10DE, d.bus_id))
    gpus = tuple(
        Gpu(
            index=i,
            pci_bus_id=d.bus_id,
            numa_node=d.numa_node,
            local_cpus=d.local_cpus,
            vendor=d.vendor,
        )
        for i, d in enumerate(gpu_devices)
    )
    return Topology(
        packages=packages_out,
        numa_nodes=node_tuple,
        cpus=cpus,
        pci_devices=pci,
        gpus=gpus,
        source=f"sysfs:{sysfs}",
    )
