"""The workload page's data: the workloads the exporters track, and where one's CPU time and
memory are, its GPUs and its locality ratios.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.prom_frames import NodeIndex, by_key, int_or_none, range_series
from toposcope.dashboards.app.promclient import PromClient


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
    series = range_series(prom, index, range_, now)
    node_match = index.selector(ref.node)
    match = index.selector(ref.node, {"workload": ref.workload})
    held = prom.query(q.of_node(q.WORKLOAD_GPU, match))
    gpus = tuple(
        sorted({i for s in held.samples if (i := int_or_none(s.labels.get("gpu", ""))) is not None})
    )
    gpu_numa: set[int] = set()
    if gpus:
        for s in prom.query(q.of_node(q.GPU_LOCALITY, node_match)).samples:
            index_ = int_or_none(s.labels.get("gpu", ""))
            numa = int_or_none(s.labels.get("numa_node", ""))
            if index_ in gpus and numa is not None:
                gpu_numa.add(numa)

    locality = series(q.of_node(q.WORKLOAD_LOCALITY, match), "resource")
    latest = by_key(prom.query(q.of_node(q.WORKLOAD_LOCALITY, match)), "resource")
    return WorkloadData(
        ref=ref,
        gpus=gpus,
        gpu_numa=tuple(sorted(gpu_numa)),
        cores=series(q.workload_cores(match), "numa_node"),
        memory=series(q.of_node(q.WORKLOAD_MEMORY, match), "numa_node"),
        locality=locality,
        latest_locality=latest,
    )
