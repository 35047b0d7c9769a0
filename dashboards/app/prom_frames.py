"""Prometheus answers as pandas frames, the time ranges the app offers and the node index.

The shaping helpers (:func:`vector_frame`, :func:`matrix_frame`, :class:`NodeIndex`) are pure
and tested on hand-made answers; :func:`range_series` runs one page's range queries.

Which node a series belongs to is the core's rule, shared with the advisor
(:class:`toposcope.identity.node.NodeNamer`): the ``node`` label when present (the simulator's
file_sd targets set it), else the ``hostname`` that the exporter reports on
``toposcope_exporter_build_info`` for the same ``(job, instance)``, else ``instance``; the
app's ``--node-label`` forces one label instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.promclient import PromClient
from toposcope.identity.node import AUTO, NodeNamer
from toposcope.promql.results import Matrix, Vector

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
    the app's ``--node-label`` (:data:`~toposcope.identity.node.AUTO` by default).
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


def int_or_none(text: str) -> int | None:
    """``text`` as an integer, ``None`` when it is not one (a missing or odd label)."""
    try:
        return int(text)
    except ValueError:
        return None


def by_key(vector: Vector, key: str) -> dict[str, float]:
    """Each sample's value by its ``key`` label."""
    return {s.labels.get(key, ""): s.value for s in vector.samples}


def range_series(
    prom: PromClient, index: NodeIndex, range_: str, now: float | None = None
) -> Callable[[str, str], pd.DataFrame]:
    """Run range queries over ``range_`` ending ``now`` (default: the current time): the
    answer takes a PromQL expression and the label that keys its series, and returns the
    long frame of :func:`matrix_frame`.
    """
    seconds = range_seconds(range_)
    end = time.time() if now is None else now
    start, step = end - seconds, step_for(seconds)

    def series(expr: str, key: str) -> pd.DataFrame:
        return matrix_frame(prom.query_range(expr, start, end, step), index, [key])

    return series
