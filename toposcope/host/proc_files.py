"""Parsers of the per-process files under ``/proc``: ``stat``, ``numa_maps``, ``status``,
``cgroup``, and the NVIDIA driver's ``/proc/driver/nvidia/gpus/*/information``.

They take what was read (bytes or text) and return values in base units: clock ticks
become seconds, ``numa_maps`` pages become bytes. ``stat`` is split, not matched with
regular expressions (it is parsed for every thread on every scrape); lines of the other
files that do not parse are skipped, as the kernel's own tools do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: ``PF_KTHREAD`` in the ``flags`` field of ``stat``: the task is a kernel thread.
PF_KTHREAD = 0x00200000

#: The kernel's ``USER_HZ``, the unit of utime/stime in ``stat`` (100 on every Linux ABI).
CLOCK_TICKS: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# Index of a 1-based stat field in the list split after the closing ")" of comm:
# field 3 (state) is index 0, so field N is index N - 3.
STAT_PPID = 4 - 3
STAT_FLAGS = 9 - 3
STAT_UTIME = 14 - 3
STAT_STIME = 15 - 3
STAT_NUM_THREADS = 20 - 3
STAT_STARTTIME = 22 - 3
STAT_PROCESSOR = 39 - 3


@dataclass(frozen=True, slots=True)
class TaskStat:
    """One line of ``/proc/PID/stat`` or ``/proc/PID/task/TID/stat``, in base units.

    ``cpu_seconds`` is utime + stime (fields 14 and 15) in seconds; ``starttime`` (field 22,
    in clock ticks since boot) tells a reused pid from the old one; ``processor`` (field 39)
    is the CPU the task last ran on, ``None`` on kernels that do not report it.
    """

    pid: int
    comm: str
    state: str
    ppid: int
    flags: int
    cpu_seconds: float
    starttime: int
    processor: int | None

    @property
    def kernel_thread(self) -> bool:
        """True for kernel threads (``PF_KTHREAD``), which no workload owns."""
        return bool(self.flags & PF_KTHREAD)


def parse_stat(data: bytes, clock_ticks: int = CLOCK_TICKS) -> TaskStat:
    """Parse a ``stat`` line (bytes, as read) into a :class:`TaskStat`.

    ``comm`` may hold spaces and parentheses (``"(a) b)"``), so it is everything between the
    first ``(`` and the *last* ``)``. Raises ``ValueError`` on a line without that shape.
    """
    open_paren = data.find(b"(")
    close_paren = data.rfind(b")")
    if open_paren < 0 or close_paren < open_paren:
        raise ValueError(f"malformed stat line {data[:80]!r}")
    rest = data[close_paren + 2 :].split()
    if len(rest) <= STAT_STARTTIME:
        raise ValueError(f"stat line has only {len(rest) + 2} fields")
    processor = int(rest[STAT_PROCESSOR]) if len(rest) > STAT_PROCESSOR else None
    return TaskStat(
        pid=int(data[:open_paren]),
        comm=data[open_paren + 1 : close_paren].decode("utf-8", "replace"),
        state=rest[0].decode("ascii", "replace"),
        ppid=int(rest[STAT_PPID]),
        flags=int(rest[STAT_FLAGS]),
        cpu_seconds=(int(rest[STAT_UTIME]) + int(rest[STAT_STIME])) / clock_ticks,
        starttime=int(rest[STAT_STARTTIME]),
        processor=processor,
    )


def parse_numa_maps(text: str) -> dict[int, int]:
    """Sum ``/proc/PID/numa_maps`` into bytes per NUMA node.

    Each mapping line carries ``N<node>=<pages>`` items and ``kernelpagesize_kB=<size>``
    (4 for base pages, 2048 for huge pages); a line without the page size uses 4 kB. Lines
    or items that do not parse are skipped, as ``numastat -p`` does. Same figures as
    ``numastat -p PID``, in bytes.
    """
    nodes: dict[int, int] = {}
    for line in text.splitlines():
        page_kb = 4
        counts: list[tuple[int, int]] = []
        for item in line.split():
            if item[0] == "N":
                key, sep, value = item.partition("=")
                if not sep:
                    continue
                try:
                    counts.append((int(key[1:]), int(value)))
                except ValueError:
                    continue
            elif item.startswith("kernelpagesize_kB="):
                try:
                    page_kb = int(item[18:])
                except ValueError:
                    counts = []
                    break
        for node, pages in counts:
            if node >= 0 and pages >= 0:
                nodes[node] = nodes.get(node, 0) + pages * page_kb * 1024
    return nodes


def parse_status(text: str) -> dict[str, str]:
    """Parse ``/proc/PID/status`` (``Key:\\tvalue`` lines) into a dict of stripped strings."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key] = value.strip()
    return values


@dataclass(frozen=True)
class ProcCgroup:
    """One line of ``/proc/PID/cgroup``: hierarchy id, its controllers, and the cgroup path.

    cgroup v2 is hierarchy ``0`` with no controllers; v1 named hierarchies show as
    ``name=systemd``.
    """

    hierarchy: int
    controllers: tuple[str, ...]
    path: str


def parse_proc_cgroup(text: str) -> list[ProcCgroup]:
    """Parse ``/proc/PID/cgroup`` (``id:controllers:path``); malformed lines are skipped."""
    entries: list[ProcCgroup] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        try:
            hierarchy = int(parts[0])
        except ValueError:
            continue
        controllers = tuple(c for c in parts[1].split(",") if c)
        entries.append(ProcCgroup(hierarchy, controllers, parts[2]))
    return entries


def parse_nvidia_information(text: str) -> int | None:
    """The ``Device Minor`` of ``/proc/driver/nvidia/gpus/<bus id>/information``, if present."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Device Minor":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None
