"""The structures of the fake's GPM and field value calls, shaped like the bindings'.

``nvmlGpmMetricsGet`` fills a request the caller made (``c_nvmlGpmMetricsGet_t``), so the
request, its metrics and the samples are mutable here, as the ctypes structures are; the
field values come back as ``nvmlFieldValue_t`` with the value in a ``nvmlValue_t`` union.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml


@dataclass
class FakeGpmSample:
    """An opaque GPM sample: which GPU it was taken on and when (fake time), once taken."""

    gpu: int | None = None
    taken_at: float | None = None
    freed: bool = False


@dataclass
class FakeGpmMetric:
    """``nvmlGpmMetric_t``: the id asked for, and the answer's return code and value."""

    metricId: int = 0
    nvmlReturn: int = 0
    value: float = 0.0


def _metric_slots() -> list[FakeGpmMetric]:
    return [FakeGpmMetric() for _ in range(int(pynvml.NVML_GPM_METRIC_MAX))]


@dataclass
class FakeGpmMetricsGet:
    """``nvmlGpmMetricsGet_t``: version, how many metrics, the two samples, the metrics."""

    version: int = 0
    numMetrics: int = 0
    sample1: FakeGpmSample | None = None
    sample2: FakeGpmSample | None = None
    metrics: list[FakeGpmMetric] = field(default_factory=_metric_slots)


@dataclass(frozen=True)
class FakeGpmSupport:
    """``nvmlGpmSupport_t``: whether the device supports GPM (Hopper and later)."""

    version: int
    isSupportedDevice: int


@dataclass(frozen=True)
class FakeValue:
    """``nvmlValue_t`` as the fake fills it: unsigned 64-bit and 32-bit counters (the union's
    members the entry's ``valueType`` names)."""

    ullVal: int = 0
    uiVal: int = 0


@dataclass(frozen=True)
class FakeFieldValue:
    """``nvmlFieldValue_t``: the field and scope asked for, its return code and value."""

    fieldId: int
    scopeId: int
    timestamp: int
    latencyUsec: int
    valueType: int
    nvmlReturn: int
    value: FakeValue
