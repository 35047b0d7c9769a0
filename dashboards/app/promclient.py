"""A small typed client of the Prometheus HTTP API (instant and range queries).

The Dash app reads every value through this client and never from the exporters: anything
that speaks the Prometheus query API (Prometheus, Thanos, Mimir, VictoriaMetrics) works.
Each failure becomes one :class:`PrometheusError` subclass whose message says what to do,
so that a page can show it instead of a blank graph:

* :class:`PrometheusUnreachable`: nothing answers at the URL (refused, DNS, TLS);
* :class:`PrometheusTimeout`: the server did not answer within the timeout;
* :class:`PrometheusQueryError`: the server refused the query (bad PromQL, too many points);
* :class:`PrometheusBadAnswer`: the answer is not the Prometheus API's JSON.

Answers are the core's PromQL result types (:mod:`toposcope.promql.results`, shared with the
advisor): NaN or infinite samples (``0/0`` in PromQL, a stale series) are dropped and counted
in :attr:`Vector.non_finite` / :attr:`Matrix.non_finite`, never handed on as numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from toposcope.promql.client import (
    Answer,
    PromApi,
    PromApiBadAnswer,
    PromApiDenied,
    PromApiError,
    PromApiNotFound,
    PromApiRejected,
    PromApiUnreachable,
)
from toposcope.promql.results import Matrix, Vector, parse_matrix, parse_vector

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
        return parse_vector(answer.data, source=self.url, warnings=answer.warnings)

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
        return parse_matrix(answer.data, source=self.url, warnings=answer.warnings)
