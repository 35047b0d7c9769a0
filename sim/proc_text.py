"""The text of the procfs and cgroup files in a generated host tree.

``/proc/PID/stat`` lines (:func:`stat_line`), ``/proc/self/mountinfo`` for a cgroup v2 or
v1 layout (:func:`mountinfo_text`) and a cgroup's ``memory.numa_stat``
(:func:`numa_stat_text`), in the kernel's formats, for the synthetic trees of
:mod:`toposcope.sim.fsgen` and the simulator's node trees.
"""

from __future__ import annotations

from typing import Literal

CLOCK_TICKS = 100
PAGE = 4096

#: the cgroup v1 hierarchies a generated tree mounts: (directory, mount options)
V1_HIERARCHIES = (
    ("cpuset", "cpuset"),
    ("cpu,cpuacct", "cpu,cpuacct"),
    ("memory", "memory"),
    ("pids", "pids"),
    ("systemd", "xattr,name=systemd"),
)


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


def mountinfo_text(version: Literal[1, 2] = 2) -> str:
    """``/proc/self/mountinfo`` of a host with cgroups v2 (or the v1 hierarchies)."""
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
        for i, (directory, options) in enumerate(V1_HIERARCHIES):
            lines.append(
                f"{30 + i} 25 0:{30 + i} / /sys/fs/cgroup/{directory} "
                f"rw,nosuid,nodev,noexec,relatime shared:{5 + i} - cgroup cgroup rw,{options}"
            )
    return "\n".join(lines) + "\n"


def numa_stat_text(version: Literal[1, 2], per_node_pages: dict[int, int]) -> str:
    """A cgroup's ``memory.numa_stat`` for the given resident pages per NUMA node."""
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
