"""Which workloads a host runs, and their processes' threads, memory and GPU device files.

A workload is, in ``cgroup`` mode, every process of the cgroups that one workload identity
(:mod:`toposcope.host.workload_identity`) stands for; in ``process`` mode a
top-level process tree. :class:`WorkloadReader` finds them (include/exclude patterns see
the cgroup path, or the ``comm`` in process mode) and reads, per scrape, each one's threads
with their CPU time and last CPU, its memory per NUMA node and the GPU device files it
holds. Processes that vanish or may not be inspected are skipped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from toposcope.config import HostPaths, WorkloadSettings
from toposcope.errors import NoDataError
from toposcope.host.cgroups import CgroupLayout, Cgroups
from toposcope.host.processes import VANISHED, ProcFs, gpu_minors, process_trees
from toposcope.host.slurm_identity import PasswdNames, SlurmLabeler
from toposcope.host.workload_identity import PathMapper, WorkloadMapper
from toposcope.identity.workload import WorkloadIdentity, WorkloadKind
from toposcope.topology.model import Topology

#: A process gone, or another user's process we may not inspect: skip it silently.
_UNREADABLE = (FileNotFoundError, ProcessLookupError, PermissionError)
_UNREADABLE_FDS = (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError)

#: Thread key that survives pid reuse: (tid, starttime in ticks).
ThreadKey = tuple[int, int]


@dataclass
class WorkloadReading:
    """One workload's processes and threads as read during a scrape."""

    identity: WorkloadIdentity
    pids: list[int]
    root_pid: int = 0
    comm: str = ""
    cpu_total: float = 0.0
    #: (thread key, CPU seconds, NUMA node label) of every live thread.
    threads: list[tuple[ThreadKey, float, str]] = field(default_factory=list)
    live_pids: list[int] = field(default_factory=list)


class WorkloadReader:
    """Finds the selected workloads and reads their processes (see the module docstring)."""

    def __init__(
        self,
        settings: WorkloadSettings,
        paths: HostPaths,
        mapper: WorkloadMapper | None = None,
    ) -> None:
        self._settings = settings
        self._mapper: WorkloadMapper = mapper if mapper is not None else PathMapper()
        self._proc = ProcFs(paths.procfs)
        self._cgroups = Cgroups(paths)
        self._include = [re.compile(p) for p in settings.include]
        self._exclude = [re.compile(p) for p in settings.exclude]
        self._gpu_pattern = re.compile(settings.gpu_device_pattern)
        self._slurm = SlurmLabeler(self._proc, PasswdNames(paths.rootfs))

    # -- selection -------------------------------------------------------------------------

    def _selected(self, text: str) -> bool:
        if self._include and not any(r.search(text) for r in self._include):
            return False
        return not any(r.search(text) for r in self._exclude)

    def _keep_cgroup(self, cgroup: str) -> bool:
        return self._selected(self._mapper.identify(cgroup).cgroup)

    def discover(self) -> tuple[dict[str, WorkloadReading], CgroupLayout | None]:
        """Workloads by name with their pids (not yet read), and the cgroup layout used."""
        workloads: dict[str, WorkloadReading] = {}
        if self._settings.mode == "process":
            for tree in process_trees(self._proc):
                if not self._selected(tree.comm):
                    continue
                identity = self._process_identity(tree.root)
                workloads[identity.name] = WorkloadReading(identity, list(tree.pids))
            return workloads, None
        layout = self._cgroups.layout()
        hierarchy = layout.walk_hierarchy()
        if hierarchy is None:
            raise NoDataError("no cgroup filesystem in mountinfo")
        for cgroup, pids in self._cgroups.procs(hierarchy, self._keep_cgroup):
            identity = self._mapper.identify(cgroup)
            known = workloads.get(identity.name)
            if known is None:
                workloads[identity.name] = WorkloadReading(identity, pids)
            else:
                known.pids.extend(pids)
        return workloads, layout

    def _process_identity(self, root: int) -> WorkloadIdentity:
        """``pid-N`` plus the root process's cgroup (v2 entry, else the first listed)."""
        cgroup = ""
        try:
            entries = self._proc.cgroups(root)
        except _UNREADABLE:
            entries = []
        for entry in entries:
            if entry.hierarchy == 0 or not cgroup:
                cgroup = entry.path
        if not cgroup:
            return WorkloadIdentity(name=f"pid-{root}", kind=WorkloadKind.PROCESS, cgroup="")
        mapped = self._mapper.identify(cgroup)
        return replace(mapped, name=f"pid-{root}", kind=WorkloadKind.PROCESS, cgroup=cgroup)

    # -- readings --------------------------------------------------------------------------

    def read_threads(self, workload: WorkloadReading, cpu_node: dict[int, str]) -> None:
        """Fill threads, CPU total, root pid and comm; vanished processes are skipped."""
        parents: dict[int, tuple[int, str]] = {}
        threads = workload.threads
        total = 0.0
        for pid in workload.pids:
            try:
                ppid, comm, samples = self._proc.threads(pid)
            except VANISHED:
                continue
            if not samples:
                continue
            workload.live_pids.append(pid)
            for tid, starttime, seconds, processor in samples:
                threads.append(((tid, starttime), seconds, cpu_node.get(processor, "")))
                total += seconds
            if ppid >= 0:
                parents[pid] = (ppid, comm)
        workload.cpu_total = total
        if not parents:
            workload.root_pid = min(workload.live_pids, default=0)
            return
        roots = [pid for pid, (ppid, _) in parents.items() if ppid not in parents]
        workload.root_pid = min(roots) if roots else min(parents)
        workload.comm = parents[workload.root_pid][1]

    def label_job(self, workload: WorkloadReading) -> None:
        """Fill the workload's Slurm job labels (after :meth:`read_threads`; see
        :class:`~toposcope.host.slurm_identity.SlurmLabeler`).
        """
        workload.identity = self._slurm.label(
            workload.identity, workload.root_pid, workload.live_pids
        )

    def memory(self, workload: WorkloadReading, layout: CgroupLayout | None) -> dict[int, int]:
        """Bytes per NUMA node: the cgroup's ``memory.numa_stat``, else the processes'
        ``numa_maps`` summed (when allowed), else nothing.
        """
        if layout is not None:
            stat = self._cgroups.numa_stat(workload.identity.cgroup, layout)
            if stat is not None:
                return stat
        if not self._settings.numa_maps:
            return {}
        total: dict[int, int] = {}
        for pid in workload.live_pids:
            try:
                per_node = self._proc.numa_maps(pid)
            except _UNREADABLE:
                continue
            for node, value in per_node.items():
                total[node] = total.get(node, 0) + value
        return total

    def gpus_from_fds(self, workload: WorkloadReading, minor_to_gpu: dict[int, int]) -> set[int]:
        """GPUs whose ``/dev/nvidiaN`` device files the workload's processes hold open."""
        found: set[int] = set()
        for pid in workload.live_pids:
            try:
                targets = self._proc.fd_targets(pid)
            except _UNREADABLE_FDS:
                continue
            for minor in gpu_minors(targets, self._gpu_pattern):
                found.add(minor_to_gpu.get(minor, minor))
        return found

    def minor_to_gpu(self, topo: Topology) -> dict[int, int]:
        """``/dev/nvidiaN`` minor -> GPU index, where the driver says which board N is."""
        by_bus = {g.pci_bus_id: g.index for g in topo.gpus if g.pci_bus_id}
        return {
            minor: by_bus[bus] for minor, bus in self._proc.nvidia_minors().items() if bus in by_bus
        }
