"""The threaded WSGI server every toposcope HTTP endpoint runs on (exporter, simulator,
advisor service, node agent), and the ``HOST:PORT`` listen-address parser they share.

Standard library only (``wsgiref`` plus a thread per request): the endpoints are small and
scraped or called a few times a second at most. ``:PORT`` listens on every interface (IPv4
and IPv6); endpoints that change state default to a loopback address instead.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from toposcope.errors import UsageError

LOG = logging.getLogger("toposcope.http")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


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


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _DualStackServer(_ThreadingWSGIServer):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("http %s", format % args)


class HttpServer:
    """A running threaded WSGI server on ``listen``, stoppable from another thread.

    The application can be swapped with :meth:`set_app` (the simulator learns its own
    address only after binding).
    """

    def __init__(self, app: WsgiApp, listen: str, thread_name: str = "http") -> None:
        host, port = parse_listen(listen)
        server_class: type[WSGIServer] = _ThreadingWSGIServer
        if host == "" and socket.has_ipv6:
            server_class, host = _DualStackServer, "::"
        elif host == "":
            host = "0.0.0.0"
        elif ":" in host:
            server_class = _DualStackServer
        try:
            self.httpd = make_server(
                host, port, app, server_class=server_class, handler_class=_QuietHandler
            )
        except OSError as exc:
            raise UsageError(f"cannot listen on {listen}: {exc.strerror or exc}") from exc
        self.host = host
        self.thread_name = thread_name
        self.thread: threading.Thread | None = None

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
