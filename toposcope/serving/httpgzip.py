"""Gzip for metrics answers, as prometheus_client's own handler does.

A scraper that sends ``Accept-Encoding: gzip`` (Prometheus always does) gets any answer in
the Prometheus or OpenMetrics text format compressed, with ``Content-Encoding: gzip``; every
other answer (JSON, HTML, the Dash app's assets) passes through untouched. The server puts
this layer around every application (:mod:`toposcope.serving.httpguard`), so each daemon's
``/metrics`` and the simulator's per-node pages get it without code of their own.

The level is :data:`GZIP_LEVEL`, zlib's default: a scrape of thousands of series shrinks
about tenfold at a few milliseconds, where level 9 costs several times that for a few percent.

Text served many times (the exporter's workload sample, rendered once every few seconds) can
be kept compressed as a :class:`GzipMember`, about a tenth of its size in memory. An answer is
then a list of chunks, some of them members: :func:`encode_answer` sends the members as they
are to a client that accepts gzip, compressing the plain chunks between them into members of
their own (RFC 1952 allows a file of several members, and Go's ``compress/gzip`` reader, the
one Prometheus uses, reads them all), and unpacks them piece by piece for any other client.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
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
#: Compressed bytes handed to the decompressor at a time, and the most plain bytes one
#: piece of an unpacked member holds: an identity answer never holds a whole member's text.
UNPACK_STEP = 16 * 1024
UNPACK_PIECE = 256 * 1024


class GzipMember(bytes):
    """One complete gzip member (RFC 1952) holding ``size`` bytes of text.

    A chunk of an answer that is already compressed: :func:`gzip_chunks` passes it on as it
    is and :func:`plain_chunks` unpacks it. Build one with :meth:`pack`.
    """

    size: int

    def __new__(cls, packed: bytes, size: int) -> GzipMember:
        """``packed`` (a whole gzip member) whose text is ``size`` bytes long."""
        member = super().__new__(cls, packed)
        member.size = size
        return member

    @classmethod
    def pack(cls, parts: Iterable[bytes | bytearray]) -> GzipMember:
        """The gzip member of ``parts`` joined, compressed one part at a time."""
        packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
        packed: list[bytes] = []
        size = 0
        for part in parts:
            size += len(part)
            packed.append(packer.compress(part))
        packed.append(packer.flush())
        return cls(b"".join(packed), size)


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
            compressed = gzip_chunks(chain(deferred.written, first, chunks))
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


def gzip_chunks(chunks: Iterable[bytes]) -> list[bytes]:
    """The gzip file of ``chunks``: a :class:`GzipMember` as it is, each run of plain chunks
    between two members compressed one chunk at a time into a member of its own (an answer of
    several megabytes is never joined into one copy first).
    """
    out: list[bytes] = []
    packer: zlib._Compress | None = None
    for chunk in chunks:
        if isinstance(chunk, GzipMember):
            if packer is not None:
                out.append(packer.flush())
                packer = None
            out.append(chunk)
            continue
        if packer is None:
            packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
        if packed := packer.compress(chunk):
            out.append(packed)
    if packer is None and not out:  # nothing at all: one empty member
        packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    if packer is not None:
        out.append(packer.flush())
    return out


def plain_length(chunks: Iterable[bytes]) -> int:
    """The length of ``chunks``' text: a :class:`GzipMember` counts its unpacked size."""
    return sum(chunk.size if isinstance(chunk, GzipMember) else len(chunk) for chunk in chunks)


def plain_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """``chunks`` as text: each :class:`GzipMember` unpacked in pieces of at most
    :data:`UNPACK_PIECE` bytes, the other chunks as they are.
    """
    for chunk in chunks:
        if isinstance(chunk, GzipMember):
            yield from _unpack(chunk)
        elif chunk:
            yield chunk


def _unpack(member: GzipMember) -> Iterator[bytes]:
    unpacker = zlib.decompressobj(GZIP_WBITS)
    view = memoryview(member)
    for start in range(0, len(view), UNPACK_STEP):
        pending: bytes | memoryview = view[start : start + UNPACK_STEP]
        while pending:
            if piece := unpacker.decompress(pending, UNPACK_PIECE):
                yield piece
            pending = unpacker.unconsumed_tail
    if rest := unpacker.flush():
        yield rest


def encode_answer(
    chunks: Sequence[bytes], accept_encoding: str
) -> tuple[list[tuple[str, str]], Iterable[bytes]]:
    """The headers (``Content-Length``, and the encoding when there is one) and the body of a
    metrics answer made of ``chunks`` for a client sending ``accept_encoding``: gzip (see
    :func:`gzip_chunks`) when it accepts gzip, else text unpacked on the fly.
    """
    vary = ("Vary", "Accept-Encoding")
    if gzip_accepted(accept_encoding):
        packed = gzip_chunks(chunks)
        length = str(sum(len(chunk) for chunk in packed))
        return [("Content-Encoding", "gzip"), vary, ("Content-Length", length)], packed
    return [vary, ("Content-Length", str(plain_length(chunks)))], plain_chunks(chunks)


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
