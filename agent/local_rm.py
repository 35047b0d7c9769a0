"""The ``local`` resource manager: this Linux host's processes and cgroups, changed for real.

It is a resource-manager backend (:class:`toposcope.rm.base.BaseResourceManager`) for one
host; ``toposcope agent`` serves it over the resource-manager HTTP API, and the advisor's
``--resource-manager local`` uses it in-process. It runs where the workloads run (node
side), so it reads the exporter's sources (``/proc``, the cgroup filesystems) directly. It
must share the host's PID namespace (a DaemonSet with ``hostPID: true``): the pids it reads
are the ones it changes.

Workload names are the exporter's ``workload`` label values (:mod:`toposcope.agent.targets`):
``pid-N``, a cgroup workload named by the mapper (the kubelet-backed one when the agent
talks to the kubelet, else the cgroup path's classification), or a cgroup path.
Allocations report ``cpus`` as the union of the threads' affinities and ``mems`` as the
cpuset's (or the process's ``Mems_allowed_list``). A ``succeeded`` action's ``error`` may
carry a note (pages that could not move, ``mems`` that could not be enforced, what the
workload's owner allows and recommends).

Actions, each idempotent by ``request_id`` under the one repeat rule of every backend
(:mod:`toposcope.rm.idempotency`; kept in memory, the advisor's audit log covers restarts),
and checked like every backend's first (:func:`toposcope.rm.validation.check_request`:
``pin`` needs ``cpus``, ``migrate-memory`` needs ``mems``):

* ``pin`` (``cpus`` required, ``mems`` optional): :mod:`toposcope.agent.pinning`;
* ``migrate-memory`` (``mems`` required): :mod:`toposcope.agent.memory`;
* ``place``, ``migrate``, ``release``: refused (400): one host is not a scheduler.

Before either, the workload's owner is asked (:mod:`toposcope.agent.ownership`): a Slurm
job is changed only inside its allocation and its cpuset cgroup is never written; a
Guaranteed pod is refused; a Burstable or BestEffort container's threads are re-pinned only
inside its allowed cpuset; everything else is changed as asked.

Refusals are :class:`~toposcope.rm.errors.ResourceManagerError`: 404 for a workload that is
gone, 400 for CPUs or nodes the host does not have or the owner did not allocate, 403 naming
the privilege that is missing (``EPERM``/``EACCES``: ``CAP_SYS_NICE`` for another user's
threads, write access to the cgroup), 409 for a reused ``request_id`` or a workload whose
owner forbids the change, 501 where ``migrate_pages`` is unknown. A change that fails half
way is rolled back.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path

from toposcope.agent.cpusets import plan_cpuset
from toposcope.agent.host import GONE_OR_DENIED, Host
from toposcope.agent.memory import migrate_memory
from toposcope.agent.ownership import OwnershipRules
from toposcope.agent.pinning import Pinner
from toposcope.agent.syscalls import MIGRATE_PAGES_SYSCALL, Syscalls
from toposcope.agent.targets import TargetFinder
from toposcope.config import HostPaths
from toposcope.cpulist import format_cpulist
from toposcope.errors import ConfigError
from toposcope.host.slurm_identity import PasswdNames, SlurmLabeler
from toposcope.host.workload_identity import PathMapper, WorkloadMapper
from toposcope.identity.names import InvalidNameError, check_node_name
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
from toposcope.rm.plan import AGENT_KINDS, NOT_ON_ONE_HOST
from toposcope.topology.sysfs import build_from_sysfs

LOG = logging.getLogger("toposcope.agent.local")


class LocalResourceManager(BaseResourceManager):
    """The resource-manager protocol over this host (see the module docstring).

    ``node_name`` is the node this host reports (default: its hostname; a name that is not a
    host name is a :class:`~toposcope.errors.ConfigError`); an action's ``node`` is echoed
    in its allocations, so that the advisor's revert reaches the same agent. ``mode``
    chooses what :meth:`workloads` lists (``cgroup`` like the exporter's default, or
    ``process``); actions accept both kinds of names either way. ``mapper`` names cgroup
    workloads (default: by their path alone).
    """

    def __init__(
        self,
        paths: HostPaths | None = None,
        *,
        node_name: str | None = None,
        mode: str = "cgroup",
        syscalls: Syscalls | None = None,
        mapper: WorkloadMapper | None = None,
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
        self.host = Host(self.paths)
        names = mapper if mapper is not None else PathMapper()
        self.targets = TargetFinder(self.host, names, self.node_name)
        labeler = SlurmLabeler(self.host.proc, PasswdNames(Path(self.paths.rootfs)))
        self.owners = OwnershipRules(self.host, names, labeler)
        self.pinner = Pinner(self.host, self.targets)

    def online_cpus(self) -> frozenset[int]:
        """CPUs the kernel lists as online (every CPU Python sees when sysfs has no list)."""
        return self.host.online_cpus()

    def memory_nodes(self) -> frozenset[int]:
        """NUMA nodes with memory (``node/has_memory``, else ``node/online``, else node 0)."""
        return self.host.memory_nodes()

    def nodes(self) -> list[NodeView]:
        """This host, with its topology from sysfs."""
        topology = build_from_sysfs(self.paths.sysfs, self.paths.procfs)
        return [NodeView(self.node_name, topology.to_dict(), {"resource-manager": "local"})]

    def workloads(self) -> list[WorkloadView]:
        """Every workload of this host (``mode``), with its root process's affinity and mems."""
        views: list[WorkloadView] = []
        online = sorted(self.online_cpus())
        for target in self.targets.list_all(self.mode):
            try:
                cpus = sorted(os.sched_getaffinity(target.root))
                mems = self.host.mems_allowed(target.root)
            except GONE_OR_DENIED:
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

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Carry out a new, checked ``request`` (see the module docstring); its id is its
        ``request_id``.
        """
        kind = ActionKind(request.kind)
        if kind not in AGENT_KINDS:
            raise ResourceManagerError(f"{kind.value}: {NOT_ON_ONE_HOST}", 400)
        started = time.monotonic()
        self._check_sets(request)
        target = self.targets.resolve(request.workload)
        ownership = self.owners.of(target)
        ownership.check(kind, target.name, request.cpus, request.mems)
        node = request.node or self.node_name
        if kind == ActionKind.PIN:
            plan = None if ownership.managed else plan_cpuset(self.host, target)
            before, after, note = self.pinner.pin(target, request, node, plan)
        else:
            before, after, note = migrate_memory(self.host, self.syscalls, target, request, node)
        error = "; ".join(n for n in (note, ownership.note) if n)
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


__all__ = [
    "MIGRATE_PAGES_SYSCALL",
    "NOT_ON_ONE_HOST",
    "LocalResourceManager",
    "Syscalls",
    "local_resource_manager",
]


def local_resource_manager(node_name: str | None = None) -> ResourceManager:
    """This host's resource manager, for the advisor's ``--resource-manager local``.

    Registered as the ``local`` entry point of ``toposcope.resource_managers`` (pyproject),
    so the advisor finds it by name without importing the agent. ``node_name`` is the node
    it reports (default: the hostname).
    """
    return LocalResourceManager(node_name=node_name)
