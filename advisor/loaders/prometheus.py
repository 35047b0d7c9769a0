"""The PromQL HTTP API backend: Prometheus, VictoriaMetrics, Thanos, Mimir, Cortex.

All of them answer ``GET <base>/api/v1/query`` and ``GET <base>/api/v1/query_range`` with
the same JSON; they differ only in the base URL (Mimir: ``http://mimir/prometheus``), the
credentials (a bearer token) and extra headers (Mimir's ``X-Scope-OrgID``) or parameters
(Thanos' ``dedup``). This one class owns the HTTP: retry with exponential backoff for
connection failures, timeouts and 5xx answers; one clear :class:`AdvisorConnectionError` with
the URL when the backend stays unreachable; :class:`AdvisorQueryError` when it rejects a
query; warnings (partial responses) logged and kept; NaN and Inf samples dropped and counted.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from toposcope import __version__
from toposcope.advisor.errors import AdvisorConnectionError, AdvisorQueryError
from toposcope.advisor.loaders.base import (
    Query,
    QueryResult,
    Sample,
    Series,
    Window,
    finite,
    labels_without_name,
)

LOG = logging.getLogger("toposcope.advisor.prometheus")

_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


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
        base = url.rstrip("/")
        for suffix in ("/api/v1/query", "/api/v1"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
        if not base.startswith(("http://", "https://")):
            raise AdvisorConnectionError(f"metrics URL {url!r} must start with http:// or https://")
        self.url = base
        self.headers = {"User-Agent": f"toposcope-advisor/{__version__}", **(headers or {})}
        if bearer_token:
            self.headers["Authorization"] = f"Bearer {bearer_token}"
        self.params = dict(params or {})
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self._sleep = sleep

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
        data, warnings = self._call("/api/v1/query", params, query)
        return self._parse(query, data, warnings)

    def range(self, query: str, start: float, end: float, step: float) -> QueryResult:
        """Evaluate ``query`` from ``start`` to ``end`` every ``step`` seconds."""
        params = {
            "query": query,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
        }
        data, warnings = self._call("/api/v1/query_range", params, query)
        return self._parse(query, data, warnings)

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
    def _call(
        self, path: str, params: Mapping[str, str], query: str
    ) -> tuple[dict[str, Any], list[str]]:
        url = f"{self.url}{path}?" + urllib.parse.urlencode({**self.params, **params})
        attempts = 1 + self.retries
        last: str = ""
        cause: BaseException | None = None
        for attempt in range(attempts):
            if attempt:
                delay = self.backoff * (2 ** (attempt - 1))
                LOG.info("retrying %s in %.2fs (%s)", self.url, delay, last)
                self._sleep(delay)
            request = urllib.request.Request(url, headers=self.headers, method="GET")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    body = response.read()
            except urllib.error.HTTPError as exc:
                body = exc.read()
                if exc.code in (401, 403):
                    raise AdvisorConnectionError(
                        f"{self.url} refused the credentials (HTTP {exc.code}); "
                        "check --bearer-token-file / --header"
                    ) from exc
                if exc.code == 404:
                    raise AdvisorConnectionError(
                        f"{self.url}{path} not found (HTTP 404): is {self.url} a PromQL API?"
                    ) from exc
                if exc.code in _RETRY_STATUSES:
                    last = f"HTTP {exc.code}"
                    continue
                payload = _decode(body, self.url)
                raise AdvisorQueryError(
                    f"{self.url} rejected query {query!r}: "
                    f"{payload.get('errorType', f'HTTP {exc.code}')}: {payload.get('error', '')}"
                ) from exc
            except TimeoutError as exc:
                last = f"no answer within {self.timeout:g}s"
                cause = exc
                continue
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, TimeoutError):
                    last = f"no answer within {self.timeout:g}s"
                else:
                    last = f"cannot connect: {reason}"
                cause = exc
                continue
            payload = _decode(body, self.url)
            if payload.get("status") != "success":
                raise AdvisorQueryError(
                    f"{self.url} failed query {query!r}: "
                    f"{payload.get('errorType', 'error')}: {payload.get('error', '')}"
                )
            warnings = [str(w) for w in payload.get("warnings", []) or []]
            warnings += [str(i) for i in payload.get("infos", []) or []]
            for warning in warnings:
                LOG.warning("%s answered %r with a warning: %s", self.url, query, warning)
            data = payload.get("data")
            if not isinstance(data, dict):
                raise AdvisorConnectionError(
                    f"{self.url} answered without a data object (is it a PromQL API?)"
                )
            return data, warnings
        error = AdvisorConnectionError(
            f"metrics backend {self.url} unavailable after {attempts} attempt(s): {last}"
        )
        raise error from cause

    def _parse(self, query: str, data: Mapping[str, Any], warnings: list[str]) -> QueryResult:
        kind = data.get("resultType")
        raw = data.get("result")
        dropped = 0
        samples: list[Sample] = []
        series: list[Series] = []
        try:
            if kind == "vector":
                for item in raw or []:
                    value = float(item["value"][1])
                    if not finite(value):
                        dropped += 1
                        continue
                    labels = item.get("metric", {})
                    labels.pop("__name__", None)  # the decoded dict is ours: no copy
                    samples.append(Sample(labels, value))
            elif kind == "scalar":
                value = float(raw[1]) if raw else float("nan")
                if finite(value):
                    samples.append(Sample({}, value))
                else:
                    dropped += 1
            elif kind == "matrix":
                for item in raw or []:
                    points = []
                    for ts, text in item.get("values", []):
                        value = float(text)
                        if finite(value):
                            points.append((float(ts), value))
                        else:
                            dropped += 1
                    if points:
                        series.append(
                            Series(labels_without_name(item.get("metric", {})), tuple(points))
                        )
            else:
                raise AdvisorConnectionError(
                    f"{self.url} answered {query!r} with result type {kind!r}"
                )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise AdvisorConnectionError(
                f"{self.url} answered {query!r} with a malformed result: {exc}"
            ) from exc
        if dropped:
            LOG.info("%s: dropped %d NaN/Inf sample(s) of %r", self.url, dropped, query)
        return QueryResult(
            query, "", tuple(samples), tuple(series), tuple(warnings), dropped, False
        )


def _decode(body: bytes, url: str) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdvisorConnectionError(
            f"{url} answered with invalid JSON (is it a PromQL API URL?): {exc}"
        ) from exc
    if not isinstance(payload, dict):
        raise AdvisorConnectionError(f"{url} answered with JSON that is not an object")
    return payload
