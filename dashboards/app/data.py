"""What each page shows, read from Prometheus and shaped with pandas.

The ``load_*`` functions run the page's queries through a :class:`PromClient` and return
frozen dataclasses of pandas frames; the shaping helpers (:func:`vector_frame`,
:func:`matrix_frame`, :class:`NodeIndex`) are pure and tested on hand-made answers.

Which node a series belongs to is the core's rule, shared with the advisor
(:class:`toposcope.nodeidentity.NodeNamer`): the ``node`` label when present (the simulator's
file_sd targets set it), else the ``hostname`` that the exporter reports on
``toposcope_exporter_build_info`` for the same ``(job, instance)``, else ``instance``; the
app's ``--node-label`` forces one label instead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from toposcope.cpulist import parse_cpulist
from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.promclient import PromClient
from toposcope.nodeidentity import AUTO, NodeNamer
from toposcope.promtypes import Matrix, Vector
from toposcope.topology.model import LinkType, link_type

#: the time ranges the app offers, PromQL duration -> seconds
RANGES: dict[str, int] = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400}
DEFAULT_RANGE = "1h"
#: points per series a range query asks for
POINTS = 200


def range_seconds(range_: str) -> int:
    """Seconds of one of :data:`RANGES` (``ValueError`` for others)."""
    try:
        return RANGES[range_]
    except KeyError:
        raise ValueError(f"unknown time range {range_!r} (known: {', '.join(RANGES)})") from None


def step_for(seconds: float) -> float:
    """Step of a range query over ``seconds``: about :data:`POINTS` points, at least 1 s."""
    return max(1.0, round(seconds / POINTS))


class NodeIndex:
    """Names nodes with the core's rule and selects a node's series by its scrape targets.

    ``build_info`` is the answer for ``toposcope_exporter_build_info``; ``node_label`` is
    the app's ``--node-label`` (:data:`~toposcope.nodeidentity.AUTO` by default).
    """

    def __init__(self, build_info: Vector, node_label: str = AUTO) -> None:
        self.namer = NodeNamer((s.labels for s in build_info.samples), node_label)

    def name(self, labels: Mapping[str, str]) -> str:
        """The node a series with ``labels`` belongs to."""
        return self.namer(labels)

    @property
    def nodes(self) -> list[str]:
        """Every node name, sorted."""
        return self.namer.nodes

    def targets(self, node: str) -> list[tuple[str, str]]:
        """The ``(job, instance)`` scrape targets of ``node``."""
        return self.namer.targets(node)

    def selector(self, node: str, extra: Mapping[str, str] | None = None) -> str:
        """PromQL label matchers for ``node``'s series (``LookupError`` for unknown nodes)."""
        targets = self.targets(node)
        if not targets:
            raise LookupError(f"no exporter reports node {node!r}")
        return q.selector(targets, extra)


def load_index(prom: PromClient, node_label: str = AUTO) -> NodeIndex:
    """The node index of the exporters Prometheus scrapes now."""
    return NodeIndex(prom.query(q.BUILD_INFO), node_label)


def vector_frame(
    vector: Vector, index: NodeIndex, labels: Sequence[str] = (), value: str = "value"
) -> pd.DataFrame:
    """One row per sample: ``node``, the requested ``labels`` (empty when absent), ``value``."""
    rows = [
        {"node": index.name(s.labels), **{k: s.labels.get(k, "") for k in labels}, value: s.value}
        for s in vector.samples
    ]
    return pd.DataFrame(rows, columns=["node", *labels, value])


def matrix_frame(matrix: Matrix, index: NodeIndex, labels: Sequence[str] = ()) -> pd.DataFrame:
    """Long format: one row per point with ``time`` (UTC), ``node``, ``labels``, ``value``."""
    frames = []
    for series in matrix.series:
        if not series.points:
            continue
        times, values = zip(*series.points, strict=True)
        frame = pd.DataFrame({"time": times, "value": values})
        frame["node"] = index.name(series.labels)
        for key in labels:
            frame[key] = series.labels.get(key, "")
        frames.append(frame)
    columns = ["time", "node", *labels, "value"]
    if not frames:
        return pd.DataFrame(columns=columns)
    out = pd.concat(frames, ignore_index=True)
    out["time"] = pd.to_datetime(out["time"], unit="s", utc=True)
    return out[columns]


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# -- cluster -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterData:
    """The cluster page: every GPU with its use, the node locality scores, the idle GPUs.

    ``gpus`` has ``node``, ``gpu`` (int), ``up``, ``utilization`` (average over the range),
    ``memory_ratio`` and ``holder`` (workloads holding it, comma-separated); ``locality`` has
    ``node`` and ``score``. ``dropped`` counts NaN or infinite samples Prometheus answered.
    """

    nodes: tuple[str, ...]
    gpus: pd.DataFrame
    locality: pd.DataFrame
    range_: str
    dropped: int = 0

    @property
    def idle(self) -> pd.DataFrame:
        """GPUs that are up and averaged under :data:`queries.IDLE_UTILIZATION`."""
        gpus = self.gpus
        mask = (gpus["up"] == 1) & (gpus["utilization"].fillna(0.0) < q.IDLE_UTILIZATION)
        return gpus[mask].sort_values(["node", "gpu"]).reset_index(drop=True)


def load_cluster(
    prom: PromClient, range_: str = DEFAULT_RANGE, node_label: str = AUTO
) -> ClusterData:
    """Query the cluster page's data (instant queries at now)."""
    range_seconds(range_)
    index = load_index(prom, node_label)
    up = prom.query(q.GPU_UP)
    util = prom.query(q.gpu_utilization_avg(range_))
    memory = prom.query(q.gpu_memory_ratio())
    holders = prom.query(q.WORKLOAD_GPU)
    locality = prom.query(q.node_locality())
    return shape_cluster(index, up, util, memory, holders, locality, range_)


def shape_cluster(
    index: NodeIndex,
    up: Vector,
    util: Vector,
    memory: Vector,
    holders: Vector,
    locality: Vector,
    range_: str,
) -> ClusterData:
    """Join the cluster page's answers into one GPU frame and the locality scores."""
    gpus = vector_frame(up, index, ["gpu"], "up")
    for vector, column in ((util, "utilization"), (memory, "memory_ratio")):
        part = vector_frame(vector, index, ["gpu"], column).drop_duplicates(["node", "gpu"])
        gpus = gpus.merge(part, on=["node", "gpu"], how="left")
    held = vector_frame(holders, index, ["gpu", "workload"])
    if not held.empty:
        names = held.groupby(["node", "gpu"])["workload"].agg(lambda w: ", ".join(sorted(w)))
        gpus = gpus.merge(names.rename("holder").reset_index(), on=["node", "gpu"], how="left")
    else:
        gpus["holder"] = ""
    gpus["holder"] = gpus["holder"].fillna("")
    gpus["gpu"] = pd.to_numeric(gpus["gpu"], errors="coerce")
    gpus = gpus.dropna(subset=["gpu"]).astype({"gpu": int})
    gpus = gpus.sort_values(["node", "gpu"]).reset_index(drop=True)
    scores = vector_frame(locality, index, (), "score").groupby("node", as_index=False).mean()
    nodes = sorted(set(index.nodes) | set(gpus["node"]))
    dropped = sum(v.non_finite for v in (up, util, memory, holders, locality))
    return ClusterData(tuple(nodes), gpus, scores, range_, dropped)


def heatmap_matrix(gpus: pd.DataFrame, column: str) -> pd.DataFrame:
    """Nodes (rows) by GPU index (columns) of ``column``; lost GPUs are NaN."""
    if gpus.empty:
        return pd.DataFrame()
    values = gpus.assign(value=gpus[column].where(gpus["up"] == 1))
    return values.pivot_table(
        index="node", columns="gpu", values="value", aggfunc="mean", dropna=False
    )


# -- node --------------------------------------------------------------------------------


@dataclass(frozen=True)
class NumaView:
    """A NUMA node with its package, CPUs and live memory and CPU use."""

    id: int
    package: int | None
    cpus: str
    cpu_count: int
    memory_total: float | None
    memory_used: float | None
    cpu_busy: float | None


@dataclass(frozen=True)
class GpuView:
    """A GPU with its NUMA node and live values (``None`` when not reported)."""

    index: int
    numa_node: int | None
    model: str
    up: bool
    utilization: float | None
    memory_used: float | None
    memory_total: float | None
    power: float | None
    holders: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinkView:
    """A GPU-to-GPU link (``a < b``) as ``nvidia-smi topo -m`` names it."""

    a: int
    b: int
    link: str
    kind: LinkType


@dataclass(frozen=True)
class NicView:
    """A network controller and the NUMA node it hangs off."""

    bus_id: str
    numa_node: int | None


@dataclass(frozen=True)
class NodeTopology:
    """One node's drawn topology: packages, NUMA nodes, GPUs, GPU links and NICs."""

    name: str
    packages: tuple[int, ...]
    numa: tuple[NumaView, ...]
    gpus: tuple[GpuView, ...]
    links: tuple[LinkView, ...]
    nics: tuple[NicView, ...]


def _by_key(vector: Vector, key: str) -> dict[str, float]:
    return {s.labels.get(key, ""): s.value for s in vector.samples}


def load_topology(prom: PromClient, index: NodeIndex, node: str) -> NodeTopology:
    """The topology of ``node`` with live values (instant queries at now)."""
    match = index.selector(node)
    answers = {
        name: prom.query(q.of_node(name, match))
        for name in (
            q.PACKAGE_INFO,
            q.NUMA_INFO,
            q.NUMA_MEM_TOTAL,
            q.NUMA_MEM_USED,
            q.GPU_LOCALITY,
            q.GPU_INFO,
            q.GPU_UP,
            q.GPU_UTIL,
            q.GPU_MEM_USED,
            q.GPU_MEM_TOTAL,
            q.GPU_POWER,
            q.GPU_LINK,
            q.WORKLOAD_GPU,
        )
    }
    answers["busy"] = prom.query(q.numa_cpu_busy(match))
    answers["nics"] = prom.query(q.nics(match))
    return shape_topology(node, answers)


def shape_topology(node: str, answers: Mapping[str, Vector]) -> NodeTopology:
    """Build :class:`NodeTopology` from the answers :func:`load_topology` collects."""
    empty = Vector()
    numa_package: dict[int, int | None] = {}
    numa_cpus: dict[int, str] = {}
    for s in answers.get(q.NUMA_INFO, empty).samples:
        numa_id = _int_or_none(s.labels.get("numa_node", ""))
        if numa_id is not None:
            numa_package[numa_id] = _int_or_none(s.labels.get("package", ""))
            numa_cpus[numa_id] = s.labels.get("cpus", "")
    packages = {
        p
        for p in (
            _int_or_none(s.labels.get("package", ""))
            for s in answers.get(q.PACKAGE_INFO, empty).samples
        )
        if p is not None
    }
    packages |= {p for p in numa_package.values() if p is not None}
    total = _by_key(answers.get(q.NUMA_MEM_TOTAL, empty), "numa_node")
    used = _by_key(answers.get(q.NUMA_MEM_USED, empty), "numa_node")
    busy = _by_key(answers.get("busy", empty), "numa_node")
    numa = tuple(
        NumaView(
            id=n,
            package=numa_package[n],
            cpus=numa_cpus[n],
            cpu_count=_cpu_count(numa_cpus[n]),
            memory_total=total.get(str(n)),
            memory_used=used.get(str(n)),
            cpu_busy=busy.get(str(n)),
        )
        for n in sorted(numa_package)
    )
    gpu_numa: dict[int, int | None] = {}
    models: dict[int, str] = {}
    for name in (q.GPU_LOCALITY, q.GPU_INFO):
        for s in answers.get(name, empty).samples:
            index = _int_or_none(s.labels.get("gpu", ""))
            if index is None:
                continue
            numa_node = _int_or_none(s.labels.get("numa_node", ""))
            if gpu_numa.get(index) is None:
                gpu_numa[index] = numa_node
            if s.labels.get("modelName"):
                models[index] = s.labels["modelName"]
    up = _by_key(answers.get(q.GPU_UP, empty), "gpu")
    util = _by_key(answers.get(q.GPU_UTIL, empty), "gpu")
    mem_used = _by_key(answers.get(q.GPU_MEM_USED, empty), "gpu")
    mem_total = _by_key(answers.get(q.GPU_MEM_TOTAL, empty), "gpu")
    power = _by_key(answers.get(q.GPU_POWER, empty), "gpu")
    holders: dict[int, list[str]] = {}
    for s in answers.get(q.WORKLOAD_GPU, empty).samples:
        index = _int_or_none(s.labels.get("gpu", ""))
        if index is not None:
            holders.setdefault(index, []).append(s.labels.get("workload", ""))
    indexes = sorted(set(gpu_numa) | {i for i in map(_int_or_none, up) if i is not None})
    gpus = tuple(
        GpuView(
            index=i,
            numa_node=gpu_numa.get(i),
            model=models.get(i, ""),
            up=up.get(str(i), 1.0) == 1.0,
            utilization=util.get(str(i)),
            memory_used=mem_used.get(str(i)),
            memory_total=mem_total.get(str(i)),
            power=power.get(str(i)),
            holders=tuple(sorted(holders.get(i, []))),
        )
        for i in indexes
    )
    links: dict[tuple[int, int], LinkView] = {}
    for s in answers.get(q.GPU_LINK, empty).samples:
        a, b = _int_or_none(s.labels.get("gpu", "")), _int_or_none(s.labels.get("peer_gpu", ""))
        text = s.labels.get("link", "")
        if a is None or b is None or a == b or not text:
            continue
        try:
            kind = link_type(text)
        except ValueError:
            continue
        key = (min(a, b), max(a, b))
        links.setdefault(key, LinkView(key[0], key[1], text, kind))
    nics = tuple(
        sorted(
            (
                NicView(s.labels.get("pci_bus_id", ""), _int_or_none(s.labels.get("numa_node", "")))
                for s in answers.get("nics", empty).samples
            ),
            key=lambda n: n.bus_id,
        )
    )
    return NodeTopology(
        node, tuple(sorted(packages)), numa, gpus, tuple(links[k] for k in sorted(links)), nics
    )


@dataclass(frozen=True)
class NodeSeries:
    """The node page's time series, long frames with ``time``, a key column and ``value``."""

    numa_memory: pd.DataFrame
    numa_cpu: pd.DataFrame
    gpu_utilization: pd.DataFrame
    gpu_memory: pd.DataFrame
    gpu_power: pd.DataFrame
    gpu_throttle: pd.DataFrame


def load_node_series(
    prom: PromClient, index: NodeIndex, node: str, range_: str, now: float | None = None
) -> NodeSeries:
    """Range queries over ``range_`` ending now for ``node``."""
    seconds = range_seconds(range_)
    end = time.time() if now is None else now
    start, step = end - seconds, step_for(seconds)
    match = index.selector(node)

    def series(expr: str, key: str) -> pd.DataFrame:
        return matrix_frame(prom.query_range(expr, start, end, step), index, [key])

    return NodeSeries(
        numa_memory=series(q.numa_memory_used(match), "numa_node"),
        numa_cpu=series(q.numa_cpu_busy(match), "numa_node"),
        gpu_utilization=series(q.of_node(q.GPU_UTIL, match), "gpu"),
        gpu_memory=series(q.of_node(q.GPU_MEM_USED, match), "gpu"),
        gpu_power=series(q.of_node(q.GPU_POWER, match), "gpu"),
        gpu_throttle=series(q.gpu_throttled(match), "gpu"),
    )


# -- workload ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadRef:
    """A workload on a node (workload names are unique per node only)."""

    node: str
    workload: str

    @property
    def key(self) -> str:
        """``node/workload``, the value the workload selector carries."""
        return f"{self.node}/{self.workload}"

    @classmethod
    def parse(cls, key: str) -> WorkloadRef:
        """The inverse of :attr:`key` (``ValueError`` without a ``/``)."""
        node, sep, workload = key.partition("/")
        if not sep or not node or not workload:
            raise ValueError(f"a workload is NODE/NAME, not {key!r}")
        return cls(node, workload)


def load_workloads(prom: PromClient, index: NodeIndex) -> list[WorkloadRef]:
    """Every workload the exporters track, sorted by node and name."""
    found = {
        WorkloadRef(index.name(s.labels), s.labels.get("workload", ""))
        for s in prom.query(q.WORKLOAD_INFO).samples
        if s.labels.get("workload")
    }
    return sorted(found, key=lambda w: (w.node, w.workload))


@dataclass(frozen=True)
class WorkloadData:
    """The workload page: where its CPU time and memory are, its GPUs and locality ratios."""

    ref: WorkloadRef
    gpus: tuple[int, ...]
    gpu_numa: tuple[int, ...]
    cores: pd.DataFrame
    memory: pd.DataFrame
    locality: pd.DataFrame
    latest_locality: Mapping[str, float] = field(default_factory=dict)


def load_workload(
    prom: PromClient, index: NodeIndex, ref: WorkloadRef, range_: str, now: float | None = None
) -> WorkloadData:
    """The workload's series over ``range_`` ending now, and its GPUs' NUMA nodes."""
    seconds = range_seconds(range_)
    end = time.time() if now is None else now
    start, step = end - seconds, step_for(seconds)
    node_match = index.selector(ref.node)
    match = index.selector(ref.node, {"workload": ref.workload})
    held = prom.query(q.of_node(q.WORKLOAD_GPU, match))
    gpus = tuple(
        sorted(
            {i for s in held.samples if (i := _int_or_none(s.labels.get("gpu", ""))) is not None}
        )
    )
    gpu_numa: set[int] = set()
    if gpus:
        for s in prom.query(q.of_node(q.GPU_LOCALITY, node_match)).samples:
            index_ = _int_or_none(s.labels.get("gpu", ""))
            numa = _int_or_none(s.labels.get("numa_node", ""))
            if index_ in gpus and numa is not None:
                gpu_numa.add(numa)

    def series(expr: str, key: str) -> pd.DataFrame:
        return matrix_frame(prom.query_range(expr, start, end, step), index, [key])

    locality = series(q.of_node(q.WORKLOAD_LOCALITY, match), "resource")
    latest = _by_key(prom.query(q.of_node(q.WORKLOAD_LOCALITY, match)), "resource")
    return WorkloadData(
        ref=ref,
        gpus=gpus,
        gpu_numa=tuple(sorted(gpu_numa)),
        cores=series(q.workload_cores(match), "numa_node"),
        memory=series(q.of_node(q.WORKLOAD_MEMORY, match), "numa_node"),
        locality=locality,
        latest_locality=latest,
    )


def _cpu_count(cpus: str) -> int:
    """How many CPUs a scraped ``cpus`` label lists (0 when empty or malformed)."""
    try:
        return len(parse_cpulist(cpus)) if cpus else 0
    except ValueError:
        return 0
