"""Reading a job's progress signals for the verification of job moves and placements.

A moved or placed job is judged by how fast it advances (:mod:`toposcope.advisor.outcomes`).
:class:`ProgressProbe` asks the metrics backend, over the service's analysis window, for the
figures of one workload on one node:

* ``sm_active``: the mean share of busy SMs of its GPUs
  (``toposcope_workload_gpu_sm_active_ratio``, else ``toposcope_gpu_sm_active_ratio`` of its
  GPUs);
* ``link_bytes_per_second``: the PCIe and NVLink bytes per second of its GPUs, both
  directions (``toposcope_workload_gpu_{pcie,nvlink}_bytes_total``, else the
  ``toposcope_gpu_*`` families of its GPUs);
* ``progress``: the user's progress metric for its job class, if one applies
  (:mod:`toposcope.advisor.progress_metrics`), summed over the series it answers.

Every query carries the workload's name as an escaped label matcher, and the answer is
filtered again by workload and node (:class:`~toposcope.identity.node.NodeNamer`) since a
backend may answer more than it was asked. A figure is ``None`` when no series answers or
the backend fails (logged): a missing proxy leaves the verdict to the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from toposcope.advisor.errors import AdvisorError
from toposcope.advisor.loaders.base import (
    MetricsBackend,
    Query,
    QueryResult,
    QueryRow,
    Window,
    finite,
)
from toposcope.advisor.progress_metrics import ProgressMetric, progress_metric_for
from toposcope.identity.node import AUTO, NodeNamer
from toposcope.promql.literals import string_literal
from toposcope.promql.results import Sample

LOG = logging.getLogger("toposcope.advisor.progress")

BUILD_INFO = QueryRow("build-info", "toposcope_exporter_build_info")
#: per workload, then per GPU: the same figure
SM_ACTIVE = (
    QueryRow("workload-gpu-sm-active", "toposcope_workload_gpu_sm_active_ratio", "avg"),
    QueryRow("gpu-sm-active", "toposcope_gpu_sm_active_ratio", "avg"),
)
PCIE_BYTES = (
    QueryRow("workload-gpu-pcie-bytes", "toposcope_workload_gpu_pcie_bytes_total", "rate"),
    QueryRow("gpu-pcie-bytes", "toposcope_gpu_pcie_bytes_total", "rate"),
)
NVLINK_BYTES = (
    QueryRow("workload-gpu-nvlink-bytes", "toposcope_workload_gpu_nvlink_bytes_total", "rate"),
    QueryRow("gpu-nvlink-bytes", "toposcope_gpu_nvlink_bytes_total", "rate"),
)


@dataclass(frozen=True)
class ProgressFigures:
    """One workload's progress signals over a window (``None``: no series)."""

    sm_active: float | None = None
    link_bytes_per_second: float | None = None
    progress: float | None = None


@dataclass(frozen=True)
class ExpressionQuery(Query):
    """A query whose PromQL is written out (a user's progress metric), asked as is."""

    expression: str = ""

    def promql(self, window: Window) -> str:
        """The expression (its own ranges and functions: the window is not applied)."""
        return self.expression


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _total(values: Sequence[float]) -> float | None:
    return sum(values) if values else None


class ProgressProbe:
    """Reads the progress figures of a workload from ``backend`` (module docstring).

    ``window`` is the analysis window (its end is always now), ``selector`` the service's
    extra label matchers, ``node_label`` how series name their node, ``metrics`` the
    ``--progress-metric`` settings.
    """

    def __init__(
        self,
        backend: MetricsBackend,
        window: Window,
        *,
        selector: str = "",
        node_label: str = AUTO,
        metrics: Sequence[ProgressMetric] = (),
    ) -> None:
        self.backend = backend
        self.window = window
        self.selector = selector
        self.node_label = node_label
        self.metrics = list(metrics)

    def _load(self, query: Query) -> QueryResult | None:
        try:
            return self.backend.load(query, self.window)
        except AdvisorError as exc:
            LOG.warning("progress query %s failed: %s", query.name, exc)
            return None

    def _bound(self, row: QueryRow, matchers: Mapping[str, str]) -> Query:
        extra = ",".join(f"{name}={string_literal(value)}" for name, value in matchers.items())
        return row.bind(",".join(m for m in (self.selector, extra) if m))

    def _namer(self) -> NodeNamer:
        result = self._load(BUILD_INFO.bind(self.selector))
        labels = [s.labels for s in result.samples] if result is not None else []
        return NodeNamer(labels, self.node_label)

    def _figure(
        self,
        rows: tuple[QueryRow, QueryRow],
        keep: Callable[[Sample, bool], bool],
        workload: str,
        combine: Callable[[Sequence[float]], float | None],
    ) -> float | None:
        """The workload family's figure, else the GPU family's for the workload's GPUs."""
        for row, per_workload in ((rows[0], True), (rows[1], False)):
            matchers = {"workload": workload} if per_workload else {}
            result = self._load(self._bound(row, matchers))
            if result is None:
                continue
            values = [s.value for s in result.samples if finite(s.value) and keep(s, per_workload)]
            if values:
                return combine(values)
        return None

    def measure(self, node: str, workload: str, gpus: Iterable[int]) -> ProgressFigures:
        """The figures of ``workload`` on ``node`` (whose GPUs are ``gpus``)."""
        namer = self._namer()
        held = {str(g) for g in gpus}

        def keep(sample: Sample, per_workload: bool) -> bool:
            labels = sample.labels
            if namer(labels) != node:
                return False
            if per_workload:
                return labels.get("workload") == workload
            return labels.get("gpu") in held

        sm_active = self._figure(SM_ACTIVE, keep, workload, _mean)
        pcie = self._figure(PCIE_BYTES, keep, workload, _total)
        nvlink = self._figure(NVLINK_BYTES, keep, workload, _total)
        links = None if pcie is None and nvlink is None else (pcie or 0.0) + (nvlink or 0.0)
        return ProgressFigures(sm_active, links, self._progress(workload))

    def _progress(self, workload: str) -> float | None:
        setting = progress_metric_for(self.metrics, workload)
        if setting is None:
            return None
        expression = setting.promql(workload)
        query = ExpressionQuery("progress", "", selector="", expression=expression)
        result = self._load(query)
        if result is None:
            return None
        return _total([s.value for s in result.samples if finite(s.value)])
