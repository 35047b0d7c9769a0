"""Which processes a workload name stands for, as the exporter names workloads.

* ``pid-N``: the process ``N`` and every descendant (the exporter's process mode names
  top-level trees this way; any pid works here);
* a cgroup workload: the name a :class:`~toposcope.host.workload_identity.
  WorkloadMapper` gives a cgroup (a pod's container, a Slurm job, a systemd unit...), or a
  cgroup path (``/my.slice/job``, looked up in the walked hierarchy, then in every mounted
  one): every process of those cgroups.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from toposcope.agent.host import GONE_OR_GARBLED, Host, procs_below
from toposcope.host.processes import process_tree
from toposcope.host.workload_identity import WorkloadMapper
from toposcope.identity.workload import WorkloadKind
from toposcope.rm import ResourceManagerError

_PID_NAME = re.compile(r"pid-(\d+)")


@dataclass(frozen=True)
class Target:
    """A resolved workload: its processes now, and how to list them again.

    ``kind`` is the identity kind of its name (``process`` for ``pid-N``); who owns its
    processes is decided from their cgroups (:mod:`toposcope.agent.ownership`), whatever
    the name.
    """

    name: str
    kind: str
    root: int
    pids: tuple[int, ...]
    cgroup: str = ""

    @property
    def is_process_tree(self) -> bool:
        """Whether the name is ``pid-N`` (its members are listed again while pinning)."""
        return self.kind == WorkloadKind.PROCESS


class TargetFinder:
    """Lists and resolves workloads of ``host``, naming cgroups with ``mapper``."""

    def __init__(self, host: Host, mapper: WorkloadMapper, node_name: str) -> None:
        self.host = host
        self.mapper = mapper
        self.node_name = node_name

    def list_all(self, mode: str) -> list[Target]:
        """Every workload: top-level process trees (``process``) or cgroup workloads."""
        if mode == "process":
            trees = self.host.children_map()
            return [
                Target(f"pid-{pid}", WorkloadKind.PROCESS, pid, tuple(process_tree(trees, pid)))
                for pid in sorted(trees.get(1, ()))
            ]
        found: dict[str, Target] = {}
        for cgroup, pids in self.walk_cgroups():
            identity = self.mapper.identify(cgroup)
            known = found.get(identity.name)
            merged = (*known.pids, *pids) if known else tuple(pids)
            found[identity.name] = Target(
                identity.name, identity.kind, min(merged), merged, identity.cgroup
            )
        return [found[name] for name in sorted(found)]

    def walk_cgroups(self) -> Iterable[tuple[str, list[int]]]:
        """``(cgroup path, pids)`` of every cgroup of the walked hierarchy holding processes."""
        hierarchy = self.host.cgroups.layout().walk_hierarchy()
        if hierarchy is None:
            return []
        return self.host.cgroups.procs(hierarchy)

    def refresh(self, target: Target) -> tuple[int, ...]:
        """A process tree's members now (a cgroup workload's pids as resolved)."""
        if not target.is_process_tree or not self.host.alive(target.root):
            return target.pids
        return tuple(process_tree(self.host.children_map(), target.root))

    def resolve(self, name: str) -> Target:
        """The workload ``name`` names (404 when no live process has that name)."""
        match = _PID_NAME.fullmatch(name)
        if match:
            root = int(match.group(1))
            try:
                self.host.proc.stat(root)
            except GONE_OR_GARBLED:
                raise ResourceManagerError(
                    f"workload {name}: process {root} is gone", 404
                ) from None
            tree = process_tree(self.host.children_map(), root)
            return Target(name, WorkloadKind.PROCESS, root, tuple(tree))
        pids: list[int] = []
        cgroup = ""
        kind: str = WorkloadKind.CGROUP
        for path, members in self.walk_cgroups():
            identity = self.mapper.identify(path)
            if name in (path, identity.name):
                pids.extend(members)
                cgroup = path if path == name else identity.cgroup
                kind = identity.kind
        if not pids and name.startswith("/"):
            pids = self._pids_under(name)
            cgroup = name
        live = [p for p in pids if self.host.alive(p)]
        if not live:
            raise ResourceManagerError(
                f"unknown workload {name!r} on {self.node_name}: no live process has that "
                "name (pid-N, a cgroup path, or the exporter's workload label)",
                404,
            )
        return Target(name, kind, min(live), tuple(sorted(set(live))), cgroup)

    def _pids_under(self, cgroup: str) -> list[int]:
        """Processes in cgroup path ``cgroup`` and below it, in the first mounted hierarchy
        that has that cgroup (a v1 host's cpuset or cpu hierarchy may have cgroups the
        walked one lacks).
        """
        layout = self.host.cgroups.layout()
        hierarchies = [*layout.v1, *([layout.unified] if layout.unified else [])]
        for hierarchy in hierarchies:
            directory = hierarchy.dir_of(cgroup)
            if directory is None or not os.path.isdir(directory):
                continue
            pids = procs_below(directory)
            if pids:
                return pids
        return []
