"""The ``local`` resource manager: this Linux host's processes and cgroups, changed for real.

It is a resource-manager backend (:class:`toposcope.rm.base.BaseResourceManager`) for one
host; ``toposcope agent``
serves it over the resource-manager HTTP API, and the advisor's ``--resource-manager local``
uses it in-process. It runs where the workloads run (node side), so it reads the exporter's
sources (``/proc``, the cgroup filesystems) directly. It must share the host's PID namespace
(a DaemonSet with ``hostPID: true``): the pids it reads are the ones it changes.

Workload names are the exporter's ``workload`` label values:

* ``pid-N``: the process ``N`` and every descendant (the exporter's process mode names
  top-level trees this way; any pid works here);
* a cgroup workload (``cgroup`` mode): a Kubernetes container, Docker container, Slurm job,
  systemd unit as
  :func:`~toposcope.exporters.sources.workload_identity.classify_cgroup` names it, or a
  cgroup path (``/my.slice/job``, looked up in the walked hierarchy, then in every mounted
  one): every process of those cgroups.

Allocations report ``cpus`` as the union of the threads' affinities and ``mems`` as the
cpuset's (or the process's ``Mems_allowed_list``); for ``migrate-memory``, ``before.mems``
is where the pages were (``numa_maps``) and ``after.mems`` where they were sent. A
``succeeded`` action's ``error`` may carry a note (pages that could not move, ``mems`` that
could not be enforced).

Actions, each idempotent by ``request_id`` under the one repeat rule of every backend
(:mod:`toposcope.rm.idempotency`; kept in memory, the advisor's audit log covers restarts),
and checked like every backend's first (:func:`toposcope.rm.validation.check_request`:
``pin`` needs ``cpus``, ``migrate-memory`` needs ``mems``):

* ``pin`` (``cpus`` required, ``mems`` optional): ``sched_setaffinity(2)`` on every thread
  (``/proc/PID/task/*``) of every process, listed again until a pass finds no new thread.
  For a cgroup workload whose cpuset cgroup holds only its processes and is writable, the
  cgroup's ``cpuset.cpus`` / ``cpuset.mems`` are written first (v2; v1 also writes the
  descendants, widening top-down then narrowing bottom-up so that a child always stays
  inside its parent). A process workload's ``mems`` cannot be set from outside the process
  (``set_mempolicy`` only acts on the caller); its new pages follow its CPUs (first touch)
  and ``migrate-memory`` moves the old ones.
* ``migrate-memory`` (``mems`` required): ``migrate_pages(2)`` of every process from all
  NUMA nodes with memory to ``mems`` (what ``migratepages PID all MEMS`` does).
* ``place``, ``migrate``, ``release``: refused (400): one host is not a scheduler.

The before-state (every thread's own affinity, the cpuset files' text) is recorded; the
after-state is read back. A ``pin`` whose ``cpus``/``mems`` equal the before-state of the
workload's latest pin (which is how the advisor reverts) restores each thread's own mask and
the cpuset files' exact text, not just the union the API reports.

Refusals are :class:`~toposcope.rm.errors.ResourceManagerError`: 404 for a workload that is
gone, 400 for CPUs or nodes the host does not have, 403 naming the privilege that is missing
(``EPERM``/``EACCES``: ``CAP_SYS_NICE`` for another user's threads, write access to the
cgroup), 409 for a reused ``request_id``, 501 where ``migrate_pages`` is unknown. A change
that fails half way is rolled back.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
import re
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from toposcope.config import HostPaths
from toposcope.cpulist import format_cpulist, parse_cpulist
from toposcope.errors import ConfigError, SourceError
from toposcope.exporters.sources.cgroups import Cgroups, Hierarchy, parse_cgroup_procs
from toposcope.exporters.sources.processes import VANISHED, ProcFs, read_all
from toposcope.exporters.sources.workload_identity import PathMapper
from toposcope.names import InvalidNameError, check_node_name
from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    BaseResourceManager,
    NodeView,
    ResourceManager,
    ResourceManagerError,
    WorkloadState,
    WorkloadView,
)
from toposcope.topology.sysfs import build_from_sysfs, online_cpus, online_nodes, read_text

LOG = logging.getLogger("toposcope.agent.local")

#: ``migrate_pages`` system call numbers (``asm/unistd.h``) of the architectures we know.
MIGRATE_PAGES_SYSCALL: dict[str, int] = {"x86_64": 256, "aarch64": 238}

NOT_ON_ONE_HOST = "not supported on a single host: use the scheduler"

#: passes over a workload's threads when pinning (threads started meanwhile are caught)
MAX_PASSES = 4

_PID_NAME = re.compile(r"pid-(\d+)")

#: a process gone, or its stat line unreadable (it was exiting)
_GONE_OR_GARBLED: tuple[type[Exception], ...] = (*VANISHED, ValueError)
#: a process gone, or another user's process we may not read
_GONE_OR_DENIED: tuple[type[Exception], ...] = (*VANISHED, PermissionError)
#: a directory of /proc that vanished or was never one
_NO_DIRECTORY: tuple[type[Exception], ...] = (*VANISHED, NotADirectoryError)

AFFINITY_PRIVILEGE = (
    "changing the CPU affinity of another user's threads needs CAP_SYS_NICE "
    "(run the agent as root or grant it that capability)"
)
MIGRATE_PRIVILEGE = (
    "migrate_pages needs CAP_SYS_NICE to move pages of another user's process or to nodes "
    "outside its cpuset, and ptrace access to the process (same user, or CAP_SYS_PTRACE)"
)


class Syscalls:
    """The kernel calls Python's ``os`` module lacks, through ``ctypes`` (``migrate_pages``).

    ``machine`` defaults to this host's (``platform.machine()``); on an architecture whose
    system call number is not known, ``migrate_pages`` raises ``OSError(ENOSYS)``.
    """

    def __init__(self, machine: str | None = None) -> None:
        self.machine = machine or platform.machine()
        self.number = MIGRATE_PAGES_SYSCALL.get(self.machine)
        self._libc: ctypes.CDLL | None = None

    def load(self) -> Callable[..., int]:
        """Load libc once (before dropping privileges, say) and return its ``syscall``."""
        if self._libc is None:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self._libc.syscall.restype = ctypes.c_long
        function: Callable[..., int] = self._libc.syscall
        return function

    def migrate_pages(self, pid: int, old_nodes: Iterable[int], new_nodes: Iterable[int]) -> int:
        """``migrate_pages(pid, maxnode, old, new)``: the number of pages left where they were.

        Raises :class:`OSError` with the kernel's errno (``ESRCH`` gone, ``EPERM`` not
        allowed, ``EINVAL`` bad nodes, ``ENOSYS`` unknown architecture).
        """
        if self.number is None:
            raise OSError(errno.ENOSYS, f"migrate_pages is not known on {self.machine}")
        old, new = sorted(set(old_nodes)), sorted(set(new_nodes))
        words = max([*old, *new, 0]) // 64 + 1
        old_mask = (ctypes.c_ulong * words)()
        new_mask = (ctypes.c_ulong * words)()
        for mask, nodes in ((old_mask, old), (new_mask, new)):
            for node in nodes:
                mask[node // 64] |= 1 << (node % 64)
        # The kernel reads maxnode - 1 bits: one more than the masks hold.
        result = self.load()(
            ctypes.c_long(self.number),
            ctypes.c_int(pid),
            ctypes.c_ulong(words * 64 + 1),
            old_mask,
            new_mask,
        )
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return int(result)


@dataclass(frozen=True)
class _Target:
    """A resolved workload: its processes now, and how to list them again."""

    name: str
    kind: str
    root: int
    pids: tuple[int, ...]
    cgroup: str = ""


@dataclass(frozen=True)
class _CpusetPlan:
    """The cpuset directories a pin writes (the workload's cgroup first, then descendants)."""

    version: int
    dirs: tuple[str, ...]


@dataclass
class _PinRecord:
    """What an applied pin changed, to restore exactly on the matching revert."""

    workload: str
    root: int
    root_start: int
    before: Allocation
    thread_masks: dict[int, frozenset[int]]
    files: dict[str, str]
    restored: bool = False


@dataclass
class _Changes:
    """What a change has done so far (for the roll-back of a half-done change)."""

    masks: dict[int, frozenset[int]] = field(default_factory=dict)
    files: list[tuple[str, str]] = field(default_factory=list)


class LocalResourceManager(BaseResourceManager):
    """The resource-manager protocol over this host (see the module docstring).

    ``node_name`` is the node this host reports (default: its hostname; a name that is not a
    host name is a :class:`~toposcope.errors.ConfigError`); an action's
    ``node`` is echoed in its allocations, so that the advisor's revert reaches the same
    agent. ``mode`` chooses what :meth:`workloads` lists (``cgroup`` like the exporter's
    default, or ``process``); actions accept both kinds of names either way.
    """

    def __init__(
        self,
        paths: HostPaths | None = None,
        *,
        node_name: str | None = None,
        mode: str = "cgroup",
        syscalls: Syscalls | None = None,
    ) -> None:
        if mode not in ("cgroup", "process"):
            raise ValueError(f"workload mode must be 'cgroup' or 'process', not {mode!r}")
        super().__init__()
        self.paths = paths if paths is not None else HostPaths()
        try:
            self.node_name = check_node_name(node_name or socket.gethostname())
        except InvalidNameError as exc:
            raise ConfigError(f"{exc} (give the node's name with --hostname)") from None
        self.mode = mode
        self.syscalls = syscalls if syscalls is not None else Syscalls()
        self._proc = ProcFs(self.paths.procfs)
        self._cgroups = Cgroups(self.paths)
        self._mapper = PathMapper()
        self._pins: list[_PinRecord] = []

    # -- the host ------------------------------------------------------------------------

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

    def nodes(self) -> list[NodeView]:
        """This host, with its topology from sysfs."""
        topology = build_from_sysfs(self.paths.sysfs, self.paths.procfs)
        return [NodeView(self.node_name, topology.to_dict(), {"resource-manager": "local"})]

    def workloads(self) -> list[WorkloadView]:
        """Every workload of this host (``mode``), with its root process's affinity and mems."""
        views: list[WorkloadView] = []
        online = sorted(self.online_cpus())
        for target in self._list_targets():
            try:
                cpus = sorted(os.sched_getaffinity(target.root))
                mems = self._mems_allowed(target.root)
            except _GONE_OR_DENIED:
                continue
            views.append(
                WorkloadView(
                    name=target.name,
                    kind=target.kind,
                    state=WorkloadState.RUNNING,
                    allocation=Allocation(self.node_name, cpus, mems, []),
                    pinned=cpus != online,
                )
            )
        return views

    def _list_targets(self) -> list[_Target]:
        if self.mode == "process":
            trees = _children_map(self._proc)
            targets = []
            for pid in sorted(trees.get(1, ())):
                pids = _tree(trees, pid)
                targets.append(_Target(f"pid-{pid}", "process", pid, tuple(pids)))
            return targets
        found: dict[str, _Target] = {}
        for cgroup, pids in self._walk_cgroups():
            identity = self._mapper.identify(cgroup)
            known = found.get(identity.name)
            merged = (*known.pids, *pids) if known else tuple(pids)
            found[identity.name] = _Target(
                identity.name, identity.kind, min(merged), merged, identity.cgroup
            )
        return [found[name] for name in sorted(found)]

    def _walk_cgroups(self) -> Iterable[tuple[str, list[int]]]:
        layout = self._cgroups.layout()
        hierarchy = layout.walk_hierarchy()
        if hierarchy is None:
            return []
        return self._cgroups.procs(hierarchy)

    # -- resolving a workload ------------------------------------------------------------

    def _resolve(self, name: str) -> _Target:
        match = _PID_NAME.fullmatch(name)
        if match:
            root = int(match.group(1))
            try:
                self._proc.stat(root)
            except _GONE_OR_GARBLED:
                raise ResourceManagerError(
                    f"workload {name}: process {root} is gone", 404
                ) from None
            tree = _tree(_children_map(self._proc), root)
            return _Target(name, "process", root, tuple(tree))
        pids: list[int] = []
        cgroup = ""
        kind = "cgroup"
        for path, members in self._walk_cgroups():
            identity = self._mapper.identify(path)
            if name in (path, identity.name):
                pids.extend(members)
                cgroup = path if path == name else identity.cgroup
                kind = identity.kind
        if not pids and name.startswith("/"):
            pids = self._pids_under(name)
            cgroup = name
        live = [p for p in pids if self._alive(p)]
        if not live:
            raise ResourceManagerError(
                f"unknown workload {name!r} on {self.node_name}: no live process has that "
                "name (pid-N, a cgroup path, or the exporter's workload label)",
                404,
            )
        return _Target(name, kind, min(live), tuple(sorted(set(live))), cgroup)

    def _pids_under(self, cgroup: str) -> list[int]:
        """Processes in cgroup path ``cgroup`` and below it, in the first mounted hierarchy
        that has that cgroup (a v1 host's cpuset or cpu hierarchy may have cgroups the
        walked one lacks).
        """
        layout = self._cgroups.layout()
        hierarchies = [*layout.v1, *([layout.unified] if layout.unified else [])]
        for hierarchy in hierarchies:
            directory = hierarchy.dir_of(cgroup)
            if directory is None or not os.path.isdir(directory):
                continue
            pids: list[int] = []
            for path in _subtree(directory):
                try:
                    pids.extend(parse_cgroup_procs(read_all(f"{path}/cgroup.procs")))
                except (FileNotFoundError, NotADirectoryError, PermissionError):
                    continue
            if pids:
                return pids
        return []

    def _alive(self, pid: int) -> bool:
        return os.path.exists(f"{self._proc.root}/{pid}/task")

    def _tids(self, pid: int) -> list[int]:
        try:
            return sorted(
                int(t) for t in os.listdir(f"{self._proc.root}/{pid}/task") if t.isdigit()
            )
        except _NO_DIRECTORY:
            return []

    def _starttime(self, pid: int) -> int:
        try:
            return self._proc.stat(pid).starttime
        except _GONE_OR_GARBLED:
            return -1

    def _mems_allowed(self, pid: int) -> list[int]:
        text = self._proc.status(pid).get("Mems_allowed_list", "")
        try:
            return list(parse_cpulist(text))
        except ValueError:
            return []

    def _resident_nodes(self, pids: Sequence[int]) -> list[int]:
        nodes: set[int] = set()
        for pid in pids:
            try:
                nodes.update(n for n, size in self._proc.numa_maps(pid).items() if size > 0)
            except _GONE_OR_DENIED:
                continue
        return sorted(nodes)

    def _affinities(self, target: _Target) -> dict[int, frozenset[int]]:
        masks: dict[int, frozenset[int]] = {}
        for pid in target.pids:
            for tid in self._tids(pid):
                try:
                    masks[tid] = frozenset(os.sched_getaffinity(tid))
                except VANISHED:
                    continue
        return masks

    def _allocation(self, target: _Target, node: str, mems: list[int] | None = None) -> Allocation:
        masks = self._affinities(target)
        cpus = sorted(set().union(*masks.values())) if masks else []
        if mems is None:
            plan = self._cpuset_plan(target)
            if plan is not None:
                mems = list(parse_cpulist(_read(f"{plan.dirs[0]}/cpuset.mems")))
            else:
                try:
                    mems = self._mems_allowed(target.root)
                except VANISHED:
                    mems = []
        return Allocation(node, cpus, mems, [])

    # -- cpusets -------------------------------------------------------------------------

    def _cpuset_plan(self, target: _Target) -> _CpusetPlan | None:
        """The cpuset cgroup a pin of ``target`` writes, or ``None`` (affinity only).

        Only for cgroup workloads, and only when one cgroup other than the root holds all
        of the workload's processes, nothing else lives in it or below it, and its
        ``cpuset.cpus`` is writable.
        """
        if target.kind == "process":
            return None
        layout = self._cgroups.layout()
        hierarchy = layout.controller("cpuset")
        if hierarchy is None:
            return None
        paths: set[str] = set()
        for pid in target.pids:
            try:
                entries = self._proc.cgroups(pid)
            except _GONE_OR_DENIED:
                continue
            for entry in entries:
                if _holds_cpuset(entry.hierarchy, entry.controllers, hierarchy):
                    paths.add(entry.path)
        common = _common_ancestor(paths)
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
        dirs = _subtree(directory) if hierarchy.version == 1 else [directory]
        members = set(target.pids)
        for path in _subtree(directory):
            try:
                others = set(parse_cgroup_procs(read_all(f"{path}/cgroup.procs"))) - members
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            if others:
                LOG.info(
                    "workload %s: cgroup %s also holds pids %s; affinity only",
                    target.name,
                    common,
                    sorted(others)[:5],
                )
                return None
        return _CpusetPlan(hierarchy.version, tuple(dirs))

    def _write_cpusets(
        self,
        plan: _CpusetPlan,
        wanted: dict[str, str],
        changes: _Changes,
    ) -> None:
        """Write ``wanted`` (file -> text): widen top-down to the union, narrow bottom-up."""
        order = [f"{d}/cpuset.{n}" for d in plan.dirs for n in ("cpus", "mems")]
        order = [path for path in order if path in wanted]
        current = {path: _read(path) for path in order}
        for path in order:
            old, new = current[path].strip(), wanted[path].strip()
            if not old or not new:
                continue
            union = set(parse_cpulist(old)) | set(parse_cpulist(new))
            if union != set(parse_cpulist(old)):
                self._write(path, format_cpulist(union), current[path], changes)
        for path in reversed(order):
            if _read(path).strip() != wanted[path].strip() or not wanted[path].strip():
                self._write(path, wanted[path].strip(), current[path], changes)

    def _write(self, path: str, text: str, old: str, changes: _Changes) -> None:
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

    # -- affinity --------------------------------------------------------------------------

    def _set_affinity(
        self,
        target: _Target,
        mask_for: Callable[[int], frozenset[int]],
        changes: _Changes,
    ) -> int:
        """Set every thread's mask (listing again until a pass finds no new thread)."""
        done: set[int] = set()
        for _ in range(MAX_PASSES):
            fresh = False
            pids = target.pids if target.kind != "process" else self._refresh_tree(target)
            for pid in pids:
                for tid in self._tids(pid):
                    if tid in done:
                        continue
                    fresh = True
                    try:
                        old = frozenset(os.sched_getaffinity(tid))
                        os.sched_setaffinity(tid, mask_for(tid))
                    except VANISHED:
                        continue
                    except PermissionError as exc:
                        raise ResourceManagerError(
                            f"pin {target.name}: thread {tid} of pid {pid}: {AFFINITY_PRIVILEGE}",
                            403,
                        ) from exc
                    except OSError as exc:
                        if exc.errno == errno.EPERM:
                            raise ResourceManagerError(
                                f"pin {target.name}: thread {tid}: {AFFINITY_PRIVILEGE}", 403
                            ) from exc
                        raise ResourceManagerError(
                            f"pin {target.name}: CPUs {format_cpulist(mask_for(tid))} are not "
                            f"allowed for thread {tid} of pid {pid} ({exc.strerror}); they must "
                            "lie inside its cgroup's cpuset",
                            400,
                        ) from exc
                    done.add(tid)
                    changes.masks.setdefault(tid, old)
            if not fresh:
                break
        return len(done)

    def _refresh_tree(self, target: _Target) -> tuple[int, ...]:
        if not self._alive(target.root):
            return target.pids
        return tuple(_tree(_children_map(self._proc), target.root))

    def _roll_back(self, changes: _Changes) -> None:
        for path, old in reversed(changes.files):
            try:
                with open(path, "w", encoding="ascii") as handle:
                    handle.write(old.strip() + "\n")
            except OSError as exc:
                LOG.error("roll-back: cannot restore %s to %r: %s", path, old.strip(), exc)
        for tid, mask in changes.masks.items():
            try:
                os.sched_setaffinity(tid, mask)
            except VANISHED:
                continue
            except OSError as exc:
                LOG.error("roll-back: cannot restore the affinity of thread %d: %s", tid, exc)

    # -- actions ---------------------------------------------------------------------------

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Carry out a new, checked ``request`` (see the module docstring); its id is its
        ``request_id``.
        """
        kind = ActionKind(request.kind)
        if kind not in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            raise ResourceManagerError(f"{kind.value}: {NOT_ON_ONE_HOST}", 400)
        started = time.monotonic()
        if kind == ActionKind.PIN:
            before, after, error = self._pin(request)
        else:
            before, after, error = self._migrate_memory(request)
        LOG.info(
            "%s %s: cpus %s -> %s, mems %s -> %s%s",
            kind.value,
            request.workload,
            format_cpulist(before.cpus),
            format_cpulist(after.cpus),
            format_cpulist(before.mems),
            format_cpulist(after.mems),
            f" ({error})" if error else "",
        )
        return ActionState(
            id=request.request_id,
            request=request,
            status=ActionStatus.SUCCEEDED,
            before=before,
            after=after,
            error=error,
            cost_seconds=round(time.monotonic() - started, 6),
        )

    def _check_sets(self, request: ActionRequest) -> None:
        bad_cpus = sorted(set(request.cpus) - self.online_cpus())
        if bad_cpus:
            raise ResourceManagerError(
                f"CPUs {format_cpulist(bad_cpus)} are not online on {self.node_name} "
                f"(online: {format_cpulist(self.online_cpus())})",
                400,
            )
        bad_mems = sorted(set(request.mems) - self.memory_nodes())
        if bad_mems:
            raise ResourceManagerError(
                f"NUMA nodes {format_cpulist(bad_mems)} have no memory on {self.node_name} "
                f"(nodes with memory: {format_cpulist(self.memory_nodes())})",
                400,
            )

    def _pin(self, request: ActionRequest) -> tuple[Allocation, Allocation, str]:
        self._check_sets(request)
        target = self._resolve(request.workload)
        node = request.node or self.node_name
        plan = self._cpuset_plan(target)
        masks = self._affinities(target)
        if not masks:
            raise ResourceManagerError(f"workload {target.name}: its processes are gone", 404)
        files = {}
        if plan is not None:
            files = {
                f"{d}/cpuset.{n}": _read(f"{d}/cpuset.{n}")
                for d in plan.dirs
                for n in ("cpus", "mems")
            }
        before = self._allocation(target, node)
        restore = self._restore_record(target, request)
        cpus = frozenset(request.cpus)
        changes = _Changes()
        try:
            if plan is not None:
                if restore is not None and set(restore.files) == set(files):
                    wanted = dict(restore.files)
                else:
                    wanted = {f"{d}/cpuset.cpus": format_cpulist(cpus) for d in plan.dirs}
                    if request.mems:
                        wanted.update(
                            {f"{d}/cpuset.mems": format_cpulist(request.mems) for d in plan.dirs}
                        )
                self._write_cpusets(plan, wanted, changes)
            thread_masks = restore.thread_masks if restore is not None else {}
            count = self._set_affinity(target, lambda tid: thread_masks.get(tid, cpus), changes)
        except ResourceManagerError:
            self._roll_back(changes)
            raise
        if count == 0:
            self._roll_back(changes)
            raise ResourceManagerError(f"workload {target.name}: its processes are gone", 404)
        if restore is not None:
            restore.restored = True
        else:
            self._pins.append(
                _PinRecord(
                    target.name,
                    target.root,
                    self._starttime(target.root),
                    before,
                    dict(masks),
                    files,
                )
            )
        after = self._allocation(target, node)
        note = ""
        if request.mems and plan is None and sorted(set(request.mems)) != sorted(after.mems):
            note = (
                "mems not enforced: the workload has no cpuset cgroup of its own; its new pages "
                "follow its CPUs (first touch), migrate-memory moves the old ones"
            )
        return before, after, note

    def _restore_record(self, target: _Target, request: ActionRequest) -> _PinRecord | None:
        """The workload's latest pin when ``request`` asks for its before-state back."""
        for record in reversed(self._pins):
            if record.workload != target.name or record.restored:
                continue
            if record.root != target.root or record.root_start != self._starttime(target.root):
                return None
            same_cpus = sorted(request.cpus) == sorted(record.before.cpus)
            same_mems = not request.mems or sorted(request.mems) == sorted(record.before.mems)
            return record if same_cpus and same_mems else None
        return None

    def _migrate_memory(self, request: ActionRequest) -> tuple[Allocation, Allocation, str]:
        self._check_sets(request)
        target = self._resolve(request.workload)
        node = request.node or self.node_name
        resident = self._resident_nodes(target.pids)
        before = self._allocation(target, node, resident or None)
        source = sorted(self.memory_nodes())
        left = 0
        moved = 0
        for pid in target.pids:
            try:
                left += self.syscalls.migrate_pages(pid, source, request.mems)
            except ProcessLookupError:
                continue
            except PermissionError as exc:
                raise ResourceManagerError(
                    f"migrate-memory {target.name}: pid {pid}: {MIGRATE_PRIVILEGE}", 403
                ) from exc
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    continue
                if exc.errno == errno.EPERM:
                    raise ResourceManagerError(
                        f"migrate-memory {target.name}: pid {pid}: {MIGRATE_PRIVILEGE}", 403
                    ) from exc
                if exc.errno == errno.ENOSYS:
                    raise ResourceManagerError(f"migrate-memory: {exc.strerror}", 501) from exc
                raise ResourceManagerError(
                    f"migrate-memory {target.name}: pid {pid}: the kernel refused nodes "
                    f"{format_cpulist(request.mems)} ({exc.strerror}); they must have memory "
                    "and lie inside the process's cpuset.mems",
                    400,
                ) from exc
            moved += 1
        if moved == 0:
            raise ResourceManagerError(f"workload {target.name}: its processes are gone", 404)
        after = self._allocation(target, node, sorted(set(request.mems)))
        note = f"{left} page(s) could not be moved (in use or locked)" if left else ""
        return before, after, note


def _read(path: str) -> str:
    try:
        return read_all(path).decode("ascii", "replace")
    except (FileNotFoundError, NotADirectoryError):
        return ""


def _holds_cpuset(hierarchy_id: int, controllers: tuple[str, ...], cpuset: Hierarchy) -> bool:
    if cpuset.version == 2:
        return hierarchy_id == 0
    return "cpuset" in controllers


def _common_ancestor(paths: Iterable[str]) -> str:
    parts = [[p for p in path.split("/") if p] for path in paths]
    if not parts:
        return ""
    common: list[str] = []
    for items in zip(*parts, strict=False):
        if len(set(items)) != 1:
            break
        common.append(items[0])
    return "/" + "/".join(common)


def _subtree(directory: str) -> list[str]:
    """``directory`` and every cgroup below it, parents before children."""
    found = [directory]
    index = 0
    while index < len(found):
        try:
            entries = sorted(os.scandir(found[index]), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            entries = []
        found.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        index += 1
    return found


def _children_map(proc: ProcFs) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid in proc.pids():
        try:
            stat = proc.stat(pid)
        except _GONE_OR_GARBLED:
            continue
        if stat.kernel_thread:
            continue
        children.setdefault(stat.ppid, []).append(pid)
    return children


def _tree(children: dict[int, list[int]], root: int) -> list[int]:
    members: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        members.append(pid)
        stack.extend(children.get(pid, ()))
    return sorted(members)


__all__ = ["MIGRATE_PAGES_SYSCALL", "NOT_ON_ONE_HOST", "LocalResourceManager", "Syscalls"]


def local_resource_manager(node_name: str | None = None) -> ResourceManager:
    """This host's resource manager, for the advisor's ``--resource-manager local``.

    Registered as the ``local`` entry point of ``toposcope.resource_managers`` (pyproject),
    so the advisor finds it by name without importing the agent. ``node_name`` is the node
    it reports (default: the hostname).
    """
    return LocalResourceManager(node_name=node_name)
