"""This host as the agent reads it: online CPUs, memory nodes, processes, threads, cgroup dirs.

Everything is read under the agent's roots (``--path.sysfs``, ``--path.procfs``,
``--path.rootfs``) with the exporter's sources; the pids and thread ids found there are the
ones the agent changes, so it must share the host's PID namespace.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from toposcope.config import HostPaths
from toposcope.cpulist import parse_cpulist
from toposcope.errors import SourceError
from toposcope.host.cgroups import Cgroups, parse_cgroup_procs
from toposcope.host.processes import VANISHED, ProcFs, read_all
from toposcope.topology.sysfs import online_cpus, online_nodes, read_text

#: a process gone, or its stat line unreadable (it was exiting)
GONE_OR_GARBLED: tuple[type[Exception], ...] = (*VANISHED, ValueError)
#: a process gone, or another user's process we may not read
GONE_OR_DENIED: tuple[type[Exception], ...] = (*VANISHED, PermissionError)
#: a directory of /proc that vanished or was never one
NO_DIRECTORY: tuple[type[Exception], ...] = (*VANISHED, NotADirectoryError)
#: a cgroup file that vanished, or one we may not read
UNREADABLE_CGROUP: tuple[type[Exception], ...] = (
    FileNotFoundError,
    NotADirectoryError,
    PermissionError,
)


class Host:
    """Reads this host under ``paths`` (see the module docstring)."""

    def __init__(self, paths: HostPaths) -> None:
        self.paths = paths
        self.proc = ProcFs(paths.procfs)
        self.cgroups = Cgroups(paths)

    def online_cpus(self) -> frozenset[int]:
        """CPUs the kernel lists as online (every CPU Python sees when sysfs has no list)."""
        try:
            cpus = online_cpus(self.paths.sysfs)
        except SourceError:
            cpus = None
        return frozenset(cpus) if cpus else frozenset(range(os.cpu_count() or 1))

    def memory_nodes(self) -> frozenset[int]:
        """NUMA nodes with memory (``node/has_memory``, else ``node/online``, else node 0)."""
        text = read_text(self.paths.sysfs / "devices" / "system" / "node" / "has_memory")
        if text is not None:
            try:
                found = parse_cpulist(text)
            except ValueError:
                found = ()
            if found:
                return frozenset(found)
        try:
            nodes = online_nodes(self.paths.sysfs)
        except SourceError:
            nodes = None
        return frozenset(nodes) if nodes else frozenset({0})

    def alive(self, pid: int) -> bool:
        """Whether process ``pid`` still exists."""
        return os.path.exists(f"{self.proc.root}/{pid}/task")

    def tids(self, pid: int) -> list[int]:
        """The thread ids of process ``pid`` (empty once it is gone)."""
        try:
            return sorted(int(t) for t in os.listdir(f"{self.proc.root}/{pid}/task") if t.isdigit())
        except NO_DIRECTORY:
            return []

    def starttime(self, pid: int) -> int:
        """When ``pid`` started (clock ticks since boot), ``-1`` once it is gone.

        A pid and its start time name one process for good (pids are reused).
        """
        try:
            return self.proc.stat(pid).starttime
        except GONE_OR_GARBLED:
            return -1

    def mems_allowed(self, pid: int) -> list[int]:
        """The NUMA nodes process ``pid`` may allocate on (``Mems_allowed_list``)."""
        text = self.proc.status(pid).get("Mems_allowed_list", "")
        try:
            return list(parse_cpulist(text))
        except ValueError:
            return []

    def resident_nodes(self, pids: Sequence[int]) -> list[int]:
        """NUMA nodes holding pages of any of ``pids`` (``numa_maps``)."""
        nodes: set[int] = set()
        for pid in pids:
            try:
                nodes.update(n for n, size in self.proc.numa_maps(pid).items() if size > 0)
            except GONE_OR_DENIED:
                continue
        return sorted(nodes)

    def affinities(self, pids: Iterable[int]) -> dict[int, frozenset[int]]:
        """Every thread's CPU affinity, by thread id."""
        masks: dict[int, frozenset[int]] = {}
        for pid in pids:
            for tid in self.tids(pid):
                try:
                    masks[tid] = frozenset(os.sched_getaffinity(tid))
                except VANISHED:
                    continue
        return masks

    def children_map(self) -> dict[int, list[int]]:
        """Parent pid -> its children's pids, kernel threads left out."""
        children: dict[int, list[int]] = {}
        for pid in self.proc.pids():
            try:
                stat = self.proc.stat(pid)
            except GONE_OR_GARBLED:
                continue
            if stat.kernel_thread:
                continue
            children.setdefault(stat.ppid, []).append(pid)
        return children


def read_file(path: str) -> str:
    """A cgroup file's text, ``""`` when it does not exist."""
    try:
        return read_all(path).decode("ascii", "replace")
    except (FileNotFoundError, NotADirectoryError):
        return ""


def subtree(directory: str) -> list[str]:
    """``directory`` and every cgroup below it, parents before children."""
    found = [directory]
    index = 0
    while index < len(found):
        try:
            entries = sorted(os.scandir(found[index]), key=lambda e: e.name)
        except UNREADABLE_CGROUP:
            entries = []
        found.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        index += 1
    return found


def procs_below(directory: str) -> list[int]:
    """The processes of cgroup directory ``directory`` and of every cgroup below it."""
    pids: list[int] = []
    for path in subtree(directory):
        try:
            pids.extend(parse_cgroup_procs(read_all(f"{path}/cgroup.procs")))
        except UNREADABLE_CGROUP:
            continue
    return pids
