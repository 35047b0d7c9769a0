"""Hand-made cluster models for policy tests (no loaders involved)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from toposcope.advisor.model import (
    ClusterModel,
    GpuState,
    NodeModel,
    NumaNodeState,
    PendingWorkload,
    WorkloadModel,
)
from toposcope.catalogue import CATALOGUE

GIB = 1024**3
ALL_METRICS = frozenset(CATALOGUE)


def numa_nodes(
    count: int = 2,
    cpus_per_node: int = 8,
    free_bytes: float | None = 64 * GIB,
    remote_distance: int = 21,
) -> tuple[NumaNodeState, ...]:
    """``count`` NUMA nodes, one per package, with ``cpus_per_node`` CPUs each."""
    return tuple(
        NumaNodeState(
            id=n,
            package=n,
            cpus=tuple(range(n * cpus_per_node, (n + 1) * cpus_per_node)),
            cpus_online=cpus_per_node,
            memory_total_bytes=128 * GIB,
            memory_free_bytes=free_bytes,
            distances={p: 10 if p == n else remote_distance for p in range(count)},
        )
        for n in range(count)
    )


def gpu(index: int, numa: int, util: float | None = 0.9, **extra: object) -> GpuState:
    """A GPU with utilization ``util`` (mean and peak), 60 samples covering the hour."""
    fields: dict[str, object] = {
        "up": True,
        "utilization": util,
        "utilization_max": util,
        "samples": 60,
        "covered_seconds": 3540.0,
        "memory_used_bytes": 1.0 * GIB,
        "memory_total_bytes": 40.0 * GIB,
    }
    fields.update(extra)
    return GpuState(index=index, numa_node=numa, **fields)  # type: ignore[arg-type]


def links_from_groups(
    gpus: Mapping[int, int], switches: Iterable[Iterable[int]]
) -> dict[tuple[int, int], str]:
    """A link matrix: PIX inside a switch group, NODE on one socket, SYS across sockets."""
    switch_of = {g: i for i, group in enumerate(switches) for g in group}
    links = {}
    for a, na in gpus.items():
        for b, nb in gpus.items():
            if a == b:
                continue
            if switch_of.get(a) is not None and switch_of.get(a) == switch_of.get(b):
                links[(a, b)] = "PIX"
            elif na == nb:
                links[(a, b)] = "NODE"
            else:
                links[(a, b)] = "SYS"
    return links


def pcie4(name: str = "n1", util: float | None = 0.9, **numa: object) -> NodeModel:
    """2 sockets, 4 GPUs: 0,1 on one switch of socket 0 (PIX); 2,3 on socket 1 (NODE)."""
    placement = {0: 0, 1: 0, 2: 1, 3: 1}
    return NodeModel(
        name,
        numa_nodes(**numa),  # type: ignore[arg-type]
        tuple(gpu(g, n, util) for g, n in placement.items()),
        links_from_groups(placement, [(0, 1)]),
    )


def pcie8(name: str = "n8", util: float | None = 0.9) -> NodeModel:
    """2 sockets x 2 PCIe switches x 2 GPUs: {0,1} {2,3} on socket 0, {4,5} {6,7} on 1."""
    placement = {g: g // 4 for g in range(8)}
    return NodeModel(
        name,
        numa_nodes(),
        tuple(gpu(g, n, util) for g, n in placement.items()),
        links_from_groups(placement, [(0, 1), (2, 3), (4, 5), (6, 7)]),
    )


def workload(
    name: str,
    node: str = "n1",
    cpu: Mapping[int, float] | None = None,
    memory: Mapping[int, float] | None = None,
    gpus: Iterable[int] = (),
    threads: Mapping[int, int] | None = None,
) -> WorkloadModel:
    """A workload using ``cpu`` cores and ``memory`` bytes per NUMA node."""
    return WorkloadModel(
        name=name,
        node=node,
        cpu_by_numa=dict(cpu or {}),
        threads_by_numa=dict(threads or {}),
        memory_by_numa=dict(memory or {}),
        gpus=tuple(gpus),
    )


def cluster(
    nodes: Iterable[NodeModel],
    workloads: Iterable[WorkloadModel] = (),
    *,
    present: frozenset[str] = ALL_METRICS,
    pending: Iterable[PendingWorkload] = (),
    window: str = "1h",
    window_seconds: float = 3600.0,
) -> ClusterModel:
    """A cluster model of the given nodes and workloads; a GPU no workload holds idles (its
    utilization 0, as on a real node), so that the builders' busy defaults do not make it a
    GPU busy with something unnamed (which the model does not count free).
    """
    workloads = tuple(workloads)
    held = {(w.node, g) for w in workloads for g in w.gpus}
    return ClusterModel(
        nodes={n.name: _idle_unheld(n, held) for n in nodes},
        workloads=workloads,
        window=window,
        window_seconds=window_seconds,
        source="test",
        present=present,
        pending=tuple(pending),
    )


def _idle_unheld(node: NodeModel, held: set[tuple[str, int]]) -> NodeModel:
    """``node`` with the utilization of every GPU no workload holds set to 0."""
    gpus = tuple(
        g if (node.name, g.index) in held or not g.utilization else replace(g, utilization=0.0)
        for g in node.gpus
    )
    return replace(node, gpus=gpus)
