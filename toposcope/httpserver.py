"""The threaded WSGI server every toposcope HTTP endpoint runs on (exporter, simulator,
advisor service, node agent, Dash app), and the ``HOST:PORT`` listen-address parser they share.

Standard library only (``wsgiref`` plus a thread per request): the endpoints are small and
scraped or called a few times a second at most. ``:PORT`` listens on every interface (IPv4
and IPv6); endpoints that change state default to a loopback address instead.

The server protects every application it serves, before the application sees a request:

- a method outside the server's list (``GET``, ``HEAD``, ``POST`` unless the server says
  otherwise) answers 405 with an ``Allow`` header;
- a body larger than the server's limit (1 MiB unless it says otherwise) answers 413 from its
  ``Content-Length`` alone, without reading it; an invalid ``Content-Length`` answers 400 and a
  ``Transfer-Encoding`` (a body of unknown length) 411; the application reads at most the
  declared length (nothing when there is no ``Content-Length``) and never blocks past it;
- a connection silent for :data:`IO_TIMEOUT_SECONDS` is closed;
- an application that raises answers 500, logged here, never with a traceback.

Those answers are JSON ``{"error": "...", "field": null}``, the error shape of the
resource-manager API. The ``Server`` header names toposcope and its version only, and the
listen backlog is :data:`LISTEN_BACKLOG`, so a burst of scrapes waits instead of timing out.
"""

from __future__ import annotations

import io
import json
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from email.message import Message
from http import HTTPStatus
from socketserver import ThreadingMixIn
from types import FrameType
from typing import IO, Any, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

from toposcope import __version__
from toposcope.errors import UsageError

LOG = logging.getLogger("toposcope.http")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

#: What the ``Server`` header says (never the interpreter and its version).
SERVER_SOFTWARE = f"toposcope/{__version__}"
#: Largest request body a server accepts unless it is given another limit (1 MiB).
DEFAULT_MAX_BODY = 1024 * 1024
#: Methods a server accepts unless it is given another list.
DEFAULT_METHODS = ("GET", "HEAD", "POST")
#: Connections the kernel queues before the server accepts them (capped by net.core.somaxconn).
LISTEN_BACKLOG = 1024
#: Seconds one read or write on a connection may wait for the client.
IO_TIMEOUT_SECONDS = 60.0
#: After a refusal, how much of an unread body is read and dropped so that the client, still
#: sending, reads the answer instead of a reset connection; a larger body is not waited for.
DRAIN_LIMIT = 8 * 1024 * 1024
DRAIN_SECONDS = 2.0


def parse_listen(address: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``:PORT`` = all interfaces, ``[::1]:PORT`` for IPv6)."""
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise UsageError(f"listen address {address!r} must be HOST:PORT or :PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"listen address {address!r} has no numeric port") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"port {port} out of range")
    return host.strip("[]"), port


def json_error(message: str) -> bytes:
    """The JSON body of an error answer: ``{"error": message, "field": null}``."""
    return json.dumps({"error": message, "field": None}).encode()


@dataclass(frozen=True)
class Refusal:
    """An answer the server gives in place of the application: status, message, headers."""

    status: int
    message: str
    headers: tuple[tuple[str, str], ...] = ()
    #: whether the declared body may be read and dropped (its length is known and valid)
    drain: bool = True

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        """Answer as a WSGI application would."""
        body = json_error(self.message)
        phrase = HTTPStatus(self.status).phrase
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            *self.headers,
        ]
        start_response(f"{self.status} {phrase}", headers)
        return [body]


@dataclass(frozen=True)
class RequestLimits:
    """What a server accepts: its methods and the largest body, in bytes."""

    methods: tuple[str, ...] = DEFAULT_METHODS
    max_body: int = DEFAULT_MAX_BODY

    def check(self, method: str, headers: Message) -> tuple[int, Refusal | None]:
        """The declared body length, and the refusal when the request breaks a limit.

        No ``Content-Length`` means no body (what HTTP/1.1 says of a request without one).
        """
        length, refusal = _declared_length(headers)
        if method not in self.methods:
            allow = ", ".join(self.methods)
            message = f"method {method[:40]} is not allowed; use {allow}"
            return length, Refusal(405, message, (("Allow", allow),), drain=refusal is None)
        if refusal is not None:
            return 0, refusal
        if length > self.max_body:
            message = f"the body of {length} bytes is over this server's limit of {self.max_body}"
            return length, Refusal(413, message)
        return length, None


def _declared_length(headers: Message) -> tuple[int, Refusal | None]:
    """The ``Content-Length`` of a request (0 without one), or why it cannot be known."""
    if headers.get("Transfer-Encoding") is not None:
        message = "a body without Content-Length (Transfer-Encoding) is not supported"
        return 0, Refusal(411, message, drain=False)
    values = {value.strip() for value in headers.get_all("Content-Length", [])}
    if not values:
        return 0, None
    text = values.pop()
    if values or not text.isdigit() or not text.isascii():
        shown = ", ".join(sorted({text, *values}))[:40]
        return 0, Refusal(400, f"invalid Content-Length header: {shown!r}", drain=False)
    return int(text), None


class RequestBody:
    """``wsgi.input``: the declared body and not a byte more, so a read never blocks past it."""

    def __init__(self, stream: io.BufferedIOBase, length: int) -> None:
        self._stream = stream
        #: bytes of the declared body not read yet (0 once the client stops sending)
        self.remaining = length

    def _take(self, size: int | None) -> int:
        return self.remaining if size is None or size < 0 else min(size, self.remaining)

    def _took(self, data: bytes, wanted: int) -> bytes:
        if wanted and not data:  # the client stopped sending before the declared length
            self.remaining = 0
        else:
            self.remaining -= len(data)
        return data

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes of the body (all that is left without a size)."""
        wanted = self._take(size)
        return self._took(self._stream.read(wanted) if wanted else b"", wanted)

    def readline(self, size: int | None = -1) -> bytes:
        """One line of the body, at most ``size`` bytes."""
        wanted = self._take(size)
        return self._took(self._stream.readline(wanted) if wanted else b"", wanted)

    def readlines(self, hint: int = -1) -> list[bytes]:
        """The remaining lines (stopping once ``hint`` bytes are read, when positive)."""
        lines: list[bytes] = []
        total = 0
        while not 0 < hint <= total and (line := self.readline()):
            lines.append(line)
            total += len(line)
        return lines

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line


class _ServerHandler(ServerHandler):
    """wsgiref's handler with toposcope's ``Server`` header and a JSON 500 logged here."""

    server_software = SERVER_SOFTWARE
    error_status = "500 Internal Server Error"
    error_headers = [("Content-Type", "application/json")]
    error_body = json_error("internal server error; the server's log has the details")
    #: the request's method and path, for the log
    request_line = ""
    request_handler: WSGIRequestHandler

    def log_exception(self, exc_info: Any) -> None:
        """Log an application's exception (wsgiref would print it to standard error)."""
        LOG.error("error answering %s", self.request_line, exc_info=exc_info)


class _Handler(WSGIRequestHandler):
    """One connection: check the request against the server's limits, run the app, close."""

    server_version = SERVER_SOFTWARE
    timeout = IO_TIMEOUT_SECONDS
    server: _ThreadingWSGIServer

    def version_string(self) -> str:
        """The ``Server`` header of answers sent before the application runs."""
        return SERVER_SOFTWARE

    def log_message(self, format: str, *args: Any) -> None:
        """Request lines go to the debug log, not to standard error."""
        LOG.debug("http %s", format % args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A malformed request line or header (before any application runs), answered in JSON."""
        status = HTTPStatus(code)
        self.log_error("code %d, message %s", code, message or status.phrase)
        body = json_error(explain or message or status.description or status.phrase)
        self.send_response(code, message)
        self.send_header("Connection", "close")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle(self) -> None:
        """Read one request, refuse it or hand it to the application, then drop its rest."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        length, refusal = self.server.limits.check(self.command, self.headers)
        body = RequestBody(self.rfile, length if refusal is None else 0)
        handler = _ServerHandler(
            body, cast(IO[bytes], self.wfile), self.get_stderr(), self.get_environ(), False
        )
        handler.request_handler = self
        handler.request_line = f"{self.command} {self.path}"
        app = self.server.get_app()
        if refusal is not None or app is None:
            refusal = refusal or Refusal(503, "the server is starting", drain=False)
            LOG.debug("refused %s: %d %s", handler.request_line, refusal.status, refusal.message)
            handler.run(refusal.app)
            if refusal.drain:
                self._drop(length)
            return
        handler.run(app)
        self._drop(body.remaining)

    def _drop(self, remaining: int) -> None:
        """Read and drop what is left of a body (bounded), so the client reads the answer."""
        if remaining <= 0 or remaining > DRAIN_LIMIT:
            return
        deadline = time.monotonic() + DRAIN_SECONDS
        try:
            while remaining > 0 and (left := deadline - time.monotonic()) > 0:
                self.connection.settimeout(left)
                chunk = self.rfile.read1(min(remaining, 65536))
                if not chunk:
                    return
                remaining -= len(chunk)
        except OSError:
            return


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG
    limits = RequestLimits()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log a failed connection (a client gone, a timeout) instead of printing a traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            LOG.debug("connection from %s: %s", client_address, error)
        else:
            LOG.error("connection from %s failed", client_address, exc_info=True)


class _DualStackServer(_ThreadingWSGIServer):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class HttpServer:
    """A running threaded WSGI server on ``listen``, stoppable from another thread.

    The application can be swapped with :meth:`set_app` (the simulator learns its own
    address only after binding). ``methods`` and ``max_body`` are the server's limits (see
    the module docstring): a server whose application only reads passes ``("GET", "HEAD")``.
    """

    def __init__(
        self,
        app: WsgiApp,
        listen: str,
        thread_name: str = "http",
        *,
        methods: Collection[str] = DEFAULT_METHODS,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        if max_body < 0:
            raise UsageError(f"the body limit must be 0 or more bytes, not {max_body}")
        host, port = parse_listen(listen)
        server_class: type[_ThreadingWSGIServer] = _ThreadingWSGIServer
        if host == "" and socket.has_ipv6:
            server_class, host = _DualStackServer, "::"
        elif host == "":
            host = "0.0.0.0"
        elif ":" in host:
            server_class = _DualStackServer
        try:
            self.httpd = make_server(
                host, port, app, server_class=server_class, handler_class=_Handler
            )
        except OSError as exc:
            raise UsageError(f"cannot listen on {listen}: {exc.strerror or exc}") from exc
        assert isinstance(self.httpd, _ThreadingWSGIServer)
        self.httpd.limits = RequestLimits(tuple(m.upper() for m in methods), max_body)
        self.host = host
        self.thread_name = thread_name
        self.thread: threading.Thread | None = None

    @property
    def limits(self) -> RequestLimits:
        """The methods and body size this server accepts."""
        return self.httpd.limits

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        return int(self.httpd.server_address[1])

    @property
    def address(self) -> str:
        """``HOST:PORT`` others can reach: the listen host, or this host's name for a wildcard."""
        host = self.host
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.port}"

    def set_app(self, app: WsgiApp) -> None:
        """Serve ``app`` from the next request on."""
        self.httpd.set_app(app)

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` is called."""
        self.httpd.serve_forever(poll_interval=0.5)

    def serve_until_signalled(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM, then close the socket.

        The daemons' main loop: a signal ends serving like Ctrl-C does, so the caller's
        ``finally`` blocks (stopping threads, flushing state) run on ``kill`` too.
        """

        def on_signal(signum: int, frame: FrameType | None) -> None:
            LOG.info("received signal %d, shutting down", signum)
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_signal)
        try:
            self.serve_forever()
        except KeyboardInterrupt:
            LOG.info("shutting down")
        finally:
            self.httpd.server_close()

    def start(self) -> None:
        """Serve in a daemon thread."""
        self.thread = threading.Thread(
            target=self.serve_forever, daemon=True, name=self.thread_name
        )
        self.thread.start()

    def shutdown(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
