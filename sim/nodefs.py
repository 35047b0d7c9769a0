"""Per-node metrics from the exporter's own collectors, over generated trees and a fake NVML.

Every simulated node gets what a real node's exporter reads:

* a host tree (``sys/``, ``proc/``, a cgroup v2 hierarchy) under ``<state dir>/nodes/<name>``,
  written by :class:`~toposcope.sim.nodetree.NodeTree` and updated on each scrape of that
  node (structure when a workload's allocation changed, counters when simulated time moved);
* a fake NVML (:class:`~toposcope.fake_nvml.FakeNvml`) built from the
  template's GPUs (:func:`~toposcope.sim.nvml_descriptions.fake_nvml_description`), whose
  utilization, memory, power, temperature, energy and process list (with each process's
  per-process utilization samples, :func:`~toposcope.sim.gpu_activity.process_shares`)
  follow the jobs on each GPU, and whose PCIe and NVLink bytes and SM, occupancy, tensor
  and DRAM activity are the cluster's integrals of each GPU's flows
  (:mod:`toposcope.sim.gpu_traffic`, answered as GPM or field values by
  :mod:`toposcope.sim.nvml_activity`); the GPU source reads the fake on the clock's counter
  time, so GPM's intervals are the counters' own;
* the exporter's collectors, unchanged, with ``hostname`` set to the node's name
  (:class:`NodeExporter`). The topology is built once per template from the generated
  sysfs, exactly as the exporter would build it, and shared.

:class:`SimExporters` holds one :class:`NodeExporter` per node, built on first scrape, each
with its own lock so that different nodes scrape in parallel. A cluster of at most
:data:`PREPARE_MAX_NODES` nodes also has every tree written ahead of the first scrape
(:meth:`SimExporters.prepare`); a larger one writes nothing per node until that node is
first scraped, so that it starts in seconds and holds only the trees being read.

Every directory a tree creates or removes is checked to lie inside the node's root first
(:func:`toposcope.sim.paths.contained`), and every node's root inside the state directory:
a workload whose name would lead outside is refused and logged, never written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Container, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toposcope.config import ExporterConfig, HostPaths
from toposcope.exporters.app import render
from toposcope.exporters.collectors import default_table
from toposcope.exporters.collectors.gpu import GpuCollector
from toposcope.exporters.context import CollectorContext, HostTopology
from toposcope.exporters.gpu_source import GpuSource, install_gpu_source, open_gpu_source
from toposcope.exporters.runner import BrokenCollector, NamedCollector, ScrapeRunner
from toposcope.fake_nvml import FakeNvml, FakeProcess, Ramp, parse_spec
from toposcope.sim.cluster import NodeSnapshot, SimCluster
from toposcope.sim.gpu_activity import GpuLoad, gpu_loads, gpu_watts, process_shares
from toposcope.sim.gpu_traffic import GpuCounters, GpuFlow, gpu_flows
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.nodetree import NodeTree
from toposcope.sim.nvml_activity import field_value_readings, gpm_readings
from toposcope.sim.nvml_descriptions import fake_nvml_description, has_gpm, nvlink_lanes
from toposcope.sim.paths import UnsafePathError, contained
from toposcope.topology.model import Topology
from toposcope.topology.sysfs import build_from_sysfs

LOG = logging.getLogger("toposcope.sim")

#: Most nodes whose trees :meth:`SimExporters.prepare` writes ahead of the first scrape (the
#: built-in ``large`` scenario's 1,000); a larger cluster builds each node on first use.
PREPARE_MAX_NODES = 1_000


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
        network: Container[str] = frozenset(),
        cabled: Collection[str] | None = None,
    ) -> None:
        self.name = name
        self.template = template
        self.lock = threading.Lock()
        self.tree = NodeTree(root, template, shared, network, cabled)
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
        self.gpm = has_gpm(template.gpu_model)
        self.lanes: dict[int, dict[int, tuple[int, ...]]] = {}
        if template.gpus:
            self.fake = FakeNvml(
                parse_spec(fake_nvml_description(template), f"sim:{name}"), clock=clock
            )
            self.lanes = nvlink_lanes(template)
            source = open_gpu_source(
                "fake", topology=lambda: self.topology, backend=self.fake, clock=clock
            )
        else:
            source = GpuSource("off", None, "no GPU on this node")
        install_gpu_source(self.context, source)
        self.source = source
        collectors: list[NamedCollector] = []
        for entry in default_table():
            if not entry.default_enabled:
                continue
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
        #: counter time and counters of the last update that set the GPM readings
        self._gpm_mark: tuple[float, dict[int, GpuCounters]] = (0.0, {})
        #: GPUs whose GPM readings are the idle ones already
        self._gpm_idle: set[int] = set()
        #: the byte counters last given to the fake's field values, per GPU
        self._published: dict[int, GpuCounters] = {}

    def update(self, snap: NodeSnapshot) -> None:
        """Bring the tree and the fake NVML to the snapshot (hold :attr:`lock`)."""
        self.tree.update(snap)
        if self.fake is not None:
            self._update_gpus(snap)

    def _update_gpus(self, snap: NodeSnapshot) -> None:
        """Set each GPU's readings from the workloads holding it: utilisation as NVML counts
        it, and power, temperature and traffic from its compute share
        (:mod:`toposcope.sim.gpu_activity`); the energy counter is the cluster's integral of
        the same power, re-anchored on every update.
        """
        fake = self.fake
        assert fake is not None
        template = self.template
        memory: dict[int, int] = {}
        procs: dict[int, list[FakeProcess]] = {}
        running = [w for w in snap.workloads if not w.paused]
        shares = process_shares((w.pid, w.allocation.gpus, w.perf.gpu_busy) for w in running)
        for workload in snap.workloads:
            for held in workload.allocation.gpus:
                memory[held] = memory.get(held, 0) + workload.spec.gpu_memory_bytes
                share = shares.get(held, {}).get(workload.pid)
                procs.setdefault(held, []).append(
                    FakeProcess(
                        workload.pid,
                        workload.spec.gpu_memory_bytes,
                        sm_util=round(share * 100, 2) if share is not None else None,
                    )
                )
        loads = gpu_loads((w.allocation.gpus, w.perf.gpu_busy, w.perf.gpu_compute) for w in running)
        flows = gpu_flows(template, ((w.spec, w.allocation.gpus, w.perf) for w in running))
        now = fake.now()
        for gpu in template.gpus:
            index = gpu.index
            load = loads.get(index, GpuLoad())
            flow = flows.get(index, GpuFlow())
            watts = gpu_watts(template, load)
            energy_mj = snap.gpu_energy.get(index, 0.0) * 1000
            fake.set_value(index, "energy_mj", Ramp(energy_mj - watts * 1000 * now, watts * 1000))
            used = min(memory.get(index, 0), template.gpu_memory_bytes)
            plist = tuple(sorted(procs.get(index, []), key=lambda p: p.pid))
            # host <-> GPU traffic, in NVML's KB/s
            pcie = (round(flow.pcie_tx / 1000), round(flow.pcie_rx / 1000))
            state = (round(load.busy, 4), round(load.compute, 4), used, plist, pcie)
            if self._gpu_state.get(index) == state:
                continue
            self._gpu_state[index] = state
            compute = load.compute
            fake.set_value(index, "utilization_gpu", round(load.busy * 100))
            fake.set_value(index, "utilization_memory", round(compute * 60))
            fake.set_value(index, "memory_used_bytes", float(used))
            fake.set_value(index, "power_mw", watts * 1000)
            fake.set_value(index, "temperature_c", round(30 + 45 * compute))
            fake.set_value(index, "pcie_tx_kbps", pcie[0])
            fake.set_value(index, "pcie_rx_kbps", pcie[1])
            fake.set_processes(index, list(plist))
        self._publish_counters(fake, snap)

    def _publish_counters(self, fake: FakeNvml, snap: NodeSnapshot) -> None:
        """Give the fake each GPU's traffic and activity counters (see
        :mod:`toposcope.sim.nvml_activity`): GPM means since the last update with counter
        time between them, or the field values' byte counters; a GPU that never ran a job
        keeps its idle readings.
        """
        counters = snap.gpu_counters
        if self.gpm:
            since, before = self._gpm_mark
            seconds = snap.counter_time - since
            if seconds <= 0:
                return
            self._gpm_mark = (snap.counter_time, counters)
            for index, now in counters.items():
                previous = before.get(index, GpuCounters())
                idle = now == previous
                if idle and index in self._gpm_idle:
                    continue
                readings = gpm_readings(now, previous, seconds, self.lanes.get(index, {}))
                for name, value in readings.items():
                    fake.set_value(index, name, value)
                if idle:
                    self._gpm_idle.add(index)
                else:
                    self._gpm_idle.discard(index)
            return
        for index, now in counters.items():
            if self._published.get(index) == now:
                continue
            for name, value in field_value_readings(now, self.lanes.get(index, {})).items():
                fake.set_value(index, name, value)
            self._published[index] = now

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
    GPU node; ``None``: only for clusters of at most 32 nodes). :attr:`eager` says whether
    :meth:`prepare` builds every node (clusters of at most :data:`PREPARE_MAX_NODES`).
    ``network`` names the workloads that are parts of multi-node jobs: their GPUs' traffic
    goes through their nodes' NICs (:mod:`toposcope.sim.nicfs`); ``cabled`` the NICs the
    fabric cables to a switch, by node (a node not in it: every NIC).
    """

    def __init__(
        self,
        cluster: SimCluster,
        state_dir: Path,
        background: bool | None = None,
        network: Container[str] = frozenset(),
        cabled: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        self.cluster = cluster
        self.network = network
        self.cabled = dict(cabled or {})
        self.state_dir = Path(state_dir)
        nodes = len(cluster.node_names())
        self.background = background if background is not None else nodes <= 32
        self.eager = nodes <= PREPARE_MAX_NODES
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
                self.cluster.clock.counter_time,
                self.background,
                self.network,
                self.cabled.get(name),
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
        be built is logged and skipped (its scrapes will report the error). Builds nothing
        unless :attr:`eager`: a larger cluster's nodes are built on first scrape only.
        """
        built = 0
        if not self.eager:
            return built
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
