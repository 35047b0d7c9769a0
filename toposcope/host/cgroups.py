"""Readers of the cgroup filesystems: mounts, hierarchies, processes, NUMA stats, cpusets.

Mounts are found in ``<procfs>/1/mountinfo`` (else ``self``; never at a fixed path) and
resolved under ``--path.rootfs``, so the same code reads a host's ``/sys/fs/cgroup`` (v2
unified), a v1 layout (``/sys/fs/cgroup/memory``, ``/sys/fs/cgroup/cpu,cpuacct`` ...) or a
hybrid one (v1 controllers plus an empty v2 hierarchy at ``/sys/fs/cgroup/unified``), and
fixture trees.

Cgroup *paths* are the kernel's names (``/kubepods.slice/...``, as in ``/proc/PID/cgroup``),
independent of where the hierarchy is mounted; which workload a path stands for is decided
in :mod:`toposcope.host.workload_identity`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toposcope.config import HostPaths
from toposcope.cpulist import parse_cpulist
from toposcope.host.processes import PAGE_SIZE, read_all

#: cgroup v1 controllers; other super options of a ``cgroup`` mount are mount flags.
V1_CONTROLLERS = frozenset(
    {
        "cpuset",
        "cpu",
        "cpuacct",
        "blkio",
        "io",
        "memory",
        "devices",
        "freezer",
        "net_cls",
        "net_prio",
        "perf_event",
        "hugetlb",
        "pids",
        "rdma",
        "misc",
    }
)

#: Which v1 hierarchy lists a host's workloads, best first. ``memory`` first because
#: ``memory.numa_stat`` then sits at the same path; systemd's own named hierarchy last
#: because Slurm and some runtimes do not create their cgroups there.
V1_WALK_PREFERENCE = ("memory", "cpuacct", "cpu", "cpuset", "pids", "name=systemd")

#: Lines of cgroup v2 ``memory.numa_stat`` summed into a workload's memory per node:
#: anonymous memory and page cache (which includes tmpfs and shmem in v2).
V2_NUMA_STAT_KEYS = ("anon", "file")


def _unescape(field: str) -> str:
    """Undo mountinfo's octal escapes (``\\040`` is a space)."""
    if "\\" not in field:
        return field
    out: list[str] = []
    i = 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class CgroupMount:
    """A cgroup filesystem mount from mountinfo.

    ``version`` is 1 or 2; ``controllers`` are the v1 controllers (and ``name=...`` for a
    named hierarchy), empty for v2; ``root`` is the cgroup path the mount shows (``/``
    outside a cgroup namespace); ``mount_point`` is the absolute path on the host.
    """

    version: int
    controllers: frozenset[str]
    root: str
    mount_point: str


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup and cgroup2 mounts of a ``/proc/PID/mountinfo`` text, in file order.

    Format (proc(5)): ``id parent maj:min root mount_point options [optional...] - fstype
    source super_options``. Lines of other filesystems and malformed lines are skipped.
    """
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        if " - cgroup" not in line:
            continue
        head, _, tail = line.partition(" - ")
        fields = head.split()
        tail_fields = tail.split()
        if len(fields) < 5 or len(tail_fields) < 1:
            continue
        fstype = tail_fields[0]
        root, mount_point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            mounts.append(CgroupMount(2, frozenset(), root, mount_point))
        elif fstype == "cgroup":
            options = tail_fields[2].split(",") if len(tail_fields) > 2 else []
            controllers = frozenset(
                o for o in options if o in V1_CONTROLLERS or o.startswith("name=")
            )
            if controllers:
                mounts.append(CgroupMount(1, controllers, root, mount_point))
    return mounts


@dataclass(frozen=True)
class Hierarchy:
    """A mounted cgroup hierarchy with its mount point resolved under the rootfs."""

    mount: CgroupMount
    directory: Path

    @property
    def version(self) -> int:
        """1 or 2."""
        return self.mount.version

    def dir_of(self, cgroup: str) -> str | None:
        """The directory of cgroup path ``cgroup`` in this mount; ``None`` if outside it."""
        root = self.mount.root.rstrip("/")
        if root and not (cgroup == root or cgroup.startswith(root + "/")):
            return None
        relative = cgroup[len(root) :].strip("/")
        base = str(self.directory)
        return f"{base}/{relative}" if relative else base

    def cgroup_of(self, relative: str) -> str:
        """The cgroup path of a directory given relative to the mount point."""
        root = self.mount.root.rstrip("/")
        return f"{root}/{relative}" if relative else (root or "/")


@dataclass(frozen=True)
class CgroupLayout:
    """The host's cgroup hierarchies: the v2 unified one and the v1 ones, either may be absent."""

    unified: Hierarchy | None
    v1: tuple[Hierarchy, ...]

    @property
    def mode(self) -> str:
        """``v2``, ``v1``, ``hybrid`` (v1 controllers plus a v2 hierarchy) or ``none``."""
        has_v1 = any(not _named_only(h) for h in self.v1)
        if self.unified is not None:
            return "hybrid" if has_v1 else "v2"
        return "v1" if self.v1 else "none"

    def controller(self, name: str) -> Hierarchy | None:
        """The hierarchy holding controller ``name`` (a v1 one, else the unified one)."""
        for hierarchy in self.v1:
            if name in hierarchy.mount.controllers:
                return hierarchy
        return self.unified

    def walk_hierarchy(self) -> Hierarchy | None:
        """The hierarchy whose cgroup tree lists the workloads.

        v2 when no v1 controller is mounted; otherwise the first v1 hierarchy of
        :data:`V1_WALK_PREFERENCE` (in hybrid mode the controllers, and the containers'
        cgroups, live on v1).
        """
        if self.mode == "v2" or not self.v1:
            return self.unified
        for name in V1_WALK_PREFERENCE:
            for hierarchy in self.v1:
                if name in hierarchy.mount.controllers:
                    return hierarchy
        return self.v1[0]


def _named_only(hierarchy: Hierarchy) -> bool:
    return all(c.startswith("name=") for c in hierarchy.mount.controllers)


def layout_from_mounts(mounts: list[CgroupMount], paths: HostPaths) -> CgroupLayout:
    """Pick one mount per hierarchy (the first, preferring one showing the root cgroup)."""
    unified: CgroupMount | None = None
    v1: dict[frozenset[str], CgroupMount] = {}
    for mount in mounts:
        if mount.version == 2:
            if unified is None or (unified.root != "/" and mount.root == "/"):
                unified = mount
        else:
            known = v1.get(mount.controllers)
            if known is None or (known.root != "/" and mount.root == "/"):
                v1[mount.controllers] = mount
    return CgroupLayout(
        unified=Hierarchy(unified, paths.in_rootfs(unified.mount_point)) if unified else None,
        v1=tuple(Hierarchy(m, paths.in_rootfs(m.mount_point)) for m in v1.values()),
    )


def parse_numa_stat(text: str, page_size: int = PAGE_SIZE) -> dict[int, int]:
    """Bytes per NUMA node from a cgroup's ``memory.numa_stat``, v1 or v2 (the text tells).

    * v2: ``anon N0=<bytes> N1=<bytes>`` lines; :data:`V2_NUMA_STAT_KEYS` are summed.
    * v1: ``total=<pages> N0=<pages> ...`` lines in pages; ``hierarchical_total`` (this
      cgroup and its descendants) is used when present, else ``total``; pages times
      ``page_size`` give bytes.

    Malformed items are skipped.
    """
    v1_lines: dict[str, dict[int, int]] = {}
    v2_total: dict[int, int] = {}
    v2_seen = False
    for line in text.splitlines():
        items = line.split()
        if not items:
            continue
        head = items[0]
        if "=" in head:
            key = head.partition("=")[0]
            if key in ("total", "hierarchical_total"):
                v1_lines[key] = _node_items(items[1:])
        elif head in V2_NUMA_STAT_KEYS:
            v2_seen = True
            for node, value in _node_items(items[1:]).items():
                v2_total[node] = v2_total.get(node, 0) + value
    if v2_seen:
        return v2_total
    pages = v1_lines.get("hierarchical_total", v1_lines.get("total", {}))
    return {node: count * page_size for node, count in pages.items()}


def _node_items(items: list[str]) -> dict[int, int]:
    values: dict[int, int] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key[:1] != "N":
            continue
        try:
            values[int(key[1:])] = int(value)
        except ValueError:
            continue
    return values


def parse_cgroup_procs(data: bytes) -> list[int]:
    """Process ids of a ``cgroup.procs`` file (one per line); junk lines are skipped."""
    pids: list[int] = []
    for word in data.split():
        if word.isdigit():
            pids.append(int(word))
    return pids


@dataclass(frozen=True)
class CpuSet:
    """Effective CPUs and memory nodes a cgroup may use (``cpuset.*.effective``)."""

    cpus: tuple[int, ...]
    mems: tuple[int, ...]


class Cgroups:
    """Reads the host's cgroup hierarchies (found through ``<procfs>/1/mountinfo``).

    PID 1's mount table is the host's view; in a container with the host's procfs mounted
    (the Kubernetes DaemonSet), ``self`` would be the container's own mounts. ``self`` is the
    fallback when PID 1's table cannot be read (no permission, or a snapshot without it).
    """

    def __init__(self, paths: HostPaths, page_size: int = PAGE_SIZE) -> None:
        self.paths = paths
        self.page_size = page_size

    def layout(self) -> CgroupLayout:
        """The current mounts; an empty layout when no mountinfo can be read."""
        for owner in ("1", "self"):
            try:
                text = read_all(str(self.paths.procfs / owner / "mountinfo"))
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            mounts = parse_mountinfo(text.decode("utf-8", "replace"))
            return layout_from_mounts(mounts, self.paths)
        return CgroupLayout(None, ())

    def procs(
        self, hierarchy: Hierarchy, keep: Callable[[str], bool] | None = None
    ) -> Iterator[tuple[str, list[int]]]:
        """``(cgroup path, pids)`` for every cgroup of ``hierarchy`` that holds processes.

        ``keep(path)`` is asked before a cgroup's ``cgroup.procs`` is read, so excluded
        cgroups cost no read; their children are still visited. A cgroup removed while
        walking is skipped.
        """
        stack: list[tuple[str, str]] = [(str(hierarchy.directory), "")]
        while stack:
            directory, relative = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            subdirs: list[tuple[str, str]] = []
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    child = f"{relative}/{entry.name}" if relative else entry.name
                    subdirs.append((entry.path, child))
            stack.extend(reversed(sorted(subdirs)))
            cgroup = hierarchy.cgroup_of(relative)
            if keep is not None and not keep(cgroup):
                continue
            try:
                data = read_all(directory + "/cgroup.procs")
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            pids = parse_cgroup_procs(data)
            if pids:
                yield cgroup, pids

    def numa_stat(self, cgroup: str, layout: CgroupLayout) -> dict[int, int] | None:
        """Bytes per NUMA node of a cgroup (``memory.numa_stat``); ``None`` when unavailable."""
        hierarchy = layout.controller("memory")
        directory = hierarchy.dir_of(cgroup) if hierarchy is not None else None
        if directory is None:
            return None
        try:
            data = read_all(directory + "/memory.numa_stat")
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return None
        return parse_numa_stat(data.decode("ascii", "replace"), self.page_size)

    def cpuset(self, cgroup: str, layout: CgroupLayout) -> CpuSet | None:
        """Effective cpuset of a cgroup: v2 ``cpuset.{cpus,mems}.effective``, v1
        ``cpuset.effective_{cpus,mems}`` (else ``cpuset.{cpus,mems}``); ``None`` when absent.
        """
        hierarchy = layout.controller("cpuset")
        directory = hierarchy.dir_of(cgroup) if hierarchy is not None else None
        if directory is None:
            return None
        names = (
            [("cpuset.cpus.effective", "cpuset.mems.effective")]
            if hierarchy is not None and hierarchy.version == 2
            else [
                ("cpuset.effective_cpus", "cpuset.effective_mems"),
                ("cpuset.cpus", "cpuset.mems"),
            ]
        )
        for cpus_name, mems_name in names:
            try:
                cpus = read_all(f"{directory}/{cpus_name}").decode("ascii", "replace")
                mems = read_all(f"{directory}/{mems_name}").decode("ascii", "replace")
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            try:
                return CpuSet(parse_cpulist(cpus), parse_cpulist(mems))
            except ValueError:
                continue  # a malformed pair counts as absent, as a missing one does
        return None
