"""cheroot's request handling with toposcope's checks: the limits of
:mod:`toposcope.serving.httplimits` decided from the headers alone, before any application runs, and
cheroot's own error answers (a malformed request line, too many headers) in the same JSON
shape with the ``Server`` header.

A refused request's connection is closed after the answer; a body the refusal leaves unread
is read and dropped first (at most :data:`DRAIN_LIMIT` bytes for :data:`DRAIN_SECONDS`), so a
client still sending reads the answer instead of a reset connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from email.message import Message
from typing import Any

from cheroot import errors
from cheroot.server import HTTPConnection, HTTPRequest
from cheroot.wsgi import Server

from toposcope import __version__
from toposcope.serving.httplimits import Refusal, RequestLimits

LOG = logging.getLogger("toposcope.http")

#: What the ``Server`` header says (never the interpreter and its version).
SERVER_SOFTWARE = f"toposcope/{__version__}"
#: Most header lines a request may carry (431 past that), as the standard library's servers.
MAX_HEADERS = 100
#: Most bytes of request line and headers together (414 or 431 past that).
MAX_HEADER_BYTES = 64 * 1024
#: After a refusal, how much of an unread body is read and dropped so that the client, still
#: sending, reads the answer instead of a reset connection; a larger body is not waited for.
DRAIN_LIMIT = 8 * 1024 * 1024
DRAIN_SECONDS = 2.0


class _TooManyHeaders(ValueError):
    """A request with more than :data:`MAX_HEADERS` header lines."""


class _RecordedHeaders(dict[bytes, bytes]):
    """cheroot's header dictionary, also keeping every line (cheroot keeps the last of a
    repeated ``Content-Length``; the checks must see them all).
    """

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[bytes, bytes]] = []

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.lines.append((key, value))
        if len(self.lines) > MAX_HEADERS:
            raise _TooManyHeaders(f"more than {MAX_HEADERS} headers")
        super().__setitem__(key, value)

    def message(self) -> Message:
        """The headers as :class:`email.message.Message`, ``Content-Length`` lists split."""
        message = Message()
        for key, value in self.lines:
            name = key.decode("latin-1")
            text = value.decode("latin-1")
            if name.lower() == "content-length":
                for part in text.split(","):
                    message[name] = part
            else:
                message[name] = text
        return message


class ToposcopeRequest(HTTPRequest):
    """One request: headers checked against the server's limits, errors answered in JSON."""

    server: ToposcopeServer

    def read_request_headers(self) -> bool:
        """Read the headers and refuse the request when it breaks a limit."""
        headers = _RecordedHeaders()
        self.inheaders = headers
        try:
            self.header_reader(self.rfile, headers)
        except _TooManyHeaders as exc:
            return self.refuse(Refusal(431, f"{exc}", drain=False), 0)
        except errors.MaxSizeExceeded:
            message = f"the headers are over {MAX_HEADER_BYTES} bytes"
            return self.refuse(Refusal(431, message, drain=False), 0)
        except ValueError as exc:
            return self.refuse(Refusal(400, f"malformed headers: {exc}", drain=False), 0)
        method = self.method.decode("latin-1")
        length, refusal = self.server.limits.check(method, headers.message())
        if refusal is not None:
            return self.refuse(refusal, length)
        connection = headers.get(b"Connection", b"").lower()
        if self.response_protocol == "HTTP/1.1":
            self.close_connection = connection == b"close"
        else:
            self.close_connection = connection != b"keep-alive"
        if headers.get(b"Expect", b"").lower() == b"100-continue":
            self.conn.wfile.write(self.server.protocol.encode("ascii") + b" 100 Continue\r\n\r\n")
        return True

    def simple_response(self, status: Any, msg: Any = "") -> None:
        """cheroot's own error answers (request line, URI, protocol), in JSON."""
        code = int(str(status)[:3])
        message = msg.decode("latin-1") if isinstance(msg, bytes) else str(msg or status)
        self.refuse(Refusal(code, message, drain=False), 0)

    def refuse(self, refusal: Refusal, length: int) -> bool:
        """Answer ``refusal``, drop the unread body when allowed, close the connection."""
        LOG.debug("refused a request: %d %s", refusal.status, refusal.message)
        data, body = refusal.raw_answer(
            self.server.protocol, SERVER_SOFTWARE, self.server.extra_headers()
        )
        self.close_connection = True
        self.sent_headers = True
        if getattr(self, "method", b"") != b"HEAD":
            data += body
        try:
            self.conn.wfile.write(data)
            self.conn.wfile.flush()
        except OSError as exc:
            LOG.debug("answering a refused request: %s", exc)
            return False
        if refusal.drain:
            self._drop(length)
        return False

    def _drop(self, remaining: int) -> None:
        """Read and drop what is left of a body (bounded), so the client reads the answer."""
        if remaining <= 0 or remaining > DRAIN_LIMIT:
            return
        deadline = time.monotonic() + DRAIN_SECONDS
        try:
            while remaining > 0 and (left := deadline - time.monotonic()) > 0:
                self.conn.socket.settimeout(left)
                chunk = self.conn.rfile.read1(min(remaining, 65536))
                if not chunk:
                    return
                remaining -= len(chunk)
        except OSError:
            return


class ToposcopeConnection(HTTPConnection):
    """A connection whose requests are :class:`ToposcopeRequest`."""

    RequestHandlerClass = ToposcopeRequest


class ToposcopeServer(Server):
    """cheroot's WSGI server with toposcope's limits, headers and log."""

    ConnectionClass = ToposcopeConnection

    def __init__(self, *args: Any, limits: RequestLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.max_request_header_size = MAX_HEADER_BYTES
        #: the headers the web configuration adds to every answer, read for each answer
        self.header_source: Callable[[], Mapping[str, str]] | None = None

    def extra_headers(self) -> list[tuple[str, str]]:
        """Headers the web configuration adds to every answer (refusals included)."""
        return list(self.header_source().items()) if self.header_source else []

    def error_log(self, msg: str = "", level: int = 20, traceback: bool = False) -> None:
        """cheroot's messages: failures with a traceback are errors, the rest (a client gone,
        a failed TLS handshake) debug lines.
        """
        if traceback:
            LOG.error("http server: %s", msg, exc_info=True)
        else:
            LOG.debug("http server: %s", msg)
