"""The one HTTP transport to a PromQL API (Prometheus, VictoriaMetrics, Thanos, Mimir, Cortex).

The advisor's loader and the Dash app both read ``/api/v1/query`` and
``/api/v1/query_range``; they share this transport so that a backend that is down, slow,
behind credentials, at the wrong path or answering something other than the API's JSON is
recognised, retried and worded the same way everywhere. Each caller turns
:class:`PromApiError` subclasses into its own errors (exit codes for the CLI, a message on
a page for the app) and parses the ``data`` object it gets back with
:mod:`toposcope.promql.results`.

Retries (exponential back-off) cover what may pass: refused connections, timeouts, and
HTTP 429/5xx. Credentials refused (401/403), a wrong path (404) and a rejected query are
answered at once.
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
from dataclasses import dataclass, field
from typing import Any

LOG = logging.getLogger("toposcope.promql.client")

#: HTTP answers worth another try: the backend is overloaded or restarting.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class PromApiError(Exception):
    """A PromQL API request failed; the message names the URL and what went wrong."""


class PromApiUnreachable(PromApiError):
    """No usable answer after every try: refused, DNS, TLS, timeouts or HTTP 429/5xx.

    ``timed_out`` says whether the last try ended on the timeout (a slow backend rather
    than a missing one).
    """

    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class PromApiDenied(PromApiError):
    """The backend refused the credentials (HTTP 401 or 403)."""


class PromApiNotFound(PromApiError):
    """The URL has no query API (HTTP 404): usually a wrong base URL or path prefix."""


class PromApiRejected(PromApiError):
    """The backend answered and refused the query (bad PromQL, too many points...)."""


class PromApiBadAnswer(PromApiError):
    """The answer is not the query API's JSON (another service answers at that URL)."""


def base_url(url: str) -> str:
    """The part of ``url`` before ``/api/v1`` (users paste either form); http(s) only."""
    base = url.rstrip("/")
    for suffix in ("/api/v1/query", "/api/v1"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    if not base.startswith(("http://", "https://")):
        raise PromApiError(f"metrics URL {url!r} must start with http:// or https://")
    return base


@dataclass(frozen=True)
class Answer:
    """A successful answer: its ``data`` object and the warnings (and infos) it carried."""

    data: dict[str, Any]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class PromApi:
    """Requests to the PromQL API at ``url`` (the base before ``/api/v1``).

    ``headers`` go with every request (credentials, Mimir's ``X-Scope-OrgID``) and
    ``params`` with every query (Thanos' ``dedup``). ``post`` sends the query as a form
    (long expressions stay out of URLs and logs); a request is tried ``1 + retries`` times,
    ``backoff``, ``2 * backoff``, ... seconds apart (``sleep`` is injectable for tests).
    """

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 10.0
    retries: int = 0
    backoff: float = 0.5
    post: bool = False
    sleep: Callable[[float], None] = time.sleep

    def get(self, endpoint: str, params: Mapping[str, str]) -> Answer:
        """Ask ``/api/v1/<endpoint>`` (``query`` or ``query_range``) and check the envelope."""
        base = base_url(self.url)
        target = f"{base}/api/v1/{endpoint}"
        form = urllib.parse.urlencode({**self.params, **params})
        expr = params.get("query", "")
        attempts = 1 + max(0, self.retries)
        last = ""
        timed_out = False
        cause: BaseException | None = None
        for attempt in range(attempts):
            if attempt:
                delay = self.backoff * (2 ** (attempt - 1))
                LOG.info("retrying %s in %.2fs (%s)", base, delay, last)
                self.sleep(delay)
            if self.post:
                request = urllib.request.Request(
                    target,
                    data=form.encode(),
                    method="POST",
                    headers={"Content-Type": "application/x-www-form-urlencoded", **self.headers},
                )
            else:
                request = urllib.request.Request(
                    f"{target}?{form}", headers=dict(self.headers), method="GET"
                )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    body = response.read()
            except urllib.error.HTTPError as exc:
                body = exc.read()
                if exc.code in (401, 403):
                    raise PromApiDenied(
                        f"{base} refused the credentials (HTTP {exc.code})"
                    ) from exc
                if exc.code == 404:
                    raise PromApiNotFound(
                        f"{target} not found (HTTP 404): is {base} a PromQL API?"
                    ) from exc
                if exc.code in RETRY_STATUSES:
                    last, timed_out, cause = f"HTTP {exc.code}: {_error_text(body)}", False, exc
                    continue
                raise PromApiRejected(
                    f"{base} rejected query {expr!r} (HTTP {exc.code}): {_error_text(body)}"
                ) from exc
            except TimeoutError as exc:
                last, timed_out, cause = f"no answer within {self.timeout:g}s", True, exc
                continue
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                timed_out = isinstance(reason, TimeoutError)
                last = (
                    f"no answer within {self.timeout:g}s"
                    if timed_out
                    else f"cannot connect: {reason}"
                )
                cause = exc
                continue
            return _envelope(body, base, expr)
        raise PromApiUnreachable(
            f"{base} unavailable after {attempts} attempt(s): {last}", timed_out
        ) from cause


def _envelope(body: bytes, base: str, expr: str) -> Answer:
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PromApiBadAnswer(
            f"{base} answered with invalid JSON, not the PromQL API's (is it a PromQL API "
            f"URL?): {exc}"
        ) from exc
    if not isinstance(payload, dict):
        raise PromApiBadAnswer(f"{base} answered with JSON that is not an object")
    if payload.get("status") != "success":
        raise PromApiRejected(f"{base} rejected query {expr!r}: {_error_of(payload)}")
    data = payload.get("data")
    if not isinstance(data, dict):
        raise PromApiBadAnswer(f"{base} answered without a data object (is it a PromQL API?)")
    warnings = [str(w) for w in payload.get("warnings") or []]
    warnings += [str(i) for i in payload.get("infos") or []]
    for warning in warnings:
        LOG.warning("%s answered %r with a warning: %s", base, expr, warning)
    return Answer(data, tuple(warnings))


def _error_of(payload: Mapping[str, Any]) -> str:
    return f"{payload.get('errorType', 'error')}: {payload.get('error', '')}"


def _error_text(body: bytes) -> str:
    """What an error answer says: the API's ``errorType: error``, else the start of the body."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return body.decode(errors="replace").strip()[:300]
    if isinstance(payload, dict) and payload.get("error"):
        return _error_of(payload)
    return body.decode(errors="replace").strip()[:300]
