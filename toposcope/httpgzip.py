"""Gzip for metrics answers, as prometheus_client's own handler does.

A scraper that sends ``Accept-Encoding: gzip`` (Prometheus always does) gets any answer in
the Prometheus or OpenMetrics text format compressed, with ``Content-Encoding: gzip``; every
other answer (JSON, HTML, the Dash app's assets) passes through untouched. The server puts
this layer around every application (:mod:`toposcope.httpguard`), so each daemon's
``/metrics`` and the simulator's per-node pages get it without code of their own.

The level is :data:`GZIP_LEVEL`, zlib's default: a scrape of thousands of series shrinks
about tenfold at a few milliseconds, where level 9 costs several times that for a few percent.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

from prometheus_client.exposition import gzip_accepted

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

#: zlib's default compression level (see the module docstring).
GZIP_LEVEL = 6
#: zlib's window bits for a gzip header and trailer around the deflate stream.
GZIP_WBITS = 16 + zlib.MAX_WBITS
#: Content types this layer compresses: the Prometheus text format and OpenMetrics.
METRICS_TYPES = ("text/plain; version=", "application/openmetrics-text")


def is_metrics_answer(status: str, headers: Iterable[tuple[str, str]]) -> bool:
    """True for a successful answer in a metrics text format that is not already encoded."""
    if not status.startswith("200"):
        return False
    found = {name.lower(): value for name, value in headers}
    if "content-encoding" in found:
        return False
    return found.get("content-type", "").lower().startswith(METRICS_TYPES)


class _Deferred:
    """What the wrapped application passed to ``start_response`` for a metrics answer."""

    def __init__(self) -> None:
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []
        self.written: list[bytes] = []


def gzip_metrics(app: WsgiApp) -> WsgiApp:
    """``app`` whose metrics answers are gzipped for clients that accept it."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            return app(environ, start_response)
        deferred = _Deferred()
        started = False

        def capture(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            nonlocal started
            started = True
            if is_metrics_answer(status, headers):
                deferred.status, deferred.headers = status, headers
                return deferred.written.append
            deferred.status = None
            return start_response(status, headers, *exc_info)

        body = app(environ, capture)
        if started and deferred.status is None:
            return body
        chunks: Iterator[bytes] = iter(body)
        first: list[bytes] = []
        if not started:
            first = [chunk for chunk in [next(chunks, None)] if chunk is not None]
        if deferred.status is None:
            return _Closing(chain(first, chunks), body)
        try:
            compressed = _gzip_chunks(chain(deferred.written, first, chunks))
        finally:
            _close(body)
        length = sum(len(chunk) for chunk in compressed)
        kept = [
            (name, value)
            for name, value in deferred.headers
            if name.lower() not in ("content-length", "vary")
        ]
        start_response(
            deferred.status,
            [
                *kept,
                ("Content-Encoding", "gzip"),
                ("Vary", "Accept-Encoding"),
                ("Content-Length", str(length)),
            ],
        )
        return compressed

    return wrapped


def _gzip_chunks(chunks: Iterable[bytes]) -> list[bytes]:
    """The gzip stream of ``chunks``, compressed one chunk at a time: an answer of several
    megabytes is never joined into one copy first.
    """
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    out = [packed for chunk in chunks if (packed := packer.compress(chunk))]
    out.append(packer.flush())
    return out


def _close(body: Iterable[bytes]) -> None:
    close = getattr(body, "close", None)
    if close is not None:
        close()


class _Closing:
    """``chunks`` as a WSGI body whose ``close`` closes the application's own ``body``."""

    def __init__(self, chunks: Iterator[bytes], body: Iterable[bytes]) -> None:
        self.chunks = chunks
        self.body = body

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks

    def close(self) -> None:
        """Close the application's body, as the WSGI server would have."""
        _close(self.body)
