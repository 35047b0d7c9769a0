"""``cross_socket`` collector: traffic between packages, and local/remote memory bandwidth.

Link traffic (``toposcope_cross_socket_bytes_total{package,peer_package,source}``, bytes
sent by ``package`` to ``peer_package``) comes from the best source the host has, in this
order, or from the one ``--cross-socket-source`` names:

1. ``uncore``: UPI/QPI or AMD data-fabric counters opened with ``perf_event_open``
   (:mod:`toposcope.host.perf_uncore`), a measurement;
2. ``pcm``: Intel PCM's pcm-sensor-server, when ``--pcm-url`` is set, a measurement;
3. ``estimate``: a model over numastat counters (:class:`NumastatCrossSocketEstimate`),
   *not* a measurement, labelled ``source="estimate"`` and ``measured="false"``.

Memory bandwidth (``toposcope_numa_memory_bandwidth_bytes_total{numa_node,locality,source}``)
comes from resctrl MBM (:mod:`toposcope.host.resctrl`) wherever it is mounted;
it measures something the link sources do not, so in ``auto`` mode it is published next to
whichever link source was chosen. ``toposcope_cross_socket_source_info`` has one series per
source in use. The choice is made once, when the collector is built (``auto`` falls back,
logging why; a named source that is unavailable makes the collector fail visibly). On a
single-package host nothing crosses sockets: only the source info (and resctrl bandwidth)
is published. docs/cross-socket.md describes the sources and the estimate model.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.errors import ConfigError, NoDataError, SourceError
from toposcope.exporters.context import CollectorContext, HostTopology
from toposcope.exporters.exposition import FamilyWriter
from toposcope.exporters.registry import CollectorEntry
from toposcope.host.pcm import PcmClient, PcmLinkTraffic
from toposcope.host.perf_uncore import (
    CounterBackend,
    PerfEventOpen,
    UncoreLinkCounters,
    perf_event_paranoid,
)
from toposcope.host.resctrl import MbmDomain, ResctrlMbm, resctrl_mount
from toposcope.host.sysfs import NodeNumastat, SysfsNodes
from toposcope.host.uncore_pmus import detect_uncore_pmus, read_cpu_model
from toposcope.topology.model import Topology

LOG = logging.getLogger(__name__)

SOURCE_CHOICES: tuple[str, ...] = ("auto", "uncore", "resctrl", "pcm", "estimate", "off")


def page_size() -> int:
    """The kernel page size numastat counts in (``getconf PAGE_SIZE``); 4096 when unknown."""
    try:
        value = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 4096
    return value if value > 0 else 4096


def node_packages(topology: Topology) -> dict[int, int]:
    """NUMA node -> package, including CPU-less (memory-only) nodes where it can be told.

    A node with CPUs belongs to their package. A CPU-less node (HBM, CXL, PMEM) is given
    the package of its nearest nodes by SLIT distance when those all share one package;
    otherwise it has none and its traffic is not attributed.
    """
    known = topology.node_to_package()
    result = dict(known)
    for node in topology.numa_nodes:
        if node.id in known or not node.distances:
            continue
        candidates = [(d, peer) for peer, d in node.distances.items() if peer in known]
        if not candidates:
            continue
        nearest = min(d for d, _ in candidates)
        packages = {known[peer] for d, peer in candidates if d == nearest}
        if len(packages) == 1:
            result[node.id] = packages.pop()
    return result


class NumastatCrossSocketEstimate:
    """Estimated bytes crossing sockets, from numastat counters (a model, not a measurement).

    Per scrape, for every node A: ``other_node`` grew by ``d`` pages, each a page placed on
    A for a task running on a CPU of another node (kernel ``zone_statistics``). Those pages
    are split over the candidate requesting nodes B (nodes other than A that have CPUs) in
    proportion to how much their ``numa_foreign`` grew (pages B's tasks wanted locally but
    got elsewhere); when no candidate's ``numa_foreign`` grew, in proportion to their CPU
    counts. The share of B on another package than A adds ``share x page size`` bytes to
    ``(package(A), package(B))``: memory of A's package serving B's package. Shares to
    nodes of A's own package are not cross-socket and are dropped.

    ``numa_miss`` is not added on top of ``other_node``: under the default local policy a
    miss on A is also an ``other_node`` allocation on A, so adding both would double count.
    The first scrape counts everything since boot; the result is cumulative and only grows.
    """

    name = "estimate"
    measured = False

    def __init__(self, nodes: SysfsNodes, page_bytes: int | None = None) -> None:
        self._nodes = nodes
        self.page_bytes = page_bytes if page_bytes is not None else page_size()
        self._lock = threading.Lock()
        self._last: dict[tuple[int, str], int] = {}
        self._totals: dict[tuple[int, int], float] = {}

    def available(self) -> bool:
        """True when at least one node has a readable numastat file."""
        return bool(self._nodes.numastat())

    def _increase(self, stats: Mapping[int, NodeNumastat], node: int, key: str) -> int:
        value = stats[node].counts.get(key)
        if value is None:
            return 0
        previous = self._last.get((node, key), 0)
        self._last[(node, key)] = value
        return value - previous if value >= previous else value

    def read(self, topology: Topology) -> dict[tuple[int, int], float]:
        """Estimated bytes ``{(package, peer_package): bytes}`` served across packages so far."""
        stats = self._nodes.numastat()
        packages = node_packages(topology)
        cpus = {n.id: len(n.cpus) for n in topology.numa_nodes if n.cpus}
        with self._lock:
            other = {node: self._increase(stats, node, "other") for node in stats}
            foreign = {node: self._increase(stats, node, "foreign") for node in stats}
            for node, pages in sorted(other.items()):
                package = packages.get(node)
                if pages <= 0 or package is None:
                    continue
                requesters = [b for b in cpus if b != node and b in packages]
                weights = {b: float(foreign.get(b, 0)) for b in requesters}
                if sum(weights.values()) <= 0:
                    weights = {b: float(cpus[b]) for b in requesters}
                total_weight = sum(weights.values())
                if total_weight <= 0:
                    continue
                for requester, weight in weights.items():
                    peer = packages[requester]
                    if peer == package or weight <= 0:
                        continue
                    key = (package, peer)
                    added = pages * weight / total_weight * self.page_bytes
                    self._totals[key] = self._totals.get(key, 0.0) + added
            return dict(self._totals)


@dataclass(frozen=True)
class LinkSource:
    """A chosen source of package-to-package traffic: its label, kind and reader."""

    name: str
    measured: bool
    read: Callable[[Topology], Mapping[tuple[int, int], float]]


@dataclass(frozen=True)
class BandwidthSource:
    """resctrl MBM and the L3 domain -> CPUs map used to place domains on NUMA nodes."""

    mbm: ResctrlMbm
    l3_cpus: Mapping[int, tuple[int, ...]]
    name: str = "resctrl"
    measured: bool = True


def domain_node(
    domain: MbmDomain, l3_cpus: Mapping[int, tuple[int, ...]], topology: Topology
) -> int | None:
    """The NUMA node of an MBM domain: its SNC node, or the one node all its online CPUs are in."""
    if domain.node is not None:
        return domain.node
    cpu_node = topology.cpu_to_node()
    nodes = {cpu_node[c] for c in l3_cpus.get(domain.l3, ()) if c in cpu_node}
    return nodes.pop() if len(nodes) == 1 else None


class CrossSocketCollector:
    """Publishes cross-socket link traffic, resctrl bandwidth and which sources they use."""

    def __init__(
        self,
        topology: HostTopology,
        link: LinkSource | None,
        bandwidth: BandwidthSource | None,
        reason: str = "",
    ) -> None:
        self._topology = topology
        self._link = link
        self._bandwidth = bandwidth
        self._reason = reason or "no cross-socket source"
        self._unplaced: set[MbmDomain] = set()

    @property
    def sources(self) -> list[tuple[str, bool]]:
        """``(source, measured)`` of every source in use."""
        used: list[tuple[str, bool]] = []
        if self._link is not None:
            used.append((self._link.name, self._link.measured))
        if self._bandwidth is not None:
            used.append((self._bandwidth.name, self._bandwidth.measured))
        return used

    def collect(self) -> Iterator[Metric]:
        """Yield source info, link traffic (multi-package hosts) and resctrl bandwidth.

        Raises :class:`NoDataError` when no source is in use (``off``, or nothing found).
        """
        if self._link is None and self._bandwidth is None:
            raise NoDataError(self._reason)
        topology = self._topology.get()
        info = FamilyWriter(spec("toposcope_cross_socket_source_info"))
        for name, measured in self.sources:
            info.add_metric([name, "true" if measured else "false"], 1.0)
        yield info.plain()
        if self._link is not None and len(topology.packages) > 1:
            traffic = FamilyWriter(spec("toposcope_cross_socket_bytes_total"))
            for (package, peer), value in sorted(self._link.read(topology).items()):
                traffic.add_metric([str(package), str(peer), self._link.name], value)
            if traffic:
                yield traffic.plain()
        if self._bandwidth is not None:
            per_node: dict[tuple[int, str], float] = {}
            for domain, totals in sorted(self._bandwidth.mbm.read().items()):
                node = domain_node(domain, self._bandwidth.l3_cpus, topology)
                if node is None:
                    if domain not in self._unplaced:
                        self._unplaced.add(domain)
                        LOG.warning(
                            "resctrl domain mon_L3_%02d spans several NUMA nodes (or has no "
                            "known CPUs); its bandwidth is not published",
                            domain.l3,
                        )
                    continue
                for locality, value in (
                    ("local", totals.local_bytes),
                    ("remote", totals.remote_bytes),
                ):
                    per_node[(node, locality)] = per_node.get((node, locality), 0.0) + value
            bandwidth = FamilyWriter(spec("toposcope_numa_memory_bandwidth_bytes_total"))
            for (node, locality), value in sorted(per_node.items()):
                bandwidth.add_metric([str(node), locality, self._bandwidth.name], value)
            if bandwidth:
                yield bandwidth.plain()


# --------------------------------------------------------------------------- selection


def _uncore_source(ctx: CollectorContext, backend: CounterBackend | None) -> LinkSource:
    paths = ctx.config.paths
    pmus = detect_uncore_pmus(paths.sysfs)
    if not pmus:
        raise SourceError(f"no uncore_upi_*, uncore_qpi_* or amd_df PMU under {paths.sysfs}")
    topology = ctx.topology.get()
    cpu_package = {c.id: c.package for c in topology.cpus if c.package is not None}
    counters = UncoreLinkCounters(
        pmus,
        cpu_package,
        backend if backend is not None else PerfEventOpen(),
        cpu_model=read_cpu_model(paths.procfs),
        paranoid=perf_event_paranoid(paths.procfs),
    )
    counters.open()
    return LinkSource(counters.name, counters.measured, lambda _topology: counters.read())


def _pcm_source(ctx: CollectorContext) -> LinkSource:
    url = ctx.config.pcm_url
    if not url:
        raise SourceError("no --pcm-url given")
    upi_links = {
        pmu.link: pmu.upi_links
        for pmu in detect_uncore_pmus(ctx.config.paths.sysfs)
        if pmu.kind == "upi" and pmu.link is not None
    }
    pcm = PcmLinkTraffic(PcmClient(url), upi_links)
    return LinkSource(
        pcm.name, pcm.measured, lambda topology: pcm.read([p.id for p in topology.packages])
    )


def _estimate_source(ctx: CollectorContext, page_bytes: int | None) -> LinkSource:
    estimate = NumastatCrossSocketEstimate(SysfsNodes(ctx.config.paths.sysfs), page_bytes)
    if not estimate.available():
        raise SourceError(f"no readable node*/numastat under {ctx.config.paths.sysfs}")
    return LinkSource(estimate.name, estimate.measured, estimate.read)


def _resctrl_source(ctx: CollectorContext) -> BandwidthSource:
    root = resctrl_mount(ctx.config.paths)
    if root is None:
        raise SourceError("resctrl is not mounted")
    mbm = ResctrlMbm(root)
    if not mbm.available():
        raise SourceError(f"{root} has no MBM counters (mon_data/mon_L3_*/mbm_*_bytes)")
    return BandwidthSource(mbm, SysfsNodes(ctx.config.paths.sysfs).l3_cache_cpus())


def build_cross_socket(
    ctx: CollectorContext,
    backend: CounterBackend | None = None,
    page_bytes: int | None = None,
) -> CrossSocketCollector:
    """Choose the sources ``ctx.config.cross_socket_source`` asks for and build the collector.

    ``backend`` replaces the real ``perf_event_open`` (tests pass a fake kernel interface);
    ``page_bytes`` the page size of the estimate. A named source that is unavailable raises
    :class:`SourceError` (the exporter shows the collector failing); ``auto`` falls back
    through the sources and logs each reason.
    """
    choice = ctx.config.cross_socket_source
    if choice not in SOURCE_CHOICES:
        raise ConfigError(
            f"cross-socket source must be one of {', '.join(SOURCE_CHOICES)}, not {choice!r}"
        )
    topology = ctx.topology
    if choice == "off":
        return CrossSocketCollector(topology, None, None, "cross-socket source is off")
    if choice == "resctrl":
        return CrossSocketCollector(topology, None, _resctrl_source(ctx))
    if choice != "auto":
        builders: dict[str, Callable[[], LinkSource]] = {
            "uncore": lambda: _uncore_source(ctx, backend),
            "pcm": lambda: _pcm_source(ctx),
            "estimate": lambda: _estimate_source(ctx, page_bytes),
        }
        return CrossSocketCollector(topology, builders[choice](), None)
    reasons: list[str] = []
    link: LinkSource | None = None
    candidates: list[tuple[str, Callable[[], LinkSource]]] = [
        ("uncore", lambda: _uncore_source(ctx, backend)),
        ("pcm", lambda: _pcm_source(ctx)),
        ("estimate", lambda: _estimate_source(ctx, page_bytes)),
    ]
    for name, build in candidates:
        try:
            link = build()
        except SourceError as exc:
            reasons.append(f"{name}: {exc}")
            continue
        break
    bandwidth: BandwidthSource | None = None
    try:
        bandwidth = _resctrl_source(ctx)
    except SourceError as exc:
        reasons.append(f"resctrl: {exc}")
    used = [s for s in (link, bandwidth) if s is not None]
    LOG.info(
        "cross_socket: using %s%s",
        ", ".join(s.name for s in used) or "nothing",
        f" (not available: {'; '.join(reasons)})" if reasons else "",
    )
    return CrossSocketCollector(topology, link, bandwidth, "; ".join(reasons))


ENTRY = CollectorEntry(
    name="cross_socket",
    default_enabled=True,
    factory=build_cross_socket,
    description="inter-socket traffic (uncore, PCM or a numastat estimate) and resctrl bandwidth",
)
