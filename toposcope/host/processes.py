"""Readers of ``/proc/PID`` and ``/proc/PID/task/TID``: what processes and threads run where.

The workloads sampler walks every thread of every tracked process on each sample, so the
hot path is written for speed: paths are plain strings (no :class:`~pathlib.Path` objects),
files are read with one ``os.read`` into bytes, and ``stat`` lines are split, not matched
with regular expressions. Units become base units here, once: clock ticks become seconds,
``numa_maps`` pages become bytes.

The files' contents are parsed in :mod:`toposcope.host.proc_files`. A process
or thread can exit between listing and reading; every reader lets
:class:`FileNotFoundError` / :class:`ProcessLookupError` through as :data:`VANISHED` so that
callers skip that one entry silently. Equivalent commands: ``ps -L -o tid,psr,time``,
``numastat -p PID``, ``ls -l /proc/PID/fd``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from toposcope.host.proc_files import (
    CLOCK_TICKS,
    STAT_NUM_THREADS,
    STAT_PPID,
    STAT_PROCESSOR,
    STAT_STARTTIME,
    STAT_STIME,
    STAT_UTIME,
    ProcCgroup,
    TaskStat,
    parse_numa_maps,
    parse_nvidia_information,
    parse_proc_cgroup,
    parse_stat,
    parse_status,
)

#: Exceptions meaning "the process or thread is gone": skip it, never log it.
VANISHED: tuple[type[OSError], ...] = (FileNotFoundError, ProcessLookupError)

#: Base page size of the host, the unit of cgroup v1 ``memory.numa_stat``.
PAGE_SIZE: int = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

#: Most bytes of a process environment read: job variables are set early, and an
#: environment can be megabytes long.
ENVIRON_LIMIT = 64 * 1024

#: ``(tid, starttime ticks, cpu seconds, last CPU or -1)``: one thread, cheap to build.
ThreadSample = tuple[int, int, float, int]


class ProcessThreads(NamedTuple):
    """A process's threads as :meth:`ProcFs.threads` reads them, plus its parent and comm."""

    ppid: int
    comm: str
    samples: list[ThreadSample]


_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def read_small(path: str) -> bytes:
    """Read a one-record procfs file (``stat``, ``comm``) with a single ``read`` call."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        return os.read(fd, 8192)
    finally:
        os.close(fd)


def read_all(path: str, limit: int | None = None) -> bytes:
    """Read a file of any size, or its first ``limit`` bytes; procfs may return a seq_file
    in several chunks.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        chunks = []
        left = limit
        while left is None or left > 0:
            chunk = os.read(fd, 65536 if left is None else min(65536, left))
            if not chunk:
                break
            chunks.append(chunk)
            if left is not None:
                left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _sample(tid: int, fields: list[bytes], ticks: int) -> ThreadSample:
    """A thread sample from a ``stat`` line split after its ``comm``; raises on a short line."""
    return (
        tid,
        int(fields[STAT_STARTTIME]),
        (int(fields[STAT_UTIME]) + int(fields[STAT_STIME])) / ticks,
        int(fields[STAT_PROCESSOR]) if len(fields) > STAT_PROCESSOR else -1,
    )


def _is_pid(name: str) -> bool:
    return name.isdigit()


class ProcFs:
    """Per-process and per-thread readers over a procfs root (``--path.procfs``).

    Every method may raise one of :data:`VANISHED` when the process is gone; callers skip it.
    """

    def __init__(self, root: Path | str = "/proc", clock_ticks: int = CLOCK_TICKS) -> None:
        self.root = str(root)
        self.clock_ticks = clock_ticks

    def pids(self) -> list[int]:
        """Every process id listed at the procfs root (empty when the root does not exist)."""
        try:
            names = os.listdir(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(n) for n in names if _is_pid(n))

    def stat(self, pid: int) -> TaskStat:
        """``/proc/PID/stat``: the process as a whole (CPU time of all its threads)."""
        return parse_stat(read_small(f"{self.root}/{pid}/stat"), self.clock_ticks)

    def tasks(self, pid: int) -> Iterator[TaskStat]:
        """``/proc/PID/task/*/stat`` for every thread still alive; vanished threads are skipped.

        Raises one of :data:`VANISHED` only when the whole process is gone.
        """
        base = f"{self.root}/{pid}/task/"
        names = os.listdir(base)
        ticks = self.clock_ticks
        for name in names:
            try:
                data = read_small(base + name + "/stat")
            except VANISHED:
                continue
            try:
                yield parse_stat(data, ticks)
            except ValueError:
                continue

    def threads(self, pid: int) -> ProcessThreads:
        """Every live thread of ``pid`` as ``(tid, starttime, cpu_seconds, processor)``.

        The sampler's hot path, no objects per thread beyond a tuple: ``/proc/PID/stat``
        first, which is the whole answer for a single-threaded process (its ``num_threads``
        is 1); otherwise one ``listdir`` of ``task/`` and one read per thread. ``processor``
        is -1 when the kernel does not report it. Raises one of :data:`VANISHED` only when
        the whole process is gone.
        """
        data = read_small(f"{self.root}/{pid}/stat")
        close = data.rfind(b")")
        fields = data[close + 2 :].split(None, STAT_PROCESSOR + 1)
        try:
            ppid = int(fields[STAT_PPID])
            single = int(fields[STAT_NUM_THREADS]) == 1
            own = _sample(pid, fields, self.clock_ticks)
        except (IndexError, ValueError):
            return ProcessThreads(-1, "", [])
        comm = data[data.find(b"(") + 1 : close].decode("utf-8", "replace")
        if single:
            return ProcessThreads(ppid, comm, [own])
        return ProcessThreads(ppid, comm, self._task_samples(pid))

    def _task_samples(self, pid: int) -> list[ThreadSample]:
        """One sample per ``/proc/PID/task/TID/stat``; threads that exit meanwhile are skipped."""
        base = f"{self.root}/{pid}/task/"
        names = os.listdir(base)
        ticks = self.clock_ticks
        samples: list[ThreadSample] = []
        for name in names:
            try:
                fd = os.open(base + name + "/stat", _OPEN_FLAGS)
            except VANISHED:
                continue
            try:
                data = os.read(fd, 8192)
            except VANISHED:
                continue
            finally:
                os.close(fd)
            fields = data[data.rfind(b")") + 2 :].split(None, STAT_PROCESSOR + 1)
            try:
                samples.append(_sample(int(name), fields, ticks))
            except (IndexError, ValueError):
                continue
        return samples

    def comm(self, pid: int) -> str:
        """``/proc/PID/comm``: the command name (at most 15 bytes, may contain spaces)."""
        return read_small(f"{self.root}/{pid}/comm").decode("utf-8", "replace").rstrip("\n")

    def cgroups(self, pid: int) -> list[ProcCgroup]:
        """``/proc/PID/cgroup``: the process's cgroup path in every hierarchy."""
        return parse_proc_cgroup(read_all(f"{self.root}/{pid}/cgroup").decode("utf-8", "replace"))

    def status(self, pid: int) -> dict[str, str]:
        """``/proc/PID/status`` as ``{key: value}`` (``Cpus_allowed_list``, ``Uid``, ...)."""
        return parse_status(read_all(f"{self.root}/{pid}/status").decode("utf-8", "replace"))

    def environ(self, pid: int, limit: int = ENVIRON_LIMIT) -> bytes:
        """The first ``limit`` bytes of ``/proc/PID/environ`` (NUL-separated ``KEY=value``).

        Raises :class:`PermissionError` for another user's process without CAP_SYS_PTRACE:
        callers treat that as normal, never as an error.
        """
        return read_all(f"{self.root}/{pid}/environ", limit)

    def numa_maps(self, pid: int) -> dict[int, int]:
        """Resident bytes per NUMA node from ``/proc/PID/numa_maps`` (``numastat -p PID``).

        Costly for large processes: the kernel walks the page tables under the mmap lock.
        Raises :class:`PermissionError` for another user's process without CAP_SYS_PTRACE.
        """
        return parse_numa_maps(read_all(f"{self.root}/{pid}/numa_maps").decode("ascii", "replace"))

    def fd_targets(self, pid: int) -> list[str]:
        """Targets of ``/proc/PID/fd/*`` that are absolute paths (``/dev/nvidia1``, files).

        Sockets, pipes and anonymous inodes (``socket:[123]``) are left out. Raises
        :class:`PermissionError` for another user's process when not privileged; a
        descriptor closed while listing is skipped.
        """
        base = f"{self.root}/{pid}/fd/"
        targets: list[str] = []
        for name in os.listdir(base):
            try:
                target = os.readlink(base + name)
            except VANISHED:
                continue
            if target[:1] == "/":
                targets.append(target)
        return targets

    def nvidia_minors(self) -> dict[int, str]:
        """``/dev/nvidiaN`` minor number -> PCI bus id, from ``/proc/driver/nvidia/gpus``.

        Empty when the NVIDIA driver is not loaded; bus ids are lower case
        (``0000:3b:00.0``), as in sysfs.
        """
        base = Path(self.root) / "driver" / "nvidia" / "gpus"
        minors: dict[int, str] = {}
        try:
            entries = list(base.iterdir())
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return minors
        for entry in entries:
            try:
                text = (entry / "information").read_text(encoding="utf-8", errors="replace")
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            minor = parse_nvidia_information(text)
            if minor is not None:
                minors[minor] = entry.name.lower()
        return minors


def gpu_minors(targets: list[str], pattern: re.Pattern[str]) -> set[int]:
    """Device minors of descriptor targets matching ``pattern`` (group 1 = the number)."""
    found: set[int] = set()
    for target in targets:
        match = pattern.match(target)
        if match:
            try:
                found.add(int(match.group(1)))
            except (IndexError, ValueError):
                continue
    return found


@dataclass(frozen=True)
class ProcessTree:
    """A top-level process and every descendant (process mode's workload)."""

    root: int
    comm: str
    pids: tuple[int, ...]


def process_trees(proc: ProcFs, init_pid: int = 1) -> list[ProcessTree]:
    """Group user-space processes into trees rooted at the children of ``init_pid``.

    Reads ``/proc/PID/stat`` once per process. Kernel threads and ``init_pid`` itself belong
    to no tree; a process whose parent vanished mid-scan starts its own tree.
    """
    stats: dict[int, TaskStat] = {}
    for pid in proc.pids():
        try:
            stat = proc.stat(pid)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if stat.kernel_thread or pid == init_pid:
            continue
        stats[pid] = stat
    children: dict[int, list[int]] = {}
    roots: list[int] = []
    for pid, stat in stats.items():
        if stat.ppid in stats:
            children.setdefault(stat.ppid, []).append(pid)
        elif stat.ppid != 2:  # children of kthreadd are kernel threads
            roots.append(pid)
    trees: list[ProcessTree] = []
    for root in sorted(roots):
        trees.append(ProcessTree(root, stats[root].comm, tuple(process_tree(children, root))))
    return trees


def process_tree(children: Mapping[int, Iterable[int]], root: int) -> list[int]:
    """``root`` and every descendant in ``children`` (parent pid -> children's pids), sorted."""
    members: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        members.append(pid)
        stack.extend(children.get(pid, ()))
    return sorted(members)
