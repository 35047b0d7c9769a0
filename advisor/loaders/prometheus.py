"""The PromQL HTTP API backend: Prometheus, VictoriaMetrics, Thanos, Mimir, Cortex.

All of them answer ``GET <base>/api/v1/query`` and ``GET <base>/api/v1/query_range`` with
the same JSON; they differ only in the base URL (Mimir: ``http://mimir/prometheus``), the
credentials (a bearer token) and extra headers (Mimir's ``X-Scope-OrgID``) or parameters
(Thanos' ``dedup``). The HTTP (retries with back-off, the answer's envelope) is the core's
:class:`~toposcope.promql.client.PromApi`, shared with the Dash app; this class turns its errors
into one clear :class:`AdvisorConnectionError` with the URL when the backend is unreachable
or answers something else, :class:`AdvisorQueryError` when it rejects a query. Results are
parsed by the core (:mod:`toposcope.promql.results`): warnings (partial responses) kept, NaN and
Inf samples dropped and counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from toposcope import __version__
from toposcope.advisor.errors import AdvisorConnectionError, AdvisorQueryError
from toposcope.advisor.loaders.base import Query, QueryResult, Window
from toposcope.promql.client import (
    Answer,
    PromApi,
    PromApiBadAnswer,
    PromApiDenied,
    PromApiError,
    PromApiRejected,
    PromApiUnreachable,
    base_url,
)
from toposcope.promql.results import Matrix, parse_result

LOG = logging.getLogger("toposcope.advisor.prometheus")


class PrometheusLoader:
    """Client of a PromQL HTTP API at ``url`` (the part before ``/api/v1``).

    ``headers`` are sent with every request, ``bearer_token`` as ``Authorization: Bearer``,
    ``params`` added to every query (``{"dedup": "true"}`` for Thanos). A request is tried
    ``1 + retries`` times, waiting ``backoff``, ``2 * backoff``, ... seconds between tries
    (``sleep`` is injectable so tests do not wait).
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        bearer_token: str | None = None,
        params: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        try:
            self.url = base_url(url)
        except PromApiError as exc:
            raise AdvisorConnectionError(str(exc)) from exc
        self.headers = {"User-Agent": f"toposcope-advisor/{__version__}", **(headers or {})}
        if bearer_token:
            self.headers["Authorization"] = f"Bearer {bearer_token}"
        self.params = dict(params or {})
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self._api = PromApi(
            self.url,
            headers=self.headers,
            params=self.params,
            timeout=timeout,
            retries=self.retries,
            backoff=backoff,
            sleep=sleep,
        )

    @property
    def source(self) -> str:
        """The base URL, for reports."""
        return self.url

    # the two query kinds ----------------------------------------------------------------
    def instant(self, query: str, at: float | None = None) -> QueryResult:
        """Evaluate ``query`` at ``at`` (Unix seconds; ``None``: the backend's now)."""
        params = {"query": query}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._parsed(query, self._call("query", params))

    def range(self, query: str, start: float, end: float, step: float) -> QueryResult:
        """Evaluate ``query`` from ``start`` to ``end`` every ``step`` seconds."""
        params = {
            "query": query,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
        }
        return self._parsed(query, self._call("query_range", params))

    def refresh(self) -> None:
        """Nothing to forget: every query asks the API."""

    def load(self, query: Query, window: Window) -> QueryResult:
        """Answer one advisor query over ``window`` (instant or range as the query says)."""
        expr = query.promql(window)
        if query.query_type == "range":
            end = window.end if window.end is not None else time.time()
            result = self.range(expr, end - window.seconds, end, window.step_seconds())
        else:
            result = self.instant(expr, window.end)
        return QueryResult(
            result.query,
            query.metric,
            result.samples,
            result.series,
            result.warnings,
            result.dropped,
            result.cumulative,
        )

    # HTTP ---------------------------------------------------------------------------------
    def _call(self, endpoint: str, params: Mapping[str, str]) -> Answer:
        try:
            return self._api.get(endpoint, params)
        except PromApiDenied as exc:
            raise AdvisorConnectionError(f"{exc}; check --bearer-token-file / --header") from exc
        except PromApiRejected as exc:
            raise AdvisorQueryError(str(exc)) from exc
        except PromApiUnreachable as exc:
            raise AdvisorConnectionError(f"metrics backend {exc}") from exc
        except PromApiError as exc:
            raise AdvisorConnectionError(str(exc)) from exc

    def _parsed(self, query: str, answer: Answer) -> QueryResult:
        """The samples or series of ``answer`` (the core parses them), its errors named with
        the query and its NaN/Inf samples logged.
        """
        try:
            parsed = parse_result(
                answer.data, source=self.url, warnings=answer.warnings, drop_name=True
            )
        except PromApiBadAnswer as exc:
            raise AdvisorConnectionError(f"malformed result for query {query!r}: {exc}") from exc
        dropped = parsed.non_finite
        if dropped:
            LOG.info("%s: dropped %d NaN/Inf sample(s) of %r", self.url, dropped, query)
        if isinstance(parsed, Matrix):
            return QueryResult(query, "", (), parsed.series, parsed.warnings, dropped)
        return QueryResult(query, "", parsed.samples, (), parsed.warnings, dropped)
