"""The node page's data: its drawn topology with live values, and its time series."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from toposcope.cpulist import parse_cpulist
from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.prom_frames import NodeIndex, by_key, int_or_none, range_series
from toposcope.dashboards.app.promclient import PromClient
from toposcope.promql.results import Vector
from toposcope.topology.model import LinkType, link_type


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


#: the answer of a query that was not asked
_EMPTY = Vector()


def shape_topology(node: str, answers: Mapping[str, Vector]) -> NodeTopology:
    """Build :class:`NodeTopology` from the answers :func:`load_topology` collects."""
    numa = _numa_views(answers)
    packages = _packages(answers) | {n.package for n in numa if n.package is not None}
    return NodeTopology(
        node, tuple(sorted(packages)), numa, _gpu_views(answers), _links(answers), _nics(answers)
    )


def _packages(answers: Mapping[str, Vector]) -> set[int]:
    """The CPU packages the package info series names."""
    found = (
        int_or_none(s.labels.get("package", ""))
        for s in answers.get(q.PACKAGE_INFO, _EMPTY).samples
    )
    return {p for p in found if p is not None}


def _numa_views(answers: Mapping[str, Vector]) -> tuple[NumaView, ...]:
    """The NUMA nodes the NUMA info series names, by id, with their live memory and CPU use."""
    numa_package: dict[int, int | None] = {}
    numa_cpus: dict[int, str] = {}
    for s in answers.get(q.NUMA_INFO, _EMPTY).samples:
        numa_id = int_or_none(s.labels.get("numa_node", ""))
        if numa_id is not None:
            numa_package[numa_id] = int_or_none(s.labels.get("package", ""))
            numa_cpus[numa_id] = s.labels.get("cpus", "")
    total = by_key(answers.get(q.NUMA_MEM_TOTAL, _EMPTY), "numa_node")
    used = by_key(answers.get(q.NUMA_MEM_USED, _EMPTY), "numa_node")
    busy = by_key(answers.get("busy", _EMPTY), "numa_node")
    return tuple(
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


def _gpu_places(answers: Mapping[str, Vector]) -> tuple[dict[int, int | None], dict[int, str]]:
    """Each GPU's NUMA node (the first one reported) and model name, by GPU index."""
    gpu_numa: dict[int, int | None] = {}
    models: dict[int, str] = {}
    for name in (q.GPU_LOCALITY, q.GPU_INFO):
        for s in answers.get(name, _EMPTY).samples:
            index = int_or_none(s.labels.get("gpu", ""))
            if index is None:
                continue
            numa_node = int_or_none(s.labels.get("numa_node", ""))
            if gpu_numa.get(index) is None:
                gpu_numa[index] = numa_node
            if s.labels.get("modelName"):
                models[index] = s.labels["modelName"]
    return gpu_numa, models


def _gpu_holders(answers: Mapping[str, Vector]) -> dict[int, list[str]]:
    """The workloads holding each GPU, by GPU index."""
    holders: dict[int, list[str]] = {}
    for s in answers.get(q.WORKLOAD_GPU, _EMPTY).samples:
        index = int_or_none(s.labels.get("gpu", ""))
        if index is not None:
            holders.setdefault(index, []).append(s.labels.get("workload", ""))
    return holders


def _gpu_views(answers: Mapping[str, Vector]) -> tuple[GpuView, ...]:
    """The GPUs the locality, info or up series name, by index, with their live values."""
    gpu_numa, models = _gpu_places(answers)
    up, util, mem_used, mem_total, power = (
        by_key(answers.get(name, _EMPTY), "gpu")
        for name in (q.GPU_UP, q.GPU_UTIL, q.GPU_MEM_USED, q.GPU_MEM_TOTAL, q.GPU_POWER)
    )
    holders = _gpu_holders(answers)
    indexes = sorted(set(gpu_numa) | {i for i in map(int_or_none, up) if i is not None})
    return tuple(
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


def _links(answers: Mapping[str, Vector]) -> tuple[LinkView, ...]:
    """The GPU-to-GPU links, one per pair (the first reported), sorted by pair; a link to
    itself or one whose type is unknown is left out.
    """
    links: dict[tuple[int, int], LinkView] = {}
    for s in answers.get(q.GPU_LINK, _EMPTY).samples:
        a, b = int_or_none(s.labels.get("gpu", "")), int_or_none(s.labels.get("peer_gpu", ""))
        text = s.labels.get("link", "")
        if a is None or b is None or a == b or not text:
            continue
        try:
            kind = link_type(text)
        except ValueError:
            continue
        key = (min(a, b), max(a, b))
        links.setdefault(key, LinkView(key[0], key[1], text, kind))
    return tuple(links[k] for k in sorted(links))


def _nics(answers: Mapping[str, Vector]) -> tuple[NicView, ...]:
    """The network controllers and their NUMA nodes, sorted by PCI bus id."""
    nics = (
        NicView(s.labels.get("pci_bus_id", ""), int_or_none(s.labels.get("numa_node", "")))
        for s in answers.get("nics", _EMPTY).samples
    )
    return tuple(sorted(nics, key=lambda n: n.bus_id))


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
    series = range_series(prom, index, range_, now)
    match = index.selector(node)

    return NodeSeries(
        numa_memory=series(q.numa_memory_used(match), "numa_node"),
        numa_cpu=series(q.numa_cpu_busy(match), "numa_node"),
        gpu_utilization=series(q.of_node(q.GPU_UTIL, match), "gpu"),
        gpu_memory=series(q.of_node(q.GPU_MEM_USED, match), "gpu"),
        gpu_power=series(q.of_node(q.GPU_POWER, match), "gpu"),
        gpu_throttle=series(q.gpu_throttled(match), "gpu"),
    )


def _cpu_count(cpus: str) -> int:
    """How many CPUs a scraped ``cpus`` label lists (0 when empty or malformed)."""
    try:
        return len(parse_cpulist(cpus)) if cpus else 0
    except ValueError:
        return 0
