"""The cluster page's data: every GPU with its use, the node locality scores, the idle GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.prom_frames import (
    DEFAULT_RANGE,
    NodeIndex,
    load_index,
    range_seconds,
    vector_frame,
)
from toposcope.dashboards.app.promclient import PromClient
from toposcope.identity.node import AUTO
from toposcope.promql.results import Vector


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
