"""The host tree of a simulated node: ``sys/``, ``proc/`` and a cgroup v2 hierarchy.

:class:`NodeTree` writes what a real node's exporter reads under ``<state dir>/nodes/<name>``.
The parts that never change for a template (CPU topology, PCI functions) are written once
per template and linked into every node. The rest is updated incrementally on each scrape of
that node: structure (processes, cgroups, fds, cpusets, ``memory.numa_stat``) only when a
workload's allocation changed, counters (``/proc/stat``, per-thread CPU time and last CPU,
node ``meminfo``/``numastat``, each workload's resctrl memory bandwidth counters,
:mod:`toposcope.sim.resctrlfs`) when simulated time moved.

Every directory the tree creates or removes is checked to lie inside the node's root first
(:func:`toposcope.sim.paths.contained`): a workload whose name would lead outside is refused
and logged, never written.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Container
from dataclasses import dataclass
from pathlib import Path

from toposcope.cpulist import format_cpulist
from toposcope.sim.cgroup_paths import workload_cgroup
from toposcope.sim.cluster import NodeSnapshot, WorkloadSnapshot
from toposcope.sim.jobs import JobKind
from toposcope.sim.nicfs import NicTree
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.paths import UnsafePathError, contained, remove_contained
from toposcope.sim.proc_text import mountinfo_text, numa_stat_text, stat_line
from toposcope.sim.resctrlfs import ResctrlTree
from toposcope.sim.sysfs_writer import write_topology_sysfs

LOG = logging.getLogger("toposcope.sim")

TICKS = 100
PAGE = 4096
#: Pretend every node booted this long before the scenario started (seconds).
UPTIME_AT_START = 86_400.0
#: Memory the OS itself uses on each NUMA node.
OS_MEMORY_BYTES = 2 * 1024**3
#: Most threads written per workload.
MAX_THREADS = 64
#: Pages allocated per NUMA node before the scenario started (numastat baseline).
NUMASTAT_BASELINE = 1_000_000

_COMMS = {
    JobKind.CPU_TRAIN: "python3",
    JobKind.GPU_TRAIN: "python3",
    JobKind.INFERENCE: "tritonserver",
    JobKind.NOTEBOOK: "jupyter-lab",
}


def _write(path: str, text: str) -> None:
    """Overwrite a small file in place (the reader is behind the node's lock).

    Writing over the old bytes and then cutting the file to length is several times
    cheaper on ext4 than ``O_TRUNC``, which frees and reallocates the block every time.
    """
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _link(path: str, target: str) -> None:
    try:
        os.symlink(target, path)
    except FileExistsError:
        os.unlink(path)
        os.symlink(target, path)


@dataclass(frozen=True)
class _Written:
    """What the tree holds for one workload (to write only differences)."""

    pid: int
    tids: tuple[int, ...]
    key: tuple[object, ...]


class NodeTree:
    """The host tree of one simulated node (see the module docstring).

    ``shared`` is the per-template directory holding the static CPU and PCI parts;
    ``network`` names the workloads whose GPUs send through the node's NICs and ``cabled``
    the NICs that reach a switch (``None``: all; :mod:`toposcope.sim.nicfs`).
    """

    def __init__(
        self,
        root: Path,
        template: NodeTemplate,
        shared: Path,
        network: Container[str] = frozenset(),
        cabled: Collection[str] | None = None,
    ) -> None:
        self.root = root
        self.template = template
        write_topology_sysfs(
            root, template.topology, cpu_dir=shared / "cpu", pci_dir=shared / "pci-devices"
        )
        self._nics = NicTree(root, template, network, cabled)
        self._resctrl = ResctrlTree(root, template, shared / "cpu", _write)
        self._proc = str(root / "proc")
        self._node_dir = str(root / "sys/devices/system/node")
        self._cgroup = str(root / "sys/fs/cgroup")
        os.makedirs(self._proc + "/self", exist_ok=True)
        os.makedirs(self._cgroup + "/system.slice", exist_ok=True)
        _write(self._proc + "/self/mountinfo", mountinfo_text(2))
        _write(self._cgroup + "/cgroup.procs", "")
        _write(self._cgroup + "/cgroup.controllers", "cpuset cpu io memory pids\n")
        _write(self._cgroup + "/system.slice/cgroup.procs", "")
        for numa in template.numa_ids:
            _write(
                f"{self._node_dir}/node{numa}/numastat",
                f"numa_hit {NUMASTAT_BASELINE}\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 0\n"
                f"local_node {NUMASTAT_BASELINE}\nother_node 0\n",
            )
        self._written: dict[str, _Written] = {}
        self._refused: set[str] = set()
        self._time: float | None = None

    def update(self, snap: NodeSnapshot) -> None:
        """Bring the tree to ``snap``: structure where it changed, counters if time moved.

        A workload whose directories would lie outside the root is left out of the tree
        (logged once): the rest of the node is still written.
        """
        current = {w.name: w for w in snap.workloads}
        for name in [n for n in self._written if n not in current]:
            self._remove(name)
        for workload in snap.workloads:
            key = (
                tuple(workload.allocation.cpus),
                tuple(workload.allocation.mems),
                tuple(workload.allocation.gpus),
                workload.spec.gpus,
            )
            known = self._written.get(workload.name)
            if known is None or known.pid != workload.pid:
                if known is not None:
                    self._remove(workload.name)
                try:
                    self._create(workload, key)
                except UnsafePathError as exc:
                    if workload.name not in self._refused:
                        self._refused.add(workload.name)
                        LOG.error("node %s: workload left out of the tree: %s", snap.name, exc)
            elif known.key != key:
                self._restructure(workload, key)
        if snap.now != self._time:
            self._counters(snap)
            self._nics.update(snap)
            self._time = snap.now

    # -- structure ---------------------------------------------------------------------------

    def _cgroup_dir(self, name: str) -> str:
        return f"{self._cgroup}/{workload_cgroup(name)}"

    def _create(self, workload: WorkloadSnapshot, key: tuple[object, ...]) -> None:
        pid = workload.pid
        threads = min(max(workload.spec.threads, 1), MAX_THREADS)
        tids = tuple(range(pid, pid + threads))
        base = f"{self._proc}/{pid}"
        cgroup = self._cgroup_dir(workload.name)
        contained(self.root, base)
        contained(self.root, cgroup)
        os.makedirs(base + "/fd", exist_ok=True)
        for tid in tids:
            os.makedirs(f"{base}/task/{tid}", exist_ok=True)
        comm = _COMMS[workload.spec.kind]
        _write(base + "/comm", comm + "\n")
        _write(base + "/cgroup", f"0::/{workload_cgroup(workload.name)}\n")
        for fd in range(3):
            _link(f"{base}/fd/{fd}", "/dev/null")
        os.makedirs(cgroup, exist_ok=True)
        _write(cgroup + "/cgroup.procs", f"{pid}\n")
        self._written[workload.name] = _Written(pid, tids, key)
        self._resctrl.add(pid, tids)
        self._restructure(workload, key)

    def _restructure(self, workload: WorkloadSnapshot, key: tuple[object, ...]) -> None:
        """Rewrite what depends on the allocation: fds, cpuset, status, numa_stat."""
        known = self._written[workload.name]
        base = f"{self._proc}/{known.pid}"
        fd_dir = base + "/fd"
        for entry in os.listdir(fd_dir):
            if int(entry) >= 3:
                os.unlink(f"{fd_dir}/{entry}")
        gpus = workload.allocation.gpus
        if gpus:
            _link(fd_dir + "/3", "/dev/nvidiactl")
            for i, gpu in enumerate(gpus):
                _link(f"{fd_dir}/{4 + i}", f"/dev/nvidia{gpu}")
        for i, device in enumerate(self._nics.uverbs_files(workload.name)):
            _link(f"{fd_dir}/{4 + len(gpus) + i}", device)
        cpus = format_cpulist(workload.allocation.cpus)
        mems = format_cpulist(workload.allocation.mems)
        comm = _COMMS[workload.spec.kind]
        _write(
            base + "/status",
            f"Name:\t{comm}\nState:\tS (sleeping)\nTgid:\t{known.pid}\nPid:\t{known.pid}\n"
            f"PPid:\t1\nThreads:\t{len(known.tids)}\nCpus_allowed_list:\t{cpus}\n"
            f"Mems_allowed_list:\t{mems}\n",
        )
        cgroup = self._cgroup_dir(workload.name)
        _write(cgroup + "/cpuset.cpus.effective", cpus + "\n")
        _write(cgroup + "/cpuset.mems.effective", mems + "\n")
        pages = {n: 0 for n in self.template.numa_ids}
        for node, size in workload.memory_by_node.items():
            pages[node] = size // PAGE
        _write(cgroup + "/memory.numa_stat", numa_stat_text(2, pages))
        self._written[workload.name] = _Written(known.pid, known.tids, key)

    def _remove(self, name: str) -> None:
        known = self._written.pop(name)
        remove_contained(self.root, f"{self._proc}/{known.pid}")
        self._resctrl.remove(known.pid)
        remove_contained(self.root, self._cgroup_dir(name))

    # -- counters ------------------------------------------------------------------------------

    def _counters(self, snap: NodeSnapshot) -> None:
        uptime_ticks = int((UPTIME_AT_START + snap.counter_time) * TICKS)
        for workload in snap.workloads:
            known = self._written.get(workload.name)
            if known is None:
                continue
            base = f"{self._proc}/{known.pid}"
            count = len(known.tids)
            per_thread = int(workload.cpu_seconds * TICKS / count)
            utime = per_thread * 9 // 10
            stime = per_thread - utime
            cpus = workload.thread_cpus
            template = _stat_template(_COMMS[workload.spec.kind], count)
            for i, tid in enumerate(known.tids):
                _write(
                    f"{base}/task/{tid}/stat",
                    template.format(tid, utime, stime, cpus[i % len(cpus)]),
                )
            _write(
                base + "/stat", template.format(known.pid, utime * count, stime * count, cpus[0])
            )
        self._resctrl.update(
            (known.pid, w) for w in snap.workloads if (known := self._written.get(w.name))
        )
        lines = []
        totals = [0] * 8
        for cpu in self.template.cpus:
            busy = int(snap.cpu_busy.get(cpu, 0.0) * TICKS)
            user = busy * 9 // 10 + 500
            system = busy - busy * 9 // 10 + 200
            idle = max(uptime_ticks - user - system, 0)
            row = [user, 0, system, idle, 0, 0, 0, 0]
            totals = [a + b for a, b in zip(totals, row, strict=True)]
            lines.append(f"cpu{cpu} " + " ".join(map(str, row)) + " 0 0")
        head = "cpu  " + " ".join(map(str, totals)) + " 0 0"
        _write(
            self._proc + "/stat",
            "\n".join([head, *lines, "intr 0", "ctxt 0", "btime 1700000000", "processes 1"]) + "\n",
        )
        used: dict[int, int] = {n: OS_MEMORY_BYTES for n in self.template.numa_ids}
        for workload in snap.workloads:
            for node, size in workload.memory_by_node.items():
                used[node] = used.get(node, 0) + size
        for numa in self.template.topology.numa_nodes:
            total_kib = numa.memory_bytes // 1024
            used_kib = min(used.get(numa.id, 0) // 1024, total_kib)
            n = numa.id
            _write(
                f"{self._node_dir}/node{n}/meminfo",
                f"Node {n} MemTotal:       {total_kib} kB\n"
                f"Node {n} MemFree:        {total_kib - used_kib} kB\n"
                f"Node {n} MemUsed:        {used_kib} kB\n"
                f"Node {n} FilePages:      {used_kib // 8} kB\n"
                f"Node {n} AnonPages:      {used_kib - used_kib // 8} kB\n"
                f"Node {n} Shmem:          0 kB\n"
                f"Node {n} Slab:           {min(262144, total_kib // 64)} kB\n"
                f"Node {n} HugePages_Total:     0\n",
            )
            stat = snap.numastat.get(n, {})
            hit = NUMASTAT_BASELINE + int(stat.get("hit", 0.0))
            local = NUMASTAT_BASELINE + int(stat.get("local", 0.0))
            _write(
                f"{self._node_dir}/node{n}/numastat",
                f"numa_hit {hit}\nnuma_miss {int(stat.get('miss', 0.0))}\n"
                f"numa_foreign {int(stat.get('foreign', 0.0))}\ninterleave_hit 0\n"
                f"local_node {local}\nother_node {int(stat.get('other', 0.0))}\n",
            )


_STAT_TEMPLATES: dict[tuple[str, int], str] = {}


def _stat_template(comm: str, threads: int) -> str:
    """A ``/proc/PID/stat`` line as a format string over (pid, utime, stime, processor)."""
    key = (comm, threads)
    found = _STAT_TEMPLATES.get(key)
    if found is None:
        line = stat_line(
            -9001,
            comm,
            ppid=1,
            utime=-9002,
            stime=-9003,
            starttime=int(UPTIME_AT_START * TICKS),
            processor=-9004,
            num_threads=threads,
            state="R",
        )
        found = (
            line.replace("{", "{{")
            .replace("}", "}}")
            .replace("-9001", "{0}")
            .replace("-9002", "{1}")
            .replace("-9003", "{2}")
            .replace("-9004", "{3}")
        )
        _STAT_TEMPLATES[key] = found
    return found
