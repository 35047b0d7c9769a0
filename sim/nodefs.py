"""Per-node metrics from the exporter's own collectors, over generated trees and a fake NVML.

Every simulated node gets what a real node's exporter reads:

* a host tree (``sys/``, ``proc/``, a cgroup v2 hierarchy) under ``<state dir>/nodes/<name>``,
  written by :class:`NodeTree`. The parts that never change for a template (CPU topology,
  PCI functions) are written once per template and linked into every node. The rest is
  updated incrementally on each scrape of that node: structure (processes, cgroups, fds,
  cpusets, ``memory.numa_stat``) only when a workload's allocation changed, counters
  (``/proc/stat``, per-thread CPU time and last CPU, node ``meminfo``/``numastat``) when
  simulated time moved;
* a fake NVML (:class:`~toposcope.exporters.sources.fake_nvml.FakeNvml`) built from the
  template's GPUs (:func:`fake_nvml_description`), whose utilization, memory, power,
  temperature, energy and process list follow the jobs on each GPU;
* the exporter's collectors, unchanged, with ``hostname`` set to the node's name
  (:class:`NodeExporter`). The topology is built once per template from the generated
  sysfs, exactly as the exporter would build it, and shared.

:class:`SimExporters` holds one :class:`NodeExporter` per node, built on first scrape, each
with its own lock so that different nodes scrape in parallel.

Every directory a tree creates or removes is checked to lie inside the node's root first
(:func:`toposcope.sim.paths.contained`), and every node's root inside the state directory:
a workload whose name would lead outside is refused and logged, never written.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toposcope.config import ExporterConfig, HostPaths
from toposcope.cpulist import format_cpulist
from toposcope.exporters.app import render
from toposcope.exporters.collectors import default_table
from toposcope.exporters.collectors.gpu import GpuCollector
from toposcope.exporters.context import CollectorContext, HostTopology
from toposcope.exporters.gpu_source import GpuSource, install_gpu_source, open_gpu_source
from toposcope.exporters.runner import BrokenCollector, NamedCollector, ScrapeRunner
from toposcope.exporters.sources.fake_nvml import FakeNvml, FakeProcess, Ramp, parse_spec
from toposcope.sim.cluster import NodeSnapshot, SimCluster, WorkloadSnapshot
from toposcope.sim.fsgen import mountinfo_text, numa_stat_text, stat_line, write_topology_sysfs
from toposcope.sim.jobs import JobKind
from toposcope.sim.paths import UnsafePathError, contained, remove_contained
from toposcope.sim.templates import NodeTemplate
from toposcope.topology.model import Topology
from toposcope.topology.sysfs import build_from_sysfs

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


def fake_nvml_description(template: NodeTemplate) -> dict[str, Any]:
    """The fake NVML description (``fake_nvml_specs`` format) of a template's GPUs, idle."""
    numa = {n.id: format_cpulist(n.cpus) for n in template.topology.numa_nodes if n.cpus}
    switches: list[str] = []
    if any(g.nvlink_group for g in template.gpus):
        switches = [f"00000000:{0xC4 + i:02X}:00.0" for i in range(6)]
    limit_mw = template.gpu_power_limit_watts * 1000
    gpus = []
    for gpu in template.gpus:
        domain, bus, rest = gpu.pci_bus_id.split(":")
        entry: dict[str, Any] = {
            "uuid": gpu.uuid
            or f"GPU-{template.name[:8]}-{gpu.index:04d}-4000-8000-{bus}{rest[:2]}",
            "pci_bus_id": f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}",
            "numa_node": gpu.numa_node,
            "processes": [],
        }
        if gpu.switch is not None:
            entry["pcie_switch"] = gpu.switch
        if gpu.nvlink_group is not None and switches:
            entry["nvlinks"] = [switches[i // 2] for i in range(12)]
        gpus.append(entry)
    matrix = [[template.pcie_label(a.index, b.index) for b in template.gpus] for a in template.gpus]
    return {
        "driver_version": "535.129.03",
        "cuda_driver_version": 12020,
        "numa_nodes": numa,
        "nvswitches": switches,
        "defaults": {
            "name": template.gpu_model,
            "pci_device_id": template.gpu_pci_device_id,
            "memory_total_bytes": template.gpu_memory_bytes,
            "memory_used_bytes": 0,
            "utilization_gpu": 0,
            "utilization_memory": 0,
            "power_mw": template.gpu_idle_watts * 1000,
            "power_limit_mw": limit_mw,
            "energy_mj": {"start": 0, "rate": 0},
            "temperature_c": 30,
            "clock_sm_mhz": 1410,
            "clock_mem_mhz": 1593,
            "clock_event_reasons": [],
            "ecc": {
                "volatile": {"corrected": 0, "uncorrected": 0},
                "aggregate": {"corrected": 0, "uncorrected": 0},
            },
            "pcie_tx_kbps": 0,
            "pcie_rx_kbps": 0,
            "mig": {"mode": "disabled"},
        },
        "gpus": gpus,
        "topology": {"matrix": matrix},
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

    ``shared`` is the per-template directory holding the static CPU and PCI parts.
    """

    def __init__(self, root: Path, template: NodeTemplate, shared: Path) -> None:
        self.root = root
        self.template = template
        write_topology_sysfs(
            root, template.topology, cpu_dir=shared / "cpu", pci_dir=shared / "pci-devices"
        )
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
            self._time = snap.now

    # -- structure ---------------------------------------------------------------------------

    def _cgroup_dir(self, name: str) -> str:
        return f"{self._cgroup}/system.slice/{name}"

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
        _write(base + "/cgroup", f"0::/system.slice/{workload.name}\n")
        for fd in range(3):
            _link(f"{base}/fd/{fd}", "/dev/null")
        os.makedirs(cgroup, exist_ok=True)
        _write(cgroup + "/cgroup.procs", f"{pid}\n")
        self._written[workload.name] = _Written(pid, tids, key)
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
        remove_contained(self.root, self._cgroup_dir(name))

    # -- counters ------------------------------------------------------------------------------

    def _counters(self, snap: NodeSnapshot) -> None:
        uptime_ticks = int((UPTIME_AT_START + snap.now) * TICKS)
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


class _FixedTopology(HostTopology):
    """The node's topology, built once per template from its generated sysfs."""

    def __init__(self, config: ExporterConfig, topology: Topology) -> None:
        super().__init__(config)
        self._fixed = topology

    def get(self) -> Topology:
        """The shared topology (a simulated node never hot-plugs)."""
        return self._fixed


class NodeExporter:
    """One node's tree, fake NVML and collectors; :meth:`scrape` renders its /metrics."""

    def __init__(
        self,
        name: str,
        template: NodeTemplate,
        root: Path,
        shared: Path,
        topology: Callable[[Path], Topology],
        clock: Callable[[], float],
        background: bool = False,
    ) -> None:
        self.name = name
        self.template = template
        self.lock = threading.Lock()
        self.tree = NodeTree(root, template, shared)
        self.topology = topology(root)
        config = ExporterConfig(
            paths=HostPaths.under(root),
            hostname=name,
            nvml="fake",
            cross_socket_source="estimate",
        )
        self.context = CollectorContext(config)
        self.context.topology = _FixedTopology(config, self.topology)
        self.fake: FakeNvml | None = None
        if template.gpus:
            self.fake = FakeNvml(
                parse_spec(fake_nvml_description(template), f"sim:{name}"), clock=clock
            )
            source = open_gpu_source("fake", topology=lambda: self.topology, backend=self.fake)
        else:
            source = GpuSource("off", None, "no GPU on this node")
        install_gpu_source(self.context, source)
        self.source = source
        collectors: list[NamedCollector] = []
        for entry in default_table():
            try:
                if entry.name == "gpu":
                    if background:
                        source.start_background()
                    built: Any = GpuCollector(source)
                else:
                    built = entry.factory(self.context)
            except Exception as exc:
                built = BrokenCollector(exc)
            collectors.append(NamedCollector(entry.name, built))
        self.runner = ScrapeRunner(collectors)
        self._gpu_state: dict[int, tuple[object, ...]] = {}
        self._energy: dict[int, Ramp] = {}

    def update(self, snap: NodeSnapshot) -> None:
        """Bring the tree and the fake NVML to the snapshot (hold :attr:`lock`)."""
        self.tree.update(snap)
        if self.fake is not None:
            self._update_gpus(snap)

    def _update_gpus(self, snap: NodeSnapshot) -> None:
        fake = self.fake
        assert fake is not None
        template = self.template
        busy: dict[int, float] = {}
        memory: dict[int, int] = {}
        procs: dict[int, list[FakeProcess]] = {}
        for workload in snap.workloads:
            share = 0.0 if workload.paused else workload.perf.gpu_busy
            for held in workload.allocation.gpus:
                busy[held] = busy.get(held, 0.0) + share
                memory[held] = memory.get(held, 0) + workload.spec.gpu_memory_bytes
                procs.setdefault(held, []).append(
                    FakeProcess(workload.pid, workload.spec.gpu_memory_bytes)
                )
        now = fake.now()
        for gpu in template.gpus:
            index = gpu.index
            util = min(busy.get(index, 0.0), 1.0)
            used = min(memory.get(index, 0), template.gpu_memory_bytes)
            plist = tuple(sorted(procs.get(index, []), key=lambda p: p.pid))
            state = (round(util, 4), used, plist)
            if self._gpu_state.get(index) == state:
                continue
            self._gpu_state[index] = state
            watts = (
                template.gpu_idle_watts
                + util * (template.gpu_power_limit_watts - template.gpu_idle_watts) * 0.9
            )
            fake.set_value(index, "utilization_gpu", round(util * 100))
            fake.set_value(index, "utilization_memory", round(util * 60))
            fake.set_value(index, "memory_used_bytes", float(used))
            fake.set_value(index, "power_mw", watts * 1000)
            fake.set_value(index, "temperature_c", round(30 + 45 * util))
            # host <-> GPU traffic of the input pipeline, in NVML's KB/s
            fake.set_value(index, "pcie_rx_kbps", round(util * 12_000_000))
            fake.set_value(index, "pcie_tx_kbps", round(util * 3_000_000))
            ramp = self._energy.get(index, Ramp(0.0, 0.0))
            energy = ramp.at(now)
            rate = watts * 1000
            self._energy[index] = Ramp(energy - rate * now, rate)
            fake.set_value(index, "energy_mj", self._energy[index])
            fake.set_processes(index, list(plist))

    def render(self) -> bytes:
        """Run the collectors once (hold :attr:`lock`)."""
        return render(self.runner, self.name)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the GPU source's threads and shut the fake NVML down."""
        self.source.close(timeout=timeout)


class ExportersClosed(RuntimeError):
    """The simulated exporters were closed (the simulator is stopping)."""


class SimExporters:
    """A :class:`NodeExporter` per node of a cluster, under one state directory.

    ``background`` starts each GPU source's PCIe sampler and XID watcher threads (two per
    GPU node; ``None``: only for clusters of at most 32 nodes).
    """

    def __init__(
        self, cluster: SimCluster, state_dir: Path, background: bool | None = None
    ) -> None:
        self.cluster = cluster
        self.state_dir = Path(state_dir)
        self.background = background if background is not None else len(cluster.node_names()) <= 32
        self._lock = threading.Lock()
        self._exporters: dict[str, NodeExporter] = {}
        self._topologies: dict[str, Topology] = {}
        #: One lock per template: nodes of a template are built one at a time (they share
        #: the template's static directories).
        self._building: dict[str, threading.Lock] = {}
        self._closed = False

    def _topology(self, template: NodeTemplate) -> Callable[[Path], Topology]:
        def build(root: Path) -> Topology:
            with self._lock:
                found = self._topologies.get(template.name)
            if found is None:
                found = build_from_sysfs(root / "sys", root / "proc")
                with self._lock:
                    found = self._topologies.setdefault(template.name, found)
            return found

        return build

    def exporter(self, name: str) -> NodeExporter:
        """The node's exporter, built (tree written) on first use; ``KeyError`` if unknown,
        :class:`ExportersClosed` once :meth:`close` has begun, :class:`UnsafePathError` if
        the node's or its template's directory would lie outside the state directory.
        """
        with self._lock:
            if self._closed:
                raise ExportersClosed("the simulated exporters are closed")
            found = self._exporters.get(name)
            if found is not None:
                return found
        template = self.cluster.template_of(name)
        root = contained(self.state_dir, self.state_dir / "nodes" / name)
        shared = contained(self.state_dir, self.state_dir / "templates" / template.name)
        with self._lock:
            building = self._building.setdefault(template.name, threading.Lock())
        with building:
            with self._lock:
                if self._closed:
                    raise ExportersClosed("the simulated exporters are closed")
                found = self._exporters.get(name)
            if found is not None:
                return found
            exporter = NodeExporter(
                name,
                template,
                root,
                shared,
                self._topology(template),
                self.cluster.clock,
                self.background,
            )
            with self._lock:
                closed = self._closed
                if not closed:
                    self._exporters[name] = exporter
            if closed:
                exporter.close(timeout=0.0)
                raise ExportersClosed("the simulated exporters are closed")
            return exporter

    def prepare(self, stop: threading.Event) -> int:
        """Build every node's exporter (write its tree) ahead of the first scrape, so that
        Prometheus' first round is as fast as the later ones. Returns how many were built;
        stops early when ``stop`` is set or the exporters are closed. A node that cannot
        be built is logged and skipped (its scrapes will report the error).
        """
        built = 0
        for name in self.cluster.node_names():
            if stop.is_set():
                break
            try:
                self.exporter(name)
            except ExportersClosed:
                break
            except (UnsafePathError, OSError) as exc:
                LOG.error("node %s: cannot write its tree: %s", name, exc)
                continue
            built += 1
        return built

    @contextmanager
    def updated(self, name: str) -> Iterator[NodeExporter]:
        """The node's exporter, locked and brought up to the cluster's state now.

        ``KeyError`` for an unknown node, :class:`ExportersClosed` once :meth:`close` has
        begun (so that nothing is written into trees being removed).
        """
        exporter = self.exporter(name)
        with exporter.lock:
            if self._closed:
                raise ExportersClosed("the simulated exporters are closed")
            exporter.update(self.cluster.node_snapshot(name))
            yield exporter

    def scrape(self, name: str) -> bytes:
        """The node's /metrics text now (``KeyError`` for an unknown node)."""
        with self.updated(name) as exporter:
            return exporter.render()

    def close(self, timeout: float = 5.0) -> None:
        """Stop writing and close every node's GPU source, in about ``timeout`` seconds at
        most (idempotent).

        Builds and scrapes under way finish first; later ones raise
        :class:`ExportersClosed`, so the trees can be removed safely afterwards.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            building = list(self._building.values())
        for lock in building:
            if lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
                lock.release()
        with self._lock:
            exporters = list(self._exporters.values())
            self._exporters.clear()
        for exporter in exporters:
            exporter.source.stop_background(timeout=0.0)
        for exporter in exporters:
            if exporter.lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
                exporter.lock.release()
            exporter.close(timeout=max(deadline - time.monotonic(), 0.0))
