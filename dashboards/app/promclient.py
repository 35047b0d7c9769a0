"""A small typed client of the Prometheus HTTP API (instant and range queries).

The Dash app reads every value through this client and never from the exporters: anything
that speaks the Prometheus query API (Prometheus, Thanos, Mimir, VictoriaMetrics) works.
Each failure becomes one :class:`PrometheusError` subclass whose message says what to do,
so that a page can show it instead of a blank graph:

* :class:`PrometheusUnreachable`: nothing answers at the URL (refused, DNS, TLS);
* :class:`PrometheusTimeout`: the server did not answer within the timeout;
* :class:`PrometheusQueryError`: the server refused the query (bad PromQL, too many points);
* :class:`PrometheusBadAnswer`: the answer is not the Prometheus API's JSON.

Samples whose value is NaN or infinite (``0/0`` in PromQL, a stale series) are dropped and
counted in :attr:`Vector.non_finite` / :attr:`Matrix.non_finite`, never handed on as numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toposcope.promapi import (
    Answer,
    PromApi,
    PromApiBadAnswer,
    PromApiDenied,
    PromApiError,
    PromApiNotFound,
    PromApiRejected,
    PromApiUnreachable,
)

DEFAULT_TIMEOUT = 10.0
#: most points per series Prometheus answers for a range query (its own limit is 11,000)
MAX_POINTS = 11000


#: What a page shows when a query fails: the core transport's errors under the app's names.
PrometheusError = PromApiError
PrometheusUnreachable = PromApiUnreachable
PrometheusQueryError = PromApiRejected
PrometheusBadAnswer = PromApiBadAnswer


class PrometheusTimeout(PromApiUnreachable):
    """Prometheus did not answer within the timeout."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its labels (``__name__`` included) and value."""

    labels: Mapping[str, str]
    value: float
    timestamp: float


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels and the points (Unix seconds, value)."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Vector:
    """The answer of an instant query (scalars come back as one label-less sample)."""

    samples: tuple[Sample, ...] = ()
    non_finite: int = 0
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Matrix:
    """The answer of a range query."""

    series: tuple[Series, ...] = ()
    non_finite: int = 0
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class PromClient:
    """Queries one Prometheus HTTP API at ``url`` (``http://host:9090``, a path prefix is kept).

    ``headers`` are sent with every request (an ``Authorization`` header for a protected
    Thanos or Mimir, for example).
    """

    url: str
    timeout: float = DEFAULT_TIMEOUT
    headers: Mapping[str, str] = field(default_factory=dict)

    def _call(self, endpoint: str, params: Mapping[str, str]) -> Answer:
        """Ask ``/api/v1/<endpoint>`` once through the core transport (POSTed as a form)."""
        api = PromApi(self.url, headers=self.headers, timeout=self.timeout, post=True)
        try:
            return api.get(endpoint, params)
        except PromApiUnreachable as exc:
            if exc.timed_out:
                raise PrometheusTimeout(
                    f"Prometheus at {self.url} did not answer within {self.timeout:g}s"
                ) from exc
            raise PromApiUnreachable(
                f"Prometheus is unreachable at {self.url} ({exc}); check --prometheus "
                "and that Prometheus runs"
            ) from exc
        except (PromApiDenied, PromApiNotFound) as exc:
            raise PromApiUnreachable(f"{exc}; check --prometheus") from exc

    def query(self, expr: str, at: float | None = None) -> Vector:
        """Evaluate ``expr`` at ``at`` (Unix seconds; now by default)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        answer = self._call("query", params)
        data = answer.data
        kind = data.get("resultType")
        result = data.get("result")
        if kind == "scalar" and isinstance(result, list):
            result = [{"metric": {}, "value": result}]
        elif kind != "vector" or not isinstance(result, list):
            raise PrometheusBadAnswer(
                f"{self.url} answered an instant query with {kind!r}, not a vector"
            )
        samples: list[Sample] = []
        dropped = 0
        for item in result:
            labels, (ts, value) = _labels(item, self.url), _point(item.get("value"), self.url)
            if math.isfinite(value):
                samples.append(Sample(labels, value, ts))
            else:
                dropped += 1
        return Vector(tuple(samples), dropped, answer.warnings)

    def query_range(self, expr: str, start: float, end: float, step: float) -> Matrix:
        """Evaluate ``expr`` from ``start`` to ``end`` every ``step`` seconds.

        The step is widened when the range would exceed Prometheus' points-per-series limit.
        """
        if end <= start:
            raise ValueError("a range query needs end > start")
        step = max(step, (end - start) / (MAX_POINTS - 1), 0.001)
        params = {
            "query": expr,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:.3f}",
        }
        answer = self._call("query_range", params)
        data = answer.data
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PrometheusBadAnswer(
                f"{self.url} answered a range query with {data.get('resultType')!r}, not a matrix"
            )
        series: list[Series] = []
        dropped = 0
        for item in result:
            labels = _labels(item, self.url)
            values = item.get("values")
            if not isinstance(values, list):
                raise PrometheusBadAnswer(f"{self.url}: a matrix series has no values")
            points: list[tuple[float, float]] = []
            for raw_point in values:
                ts, value = _point(raw_point, self.url)
                if math.isfinite(value):
                    points.append((ts, value))
                else:
                    dropped += 1
            series.append(Series(labels, tuple(points)))
        return Matrix(tuple(series), dropped, answer.warnings)


def _labels(item: Any, url: str) -> dict[str, str]:
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(metric, dict):
        raise PrometheusBadAnswer(f"{url}: a result has no metric labels")
    return {str(k): str(v) for k, v in metric.items()}


def _point(raw: Any, url: str) -> tuple[float, float]:
    if not isinstance(raw, Sequence) or isinstance(raw, str) or len(raw) != 2:
        raise PrometheusBadAnswer(f"{url}: a sample is not [timestamp, value]")
    try:
        return float(raw[0]), float(raw[1])
    except (TypeError, ValueError) as exc:
        raise PrometheusBadAnswer(f"{url}: a sample value is not a number: {raw!r}") from exc
