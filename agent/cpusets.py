"""The cpuset cgroup a pin writes, and writing it so that a child always fits its parent.

Only a cgroup workload whose processes all live in one cgroup other than the root, with
nothing else in it or below it, and whose ``cpuset.cpus`` is writable, gets its cpuset
written (v2: that cgroup; v1: it and its descendants). Everything else is pinned through
thread affinity alone. Whether the workload's owner lets the agent write it at all is
decided before (:mod:`toposcope.agent.ownership`).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from toposcope.agent.changes import Changes
from toposcope.agent.host import GONE_OR_DENIED, Host, procs_below, read_file, subtree
from toposcope.agent.targets import Target
from toposcope.cpulist import format_cpulist, parse_cpulist
from toposcope.host.cgroups import Hierarchy
from toposcope.rm import ResourceManagerError

LOG = logging.getLogger("toposcope.agent.local")

#: the cpuset files a pin writes, in each directory of a plan
FILES = ("cpus", "mems")


@dataclass(frozen=True)
class CpusetPlan:
    """The cpuset directories a pin writes (the workload's cgroup first, then descendants)."""

    version: int
    dirs: tuple[str, ...]

    def paths(self) -> list[str]:
        """Every file the plan may write, parents first."""
        return [f"{d}/cpuset.{n}" for d in self.dirs for n in FILES]

    def snapshot(self) -> dict[str, str]:
        """The text of every file of the plan now (what a revert writes back)."""
        return {path: read_file(path) for path in self.paths()}

    def mems(self) -> list[int]:
        """The memory nodes the workload's own cpuset holds now."""
        return list(parse_cpulist(read_file(f"{self.dirs[0]}/cpuset.mems")))

    def wanted(self, cpus: Iterable[int], mems: Iterable[int]) -> dict[str, str]:
        """The files' new text for ``cpus`` (and ``mems`` when not empty) in every directory."""
        wanted = {f"{d}/cpuset.cpus": format_cpulist(cpus) for d in self.dirs}
        nodes = sorted(set(mems))
        if nodes:
            wanted.update({f"{d}/cpuset.mems": format_cpulist(nodes) for d in self.dirs})
        return wanted


def holds_cpuset(hierarchy_id: int, controllers: tuple[str, ...], cpuset: Hierarchy) -> bool:
    """Whether a ``/proc/PID/cgroup`` entry is the process's place in the cpuset hierarchy."""
    if cpuset.version == 2:
        return hierarchy_id == 0
    return "cpuset" in controllers


def common_ancestor(paths: Iterable[str]) -> str:
    """The deepest cgroup path that holds every one of ``paths`` (``""`` for none)."""
    parts = [[p for p in path.split("/") if p] for path in paths]
    if not parts:
        return ""
    common: list[str] = []
    for items in zip(*parts, strict=False):
        if len(set(items)) != 1:
            break
        common.append(items[0])
    return "/" + "/".join(common)


def cpuset_paths(host: Host, pids: Iterable[int]) -> set[str]:
    """The cpuset cgroup paths of ``pids`` (empty without a cpuset hierarchy)."""
    hierarchy = host.cgroups.layout().controller("cpuset")
    if hierarchy is None:
        return set()
    paths: set[str] = set()
    for pid in pids:
        try:
            entries = host.proc.cgroups(pid)
        except GONE_OR_DENIED:
            continue
        for entry in entries:
            if holds_cpuset(entry.hierarchy, entry.controllers, hierarchy):
                paths.add(entry.path)
    return paths


def plan_cpuset(host: Host, target: Target) -> CpusetPlan | None:
    """The cpuset cgroup a pin of ``target`` writes, or ``None`` (affinity only)."""
    if target.is_process_tree:
        return None
    hierarchy = host.cgroups.layout().controller("cpuset")
    if hierarchy is None:
        return None
    common = common_ancestor(cpuset_paths(host, target.pids))
    if common in ("", "/"):
        return None
    directory = hierarchy.dir_of(common)
    if directory is None or not os.path.isfile(f"{directory}/cpuset.cpus"):
        return None
    if not os.access(f"{directory}/cpuset.cpus", os.W_OK):
        LOG.info(
            "workload %s: %s/cpuset.cpus is not writable; affinity only", target.name, directory
        )
        return None
    others = set(procs_below(directory)) - set(target.pids)
    if others:
        LOG.info(
            "workload %s: cgroup %s also holds pids %s; affinity only",
            target.name,
            common,
            sorted(others)[:5],
        )
        return None
    dirs = subtree(directory) if hierarchy.version == 1 else [directory]
    return CpusetPlan(hierarchy.version, tuple(dirs))


def write_cpusets(plan: CpusetPlan, wanted: Mapping[str, str], changes: Changes) -> None:
    """Write ``wanted`` (file -> text): widen top-down to the union, narrow bottom-up."""
    order = [path for path in plan.paths() if path in wanted]
    current = {path: read_file(path) for path in order}
    for path in order:
        old, new = current[path].strip(), wanted[path].strip()
        if not old or not new:
            continue
        union = set(parse_cpulist(old)) | set(parse_cpulist(new))
        if union != set(parse_cpulist(old)):
            _write(path, format_cpulist(union), current[path], changes)
    for path in reversed(order):
        if read_file(path).strip() != wanted[path].strip() or not wanted[path].strip():
            _write(path, wanted[path].strip(), current[path], changes)


def _write(path: str, text: str, old: str, changes: Changes) -> None:
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(text + "\n" if text else "\n")
    except PermissionError as exc:
        raise ResourceManagerError(
            f"writing {path} needs write access to the cgroup (root, or a cgroup "
            f"delegated to the agent's user): {exc.strerror}",
            403,
        ) from exc
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ResourceManagerError(
                f"writing {path} needs write access to the cgroup: {exc.strerror}", 403
            ) from exc
        status = 409 if exc.errno == errno.EBUSY else 400
        raise ResourceManagerError(
            f"the kernel refused {text!r} in {path} ({exc.strerror}): CPUs and nodes must "
            "be online and inside the parent cgroup's cpuset",
            status,
        ) from exc
    changes.files.append((path, old))
