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
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from toposcope.sim.paths import contained
from toposcope.sim.proc_text import (
    V1_HIERARCHIES,
    mountinfo_text,
    numa_stat_text,
    stat_line,
)
from toposcope.sim.sysfs_writer import (
    copy_topology,
    symlink,
    write_file,
    write_synthetic_topology,
    write_topology_sysfs,
)
from toposcope.topology.sysfs import build_from_sysfs

#: ``write_topology_sysfs`` is re-exported for the tests that write a topology with a tree.
__all__ = [
    "GeneratedTree",
    "GeneratedWorkload",
    "write_synthetic_topology",
    "write_topology_sysfs",
    "write_workload_tree",
]


_KINDS = ("kubernetes",) * 6 + ("docker",) * 2 + ("systemd",) * 1 + ("slurm",) * 1
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
        write_file(procs, "")
    for part in [p for p in cgroup.split("/") if p]:
        directory = directory / part
        procs = directory / "cgroup.procs"
        if not procs.exists():
            write_file(procs, "")
    return directory


def _add_procs(directory: Path, pids: list[int]) -> None:
    procs = directory / "cgroup.procs"
    existing = procs.read_text(encoding="utf-8") if procs.exists() else ""
    write_file(procs, existing + "".join(f"{pid}\n" for pid in pids))


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
        copy_topology(Path(topology_root), root)
    elif not (root / "sys").is_dir():
        write_synthetic_topology(root)
    topo = build_from_sysfs(root / "sys", root / "proc")
    node_cpus = {n.id: list(n.cpus) for n in topo.numa_nodes if n.cpus}
    all_cpus = sorted(c for cpus in node_cpus.values() for c in cpus)
    nodes = sorted(node_cpus) or [0]
    gpus = [g.index for g in topo.gpus]
    proc = root / "proc"

    write_file(proc / "stat", _proc_stat(all_cpus or [0], rng))
    write_file(proc / "self" / "mountinfo", mountinfo_text(cgroup_version))

    hierarchies: list[str | None] = (
        [None] if cgroup_version == 2 else [h for h, _ in V1_HIERARCHIES]
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
                stat = numa_stat_text(cgroup_version, per_node_pages)
                write_file(leaf_dir / "memory.numa_stat", stat)
                write_file(_ensure_cgroup(base, cgroup) / "memory.numa_stat", stat)
            if hierarchy in (None, "cpuset"):
                first, last = min(all_cpus or [0]), max(all_cpus or [0])
                names = (
                    ("cpuset.cpus.effective", "cpuset.mems.effective")
                    if cgroup_version == 2
                    else ("cpuset.effective_cpus", "cpuset.effective_mems")
                )
                write_file(leaf_dir / names[0], f"{first}-{last}\n")
                write_file(leaf_dir / names[1], f"{nodes[0]}-{nodes[-1]}\n")
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
        write_file(
            base / "task" / str(tid) / "stat",
            stat_line(tid, comm, ppid=ppid, utime=utime, stime=stime,
                      starttime=starttime + (tid - pid), processor=cpu,
                      num_threads=len(tids)),
        )  # fmt: skip
    write_file(
        base / "stat",
        stat_line(pid, comm, ppid=ppid, utime=total_utime, stime=total_stime,
                  starttime=starttime, processor=cpus[0], num_threads=len(tids)),
    )  # fmt: skip
    write_file(base / "comm", comm + "\n")
    if version == 2:
        cgroup_text = f"0::{cgroup}\n"
    else:
        cgroup_text = "".join(
            f"{_V1_PROC_CGROUP_IDS[h]}:{'name=systemd' if h == 'systemd' else h}:{cgroup}\n"
            for h, _ in V1_HIERARCHIES
        )
    write_file(base / "cgroup", cgroup_text)
    write_file(
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
    write_file(base / "numa_maps", "\n".join(maps) + ("\n" if maps else ""))
    for fd in range(3):
        symlink(base / "fd" / str(fd), "/dev/null")
    symlink(base / "fd" / "3", f"socket:[{rng.randrange(10_000, 99_999)}]")
    if gpu_minor is not None:
        symlink(base / "fd" / "4", "/dev/nvidiactl")
        symlink(base / "fd" / "5", f"/dev/nvidia{gpu_minor}")
