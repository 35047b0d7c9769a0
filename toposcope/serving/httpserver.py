"""The WSGI server every toposcope HTTP endpoint runs on (exporter, simulator, advisor
service, node agent, Dash app), and the ``HOST:PORT`` listen-address parser they share.

It is cheroot (CherryPy's server): a pool of :data:`WORKER_THREADS` threads, HTTP/1.1 with
keep-alive, TLS in-process; ``docs/serving.md`` says why and what it measured. ``:PORT``
listens on every interface (IPv4 and IPv6); endpoints that change state default to a
loopback address instead. One server may listen on several addresses
(:meth:`HttpServer.add_listener`).

The server protects every application it serves, before the application sees a request
(:mod:`toposcope.serving.httplimits`, :mod:`toposcope.serving.httpconnection`):

- a method outside the server's list (``GET``, ``HEAD``, ``POST`` unless the server says
  otherwise) answers 405 with an ``Allow`` header;
- a body larger than the server's limit (1 MiB unless it says otherwise) answers 413 from its
  ``Content-Length`` alone, without reading it; an invalid ``Content-Length`` answers 400 and a
  ``Transfer-Encoding`` (a body of unknown length) 411; the application reads at most the
  declared length (nothing when there is no ``Content-Length``) and never blocks past it;
- more than 100 headers or 64 KiB of them answer 431;
- a connection silent for :data:`IO_TIMEOUT_SECONDS` is closed;
- an application that raises answers 500, logged here, never with a traceback.

Those answers are JSON ``{"error": "...", "field": null}``, the error shape of the
resource-manager API. The ``Server`` header names toposcope and its version only, and the
listen backlog is :data:`LISTEN_BACKLOG`, so a burst of scrapes waits instead of timing out.
A web configuration file (:meth:`HttpServer.use_web_config`) adds TLS, basic auth and headers.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Collection

from toposcope.errors import UsageError
from toposcope.serving.httpconnection import SERVER_SOFTWARE, ToposcopeServer
from toposcope.serving.httpguard import Guard
from toposcope.serving.httpgzip import WsgiApp
from toposcope.serving.httplimits import DEFAULT_MAX_BODY, DEFAULT_METHODS, RequestLimits
from toposcope.serving.livewebconfig import LiveTlsAdapter, LiveWebConfig

LOG = logging.getLogger("toposcope.http")

__all__ = [
    "DEFAULT_MAX_BODY",
    "DEFAULT_METHODS",
    "SERVER_SOFTWARE",
    "HttpServer",
    "WsgiApp",
    "parse_listen",
]

#: Connections the kernel queues before the server accepts them (capped by net.core.somaxconn).
LISTEN_BACKLOG = 1024
#: Seconds one read or write on a connection may wait for the client (and a kept-alive
#: connection may stay idle).
IO_TIMEOUT_SECONDS = 60.0
#: Threads answering requests; idle kept-alive connections wait in a selector, not a thread.
WORKER_THREADS = 16
#: Seconds :meth:`HttpServer.shutdown` waits for requests in progress.
SHUTDOWN_SECONDS = 2.0


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


def _bind_host(host: str) -> str:
    """The address to bind for a listen host (a wildcard is dual-stack where IPv6 exists)."""
    if host == "":
        return "::" if socket.has_ipv6 else "0.0.0.0"
    return host


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
        self.limits = RequestLimits(tuple(m.upper() for m in methods), max_body)
        self.guard = Guard(app)
        self.thread_name = thread_name
        self.servers: list[ToposcopeServer] = []
        self.threads: list[threading.Thread] = []
        self.host = _bind_host(parse_listen(listen)[0])
        self.add_listener(listen)

    def add_listener(self, listen: str) -> None:
        """Also serve on ``listen`` (``--web.listen-address`` given more than once)."""
        host, port = parse_listen(listen)
        server = ToposcopeServer(
            (_bind_host(host), port),
            self.guard,
            numthreads=WORKER_THREADS,
            server_name=SERVER_SOFTWARE,
            request_queue_size=LISTEN_BACKLOG,
            timeout=IO_TIMEOUT_SECONDS,
            shutdown_timeout=SHUTDOWN_SECONDS,
            limits=self.limits,
        )
        if self.guard.web is not None:
            self._configure(server, self.guard.web, self.guard.in_app)
        try:
            server.prepare()
        except OSError as exc:
            server.stop()
            raise UsageError(f"cannot listen on {listen}: {exc.strerror or exc}") from exc
        self.servers.append(server)

    def use_web_config(self, web: LiveWebConfig, *, in_app: bool = False) -> None:
        """Serve with ``web``'s TLS, basic-auth users and headers from the next connection.

        ``in_app=True`` leaves the basic-auth users and the headers to the application.
        """
        self.guard.web = web
        self.guard.in_app = in_app
        for server in self.servers:
            self._configure(server, web, in_app)

    @staticmethod
    def _configure(server: ToposcopeServer, web: LiveWebConfig, in_app: bool) -> None:
        if not in_app:
            server.header_source = lambda: web.current().headers
        if web.tls:
            server.ssl_adapter = LiveTlsAdapter(web)

    @property
    def port(self) -> int:
        """The bound port of the first listener (useful when started on port 0)."""
        return int(self.servers[0].bind_addr[1])

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
        self.guard.app = app

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` is called (the other listeners in their threads)."""
        for extra in self.servers[1:]:
            thread = threading.Thread(
                target=extra.serve, daemon=True, name=f"{self.thread_name}-{extra.bind_addr}"
            )
            thread.start()
            self.threads.append(thread)
        self.servers[0].serve()

    def serve_until_signalled(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM, then close the sockets.

        The daemons' main loop: a signal ends serving like Ctrl-C does, so the caller's
        ``finally`` blocks (stopping threads, flushing state) run on ``kill`` too. SIGHUP
        reads the web configuration file again.
        """

        def on_signal(signum: int, frame: object) -> None:
            LOG.info("received signal %d, shutting down", signum)
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_signal)
        if self.guard.web is not None:
            self.guard.web.reload_on_sighup()
        try:
            self.serve_forever()
        except KeyboardInterrupt:
            LOG.info("shutting down")
        finally:
            self.close()

    def start(self) -> None:
        """Serve in a daemon thread."""
        thread = threading.Thread(target=self.serve_forever, daemon=True, name=self.thread_name)
        thread.start()
        self.threads.append(thread)

    def close(self) -> None:
        """Stop every listener and close its socket."""
        for server in self.servers:
            server.stop()

    def shutdown(self) -> None:
        """Stop serving, close the sockets and wait for the serving threads."""
        self.close()
        for thread in self.threads:
            thread.join(timeout=5)
