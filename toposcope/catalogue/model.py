"""One row of the metric catalogue: :class:`MetricSpec`, and :func:`row` to write one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

MetricType = Literal["gauge", "counter", "info"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: its name, type, unit, label names, help text and owning part."""

    name: str
    type: MetricType
    labels: tuple[str, ...]
    help: str
    unit: str = ""
    part: str = "exporter"

    def family(self) -> GaugeMetricFamily | CounterMetricFamily:
        """A fresh, empty client_python family with this spec's name, help and labels."""
        if self.type == "counter":
            return CounterMetricFamily(self.name, self.help, labels=list(self.labels))
        return GaugeMetricFamily(self.name, self.help, labels=list(self.labels))


def row(
    name: str,
    type_: MetricType,
    labels: Sequence[str],
    help_: str,
    unit: str = "",
    part: str = "exporter",
) -> MetricSpec:
    """A catalogue row, written positionally as the tables do."""
    return MetricSpec(name, type_, tuple(labels), help_, unit, part)
