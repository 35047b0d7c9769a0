"""Reading a job's own progress metric for the verification of job moves and placements.

A moved or placed job is judged by how fast it advances (:mod:`toposcope.advisor.outcomes`).
Its GPUs' SM activity and link traffic come with the analysis' model; where a
``--progress-metric`` applies to the job (:mod:`toposcope.advisor.progress_metrics`),
:class:`ProgressProbe` asks the metrics backend for it: the setting's PromQL with the
workload's name written in as an escaped label-matcher value, its answer summed over the
series it returns. ``None`` when no setting applies, no series answers or the backend fails
(logged): the verdict then rests on the proxies.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from toposcope.advisor.errors import AdvisorError
from toposcope.advisor.loaders.base import MetricsBackend, Query, Window, finite
from toposcope.advisor.progress_metrics import ProgressMetric, progress_metric_for

LOG = logging.getLogger("toposcope.advisor.progress")


@dataclass(frozen=True)
class ExpressionQuery(Query):
    """A query whose PromQL is written out (a user's progress metric), asked as is."""

    expression: str = ""

    def promql(self, window: Window) -> str:
        """The expression (its own ranges and functions: the window is not applied)."""
        return self.expression


class ProgressProbe:
    """Reads the ``--progress-metric`` of a workload from ``backend`` (module docstring);
    ``window`` is the analysis window (its end is always now), ``metrics`` the settings.
    """

    def __init__(
        self, backend: MetricsBackend, window: Window, metrics: Sequence[ProgressMetric] = ()
    ) -> None:
        self.backend = backend
        self.window = window
        self.metrics = list(metrics)

    def progress(self, workload: str) -> float | None:
        """The progress rate of ``workload`` by its setting, or ``None``."""
        setting = progress_metric_for(self.metrics, workload)
        if setting is None:
            return None
        query = ExpressionQuery("progress", "", expression=setting.promql(workload))
        try:
            result = self.backend.load(query, self.window)
        except AdvisorError as exc:
            LOG.warning("progress metric of %r failed: %s", workload, exc)
            return None
        values = [s.value for s in result.samples if finite(s.value)]
        return sum(values) if values else None
