"""Synthetic host trees (``sys/`` + ``proc/`` + cgroups) for tests, demos and benchmarks.

:func:`write_workload_tree` writes, under one root that ``--root`` (``HostPaths.under``) can
read, everything the exporter's host collectors look at:

* a topology: copied from a real snapshot (``topology_root``, e.g. an unpacked hwloc
  fixture; symlinks kept), kept when ``root/sys`` already holds one, or else a small
  synthetic machine (2 NUMA nodes x 4 CPUs, one NVIDIA GPU per node);
* ``proc/stat`` (one ``cpuN`` line per online CPU) and ``proc/self/mountinfo``;
* a cgroup tree under ``sys/fs/cgroup`` (v2 unified, or v1 hierarchies ``cpuset``,
  ``cpu,cpuacct``, ``memory``, ``pids`` and ``name=systemd``) with ``cgroup.procs``,
  ``memory.numa_stat`` and cpuset files;
* one process per workload, ``proc/<pid>/{stat,comm,cgroup,status,numa_maps}``, a
  ``task/<tid>/stat`` per thread (mostly on a "home" NUMA node) and ``fd/*`` symlinks, some
  to ``/dev/nvidiaN`` (targets need not exist: readers only ``readlink``).

Workloads are Kubernetes containers, Docker containers, systemd services and Slurm jobs in
fixed proportions, named the way the workloads collector names them. Everything derives
from ``seed``: the same arguments write byte-identical trees. pid 1 (``systemd``) sits in
the root or ``/init.scope`` cgroup, which the default workload filter excludes.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from toposcope.cpulist import format_cpulist
from toposcope.sim.paths import contained
from toposcope.topology.model import Topology
from toposcope.topology.sysfs import build_from_sysfs

CLOCK_TICKS = 100
PAGE = 4096

_KINDS = ("kubernetes",) * 6 + ("docker",) * 2 + ("systemd",) * 1 + ("slurm",) * 1
_V1_HIERARCHIES = (
    ("cpuset", "cpuset"),
    ("cpu,cpuacct", "cpu,cpuacct"),
    ("memory", "memory"),
    ("pids", "pids"),
    ("systemd", "xattr,name=systemd"),
)
_V1_PROC_CGROUP_IDS = {"pids": 5, "memory": 4, "cpu,cpuacct": 3, "cpuset": 2, "systemd": 1}


@dataclass(frozen=True)
class GeneratedWorkload:
    """One generated workload: the name the collector gives it, its cgroup, pid and threads."""

    name: str
    kind: str
    cgroup: str
    pid: int
    tids: tuple[int, ...]
    gpu_minor: int | None


@dataclass(frozen=True)
class GeneratedTree:
    """What :func:`write_workload_tree` wrote (for tests to check a reader against)."""

    root: Path
    cgroup_version: int
    workloads: tuple[GeneratedWorkload, ...]


def stat_line(
    pid: int,
    comm: str,
    *,
    ppid: int,
    utime: int,
    stime: int,
    starttime: int,
    processor: int,
    num_threads: int = 1,
    state: str = "S",
    flags: int = 0x400140,
) -> str:
    """A 52-field ``/proc/PID/stat`` line with the given fields and plausible others."""
    fields = [
        state, ppid, pid, pid, 0, -1, flags, 1200, 0, 3, 0, utime, stime, 0, 0, 20, 0,
        num_threads, 0, starttime, 123456789, 2048, "18446744073709551615",
        1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  # startcode .. cnswap (fields 26-37)
        17, processor,  # exit_signal, processor (fields 38-39)
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  # rt_priority .. exit_code (fields 40-52)
    ]  # fmt: skip
    return f"{pid} ({comm}) " + " ".join(str(f) for f in fields) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _symlink(path: Path, target: str) -> None:
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
    _write(sys / "devices/system/cpu/online", f"0-{total - 1}\n")
    for cpu in range(total):
        node = cpu // cpus_per_node
        topo = sys / f"devices/system/cpu/cpu{cpu}/topology"
        _write(topo / "physical_package_id", f"{node}\n")
        _write(topo / "core_id", f"{cpu % cpus_per_node}\n")
    for node in range(nodes):
        base = sys / f"devices/system/node/node{node}"
        first = node * cpus_per_node
        _write(base / "cpulist", f"{first}-{first + cpus_per_node - 1}\n")
        _write(base / "meminfo", f"Node {node} MemTotal:       16777216 kB\n")
        row = " ".join("10" if peer == node else "21" for peer in range(nodes))
        _write(base / "distance", row + "\n")
        first = node * cpus_per_node
        pci = sys / f"bus/pci/devices/0000:{0x3B + 0x40 * node:02x}:00.0"
        _write(pci / "vendor", "0x10de\n")
        _write(pci / "device", "0x20b0\n")
        _write(pci / "class", "0x030200\n")
        _write(pci / "numa_node", f"{node}\n")
        _write(pci / "local_cpulist", f"{first}-{first + cpus_per_node - 1}\n")


def _copy_topology(source: Path, root: Path) -> None:
    shutil.copytree(source / "sys", root / "sys", symlinks=True, dirs_exist_ok=True)
    proc = source / "proc"
    if proc.is_dir():
        for entry in proc.iterdir():
            if entry.is_file() and not entry.is_symlink():
                (root / "proc").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(entry, root / "proc" / entry.name)


def _mountinfo(version: int) -> str:
    lines = [
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw",
        "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
        "24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw",
    ]
    if version == 2:
        lines.append(
            "29 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 "
            "cgroup2 rw,nsdelegate,memory_recursiveprot"
        )
    else:
        lines.append(
            "25 24 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:3 - tmpfs tmpfs ro,mode=755"
        )
        for i, (directory, options) in enumerate(_V1_HIERARCHIES):
            lines.append(
                f"{30 + i} 25 0:{30 + i} / /sys/fs/cgroup/{directory} "
                f"rw,nosuid,nodev,noexec,relatime shared:{5 + i} - cgroup cgroup rw,{options}"
            )
    return "\n".join(lines) + "\n"


def _proc_stat(cpus: list[int], rng: random.Random) -> str:
    lines = []
    rows = []
    for _ in cpus:
        row = [rng.randrange(10_000, 90_000), 10, rng.randrange(1_000, 9_000),
               rng.randrange(100_000, 900_000), 50, 0, 20, 0, 0, 0]  # fmt: skip
        rows.append(row)
    total = [sum(col) for col in zip(*rows, strict=True)] if rows else [0] * 10
    lines.append("cpu  " + " ".join(map(str, total)))
    lines.extend(
        f"cpu{cpu} " + " ".join(map(str, row)) for cpu, row in zip(cpus, rows, strict=True)
    )
    lines += ["intr 0", "ctxt 123456", "btime 1700000000", "processes 4242",
              "procs_running 2", "procs_blocked 0", "softirq 0"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _uid(rng: random.Random) -> str:
    text = f"{rng.getrandbits(128):032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _workload_cgroup(
    kind: str, index: int, version: int, rng: random.Random
) -> tuple[str, str, str]:
    """(leaf cgroup holding the process, workload cgroup, workload name)."""
    if kind == "kubernetes":
        uid = _uid(rng)
        cid = f"{rng.getrandbits(256):064x}"
        qos = rng.choice(("guaranteed", "burstable", "besteffort"))
        if version == 2:
            under = uid.replace("-", "_")
            if qos == "guaranteed":
                path = f"/kubepods.slice/kubepods-pod{under}.slice/cri-containerd-{cid}.scope"
            else:
                path = (
                    f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{under}.slice/"
                    f"cri-containerd-{cid}.scope"
                )
        else:
            pod = f"/kubepods/pod{uid}" if qos == "guaranteed" else f"/kubepods/{qos}/pod{uid}"
            path = f"{pod}/{cid}"
        return path, path, f"{uid}/{cid[:12]}"
    if kind == "docker":
        cid = f"{rng.getrandbits(256):064x}"
        path = f"/system.slice/docker-{cid}.scope" if version == 2 else f"/docker/{cid}"
        return path, path, cid[:12]
    if kind == "systemd":
        unit = f"svc-{index}.service"
        path = f"/system.slice/{unit}"
        return path, path, unit
    job = 1000 + index
    if version == 2:
        job_path = f"/system.slice/slurmstepd.scope/job_{job}"
        return f"{job_path}/step_0/user/task_0", job_path, f"slurm-job-{job}"
    job_path = f"/slurm/uid_1000/job_{job}"
    return f"{job_path}/step_0/task_0", job_path, f"slurm-job-{job}"


def _cgroup_dirs(root: Path, version: int, hierarchy: str | None) -> Path:
    base = root / "sys" / "fs" / "cgroup"
    return base if version == 2 or hierarchy is None else base / hierarchy


def _ensure_cgroup(base: Path, cgroup: str) -> Path:
    """Create the cgroup directory and empty ``cgroup.procs`` files on the way down (the
    directory must lie inside ``base``).
    """
    relative = cgroup.strip("/")
    if relative:
        contained(base, base / relative)
    directory = base
    procs = directory / "cgroup.procs"
    if not procs.exists():
        _write(procs, "")
    for part in [p for p in cgroup.split("/") if p]:
        directory = directory / part
        procs = directory / "cgroup.procs"
        if not procs.exists():
            _write(procs, "")
    return directory


def _add_procs(directory: Path, pids: list[int]) -> None:
    procs = directory / "cgroup.procs"
    existing = procs.read_text(encoding="utf-8") if procs.exists() else ""
    _write(procs, existing + "".join(f"{pid}\n" for pid in pids))


def _numa_stat(version: int, per_node_pages: dict[int, int]) -> str:
    nodes = sorted(per_node_pages)
    if version == 2:
        anon = " ".join(f"N{n}={per_node_pages[n] * PAGE * 3 // 4}" for n in nodes)
        file = " ".join(f"N{n}={per_node_pages[n] * PAGE // 4}" for n in nodes)
        zero = " ".join(f"N{n}=0" for n in nodes)
        return f"anon {anon}\nfile {file}\nkernel_stack {zero}\nshmem {zero}\n"
    total = sum(per_node_pages.values())
    row = " ".join(f"N{n}={per_node_pages[n]}" for n in nodes)
    zero = " ".join(f"N{n}=0" for n in nodes)
    lines = [f"total={total} {row}", f"file=0 {zero}", f"anon={total} {row}",
             f"unevictable=0 {zero}", f"hierarchical_total={total} {row}",
             f"hierarchical_file=0 {zero}", f"hierarchical_anon={total} {row}",
             f"hierarchical_unevictable=0 {zero}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_workload_tree(
    root: Path,
    *,
    topology_root: Path | None = None,
    workloads: int = 10,
    threads_per_workload: int = 4,
    cgroup_version: Literal[1, 2] = 2,
    seed: int = 0,
) -> GeneratedTree:
    """Write a host tree with ``workloads`` workloads of ``threads_per_workload`` threads.

    See the module docstring for the layout. Returns what was written, with the workload
    names the collector is expected to report.
    """
    if cgroup_version not in (1, 2):
        raise ValueError(f"cgroup_version must be 1 or 2, not {cgroup_version!r}")
    if workloads < 0 or threads_per_workload < 1:
        raise ValueError("workloads must be >= 0 and threads_per_workload >= 1")
    rng = random.Random(seed)
    root = Path(root)
    if topology_root is not None:
        _copy_topology(Path(topology_root), root)
    elif not (root / "sys").is_dir():
        write_synthetic_topology(root)
    topo = build_from_sysfs(root / "sys", root / "proc")
    node_cpus = {n.id: list(n.cpus) for n in topo.numa_nodes if n.cpus}
    all_cpus = sorted(c for cpus in node_cpus.values() for c in cpus)
    nodes = sorted(node_cpus) or [0]
    gpus = [g.index for g in topo.gpus]
    proc = root / "proc"

    _write(proc / "stat", _proc_stat(all_cpus or [0], rng))
    _write(proc / "self" / "mountinfo", _mountinfo(cgroup_version))

    hierarchies: list[str | None] = (
        [None] if cgroup_version == 2 else [h for h, _ in _V1_HIERARCHIES]
    )
    init_cgroup = "/init.scope" if cgroup_version == 2 else "/"
    for hierarchy in hierarchies:
        base = _cgroup_dirs(root, cgroup_version, hierarchy)
        _add_procs(_ensure_cgroup(base, init_cgroup), [1])
    _write_process(
        proc, 1, "systemd", ppid=0, tids=[1], cpus=[all_cpus[0] if all_cpus else 0],
        cgroup=init_cgroup, version=cgroup_version, rng=rng, gpu_minor=None, nodes=nodes,
    )  # fmt: skip

    generated: list[GeneratedWorkload] = []
    stride = threads_per_workload + 1
    for index in range(workloads):
        kind = _KINDS[rng.randrange(len(_KINDS))]
        leaf, cgroup, name = _workload_cgroup(kind, index, cgroup_version, rng)
        pid = 1000 + index * stride
        tids = list(range(pid, pid + threads_per_workload))
        home = rng.choice(nodes)
        cpus = [
            rng.choice(node_cpus[home] if home in node_cpus and rng.random() < 0.8 else all_cpus)
            if all_cpus else 0
            for _ in tids
        ]  # fmt: skip
        gpu_minor = rng.choice(gpus) if gpus and rng.random() < 0.3 else None
        per_node_pages = {n: (rng.randrange(256, 4096) if n == home else rng.randrange(0, 512))
                          for n in nodes}  # fmt: skip
        for hierarchy in hierarchies:
            base = _cgroup_dirs(root, cgroup_version, hierarchy)
            leaf_dir = _ensure_cgroup(base, leaf)
            _add_procs(leaf_dir, [pid])
            if hierarchy in (None, "memory"):
                stat = _numa_stat(cgroup_version, per_node_pages)
                _write(leaf_dir / "memory.numa_stat", stat)
                _write(_ensure_cgroup(base, cgroup) / "memory.numa_stat", stat)
            if hierarchy in (None, "cpuset"):
                first, last = min(all_cpus or [0]), max(all_cpus or [0])
                names = (
                    ("cpuset.cpus.effective", "cpuset.mems.effective")
                    if cgroup_version == 2
                    else ("cpuset.effective_cpus", "cpuset.effective_mems")
                )
                _write(leaf_dir / names[0], f"{first}-{last}\n")
                _write(leaf_dir / names[1], f"{nodes[0]}-{nodes[-1]}\n")
        comm = {"kubernetes": "python3", "docker": "redis-server",
                "systemd": "svc daemon", "slurm": "train (rank 0)"}[kind]  # fmt: skip
        _write_process(
            proc, pid, comm, ppid=1, tids=tids, cpus=cpus, cgroup=leaf,
            version=cgroup_version, rng=rng, gpu_minor=gpu_minor, nodes=nodes,
            pages=per_node_pages,
        )  # fmt: skip
        generated.append(GeneratedWorkload(name, kind, cgroup, pid, tuple(tids), gpu_minor))
    return GeneratedTree(root, cgroup_version, tuple(generated))


def _write_process(
    proc: Path,
    pid: int,
    comm: str,
    *,
    ppid: int,
    tids: list[int],
    cpus: list[int],
    cgroup: str,
    version: int,
    rng: random.Random,
    gpu_minor: int | None,
    nodes: list[int],
    pages: dict[int, int] | None = None,
) -> None:
    base = proc / str(pid)
    starttime = rng.randrange(1_000, 1_000_000)
    total_utime = total_stime = 0
    for tid, cpu in zip(tids, cpus, strict=True):
        utime, stime = rng.randrange(0, 50_000), rng.randrange(0, 5_000)
        total_utime += utime
        total_stime += stime
        _write(
            base / "task" / str(tid) / "stat",
            stat_line(tid, comm, ppid=ppid, utime=utime, stime=stime,
                      starttime=starttime + (tid - pid), processor=cpu,
                      num_threads=len(tids)),
        )  # fmt: skip
    _write(
        base / "stat",
        stat_line(pid, comm, ppid=ppid, utime=total_utime, stime=total_stime,
                  starttime=starttime, processor=cpus[0], num_threads=len(tids)),
    )  # fmt: skip
    _write(base / "comm", comm + "\n")
    if version == 2:
        cgroup_text = f"0::{cgroup}\n"
    else:
        cgroup_text = "".join(
            f"{_V1_PROC_CGROUP_IDS[h]}:{'name=systemd' if h == 'systemd' else h}:{cgroup}\n"
            for h, _ in _V1_HIERARCHIES
        )
    _write(base / "cgroup", cgroup_text)
    _write(
        base / "status",
        f"Name:\t{comm}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\n"
        f"Threads:\t{len(tids)}\nCpus_allowed_list:\t0-{max(cpus)}\n"
        f"Mems_allowed_list:\t{nodes[0]}-{nodes[-1]}\n",
    )
    maps = []
    if pages:
        address = 0x7F0000000000
        for node, count in sorted(pages.items()):
            maps.append(
                f"{address:x} default anon={count} dirty={count} N{node}={count} "
                f"kernelpagesize_kB=4"
            )
            address += 0x10000000
    _write(base / "numa_maps", "\n".join(maps) + ("\n" if maps else ""))
    for fd in range(3):
        _symlink(base / "fd" / str(fd), "/dev/null")
    _symlink(base / "fd" / "3", f"socket:[{rng.randrange(10_000, 99_999)}]")
    if gpu_minor is not None:
        _symlink(base / "fd" / "4", "/dev/nvidiactl")
        _symlink(base / "fd" / "5", f"/dev/nvidia{gpu_minor}")


# -- helpers for the simulator's node trees ----------------------------------------------------


def mountinfo_text(cgroup_version: Literal[1, 2] = 2) -> str:
    """``/proc/self/mountinfo`` of a host with cgroups v2 (or the v1 hierarchies)."""
    return _mountinfo(cgroup_version)


def numa_stat_text(cgroup_version: Literal[1, 2], per_node_pages: dict[int, int]) -> str:
    """A cgroup's ``memory.numa_stat`` for the given resident pages per NUMA node."""
    return _numa_stat(cgroup_version, per_node_pages)


def write_topology_sysfs(
    root: Path, topology: Topology, *, cpu_dir: Path | None = None, pci_dir: Path | None = None
) -> None:
    """Write ``topology`` as a sysfs tree under ``root/sys`` that the sysfs builder reads back.

    CPUs (``devices/system/cpu``: ``online``, ``cpuN/topology/{physical_package_id,
    core_id}``), NUMA nodes (``devices/system/node``: ``online``, ``nodeN/{cpulist,
    distance, meminfo}``) and PCI functions (``bus/pci/devices/<bdf>/{vendor, device,
    class, numa_node, local_cpulist}``). When ``cpu_dir`` / ``pci_dir`` are given, those two
    directories are written there once and linked into ``root/sys`` (the simulator shares
    them between nodes of one template). ``meminfo`` starts with every byte free. A PCI
    bus id that would lead outside the PCI directory (``../x`` from an imported topology)
    raises :class:`~toposcope.sim.paths.UnsafePathError` before anything is written there.
    """
    sys = root / "sys"
    cpu_target = cpu_dir if cpu_dir is not None else sys / "devices/system/cpu"
    if not (cpu_target / "online").exists():
        online = [c.id for c in topology.cpus if c.online] or list(topology.cpu_to_node())
        _write(cpu_target / "online", format_cpulist(sorted(online)) + "\n")
        _write(cpu_target / "possible", format_cpulist(sorted(online)) + "\n")
        for cpu in topology.cpus:
            topo = cpu_target / f"cpu{cpu.id}" / "topology"
            _write(topo / "physical_package_id", f"{-1 if cpu.package is None else cpu.package}\n")
            _write(topo / "core_id", f"{cpu.core if cpu.core is not None else cpu.id}\n")
    if cpu_dir is not None:
        _symlink(sys / "devices/system/cpu", str(cpu_dir))
    pci_target = pci_dir if pci_dir is not None else sys / "bus/pci/devices"
    if not pci_target.exists():
        bases = [contained(pci_target, pci_target / d.bus_id) for d in topology.pci_devices]
        pci_target.mkdir(parents=True, exist_ok=True)
        for device, base in zip(topology.pci_devices, bases, strict=True):
            _write(base / "vendor", f"0x{device.vendor:04x}\n")
            _write(base / "device", f"0x{device.device:04x}\n")
            _write(base / "class", f"0x{device.class_id:04x}00\n")
            numa = -1 if device.numa_node is None else device.numa_node
            _write(base / "numa_node", f"{numa}\n")
            _write(base / "local_cpulist", format_cpulist(device.local_cpus) + "\n")
    if pci_dir is not None:
        _symlink(sys / "bus/pci/devices", str(pci_dir))
    node_base = sys / "devices/system/node"
    ids = [n.id for n in topology.numa_nodes]
    _write(node_base / "online", format_cpulist(ids) + "\n")
    _write(node_base / "possible", format_cpulist(ids) + "\n")
    for node in topology.numa_nodes:
        base = node_base / f"node{node.id}"
        _write(base / "cpulist", format_cpulist(node.cpus) + "\n")
        row = " ".join(str(node.distances.get(peer, 10 if peer == node.id else 20)) for peer in ids)
        _write(base / "distance", row + "\n")
        kib = node.memory_bytes // 1024
        _write(
            base / "meminfo",
            f"Node {node.id} MemTotal:       {kib} kB\nNode {node.id} MemFree:        {kib} kB\n"
            f"Node {node.id} MemUsed:        0 kB\n",
        )
