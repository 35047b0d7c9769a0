"""A web configuration file that follows its changes, as exporter-toolkit's does: the file
and the TLS files it names are looked at again (at most every :data:`CHECK_SECONDS`) when a
connection or request comes, and read again when one of them changed or on SIGHUP. A new
TLS context serves new connections; open ones keep theirs.

A file that no longer reads, that would turn TLS on or off (a listener speaks TLS or not
from its start), or that would leave no basic-auth user where there were some, is logged as
an error, counted (:data:`toposcope.serving.webconfigfailures.RELOAD_FAILURES`) and the previous
configuration stays in force. The last rule keeps authentication on while a tool rewrites
the file by truncating it first: an empty file, a comment, ``basic_auth_users:`` or ``{}``
read in that moment would otherwise open every page to anyone. Turning basic auth off takes
a restart with a file without users, as turning TLS off does.
"""

from __future__ import annotations

import logging
import os
import signal
import ssl
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from cheroot import errors
from cheroot.ssl.builtin import BuiltinSSLAdapter

from toposcope.errors import ConfigError
from toposcope.serving.plainhttp import answer_plain_http, speaks_plain_http
from toposcope.serving.webconfig import WebConfig, load_web_config
from toposcope.serving.webconfigfailures import RELOAD_FAILURES

LOG = logging.getLogger("toposcope.http")

#: Seconds between two looks at the files' modification times.
CHECK_SECONDS = 1.0
#: Seconds a TLS handshake may take (cheroot shakes hands before it accepts the next client).
HANDSHAKE_SECONDS = 5.0

_Stamp = tuple[tuple[str, int, int, int], ...]


class LiveWebConfig:
    """The current :class:`WebConfig` of a file and its TLS context, reloaded on change."""

    def __init__(self, path: str | Path, check_seconds: float = CHECK_SECONDS) -> None:
        self.path = Path(path)
        self.check_seconds = check_seconds
        self._lock = threading.Lock()
        self._config = load_web_config(self.path)
        self._context = self._config.tls.context() if self._config.tls else None
        self._stamp = self._stamps(self._config)
        self._checked = time.monotonic()
        #: how many times the file was read again (a test waits on it)
        self.reloads = 0

    @property
    def tls(self) -> bool:
        """Whether the servers speak TLS (decided by the file read at the start)."""
        return self._context is not None

    def current(self) -> WebConfig:
        """The configuration in force (read again first when its files changed)."""
        self._check()
        return self._config

    def tls_context(self) -> ssl.SSLContext:
        """The TLS context for a new connection (only when :attr:`tls`)."""
        self._check()
        if self._context is None:
            raise RuntimeError(f"{self.path} configures no TLS")
        return self._context

    def reload(self) -> bool:
        """Read the files again now; ``False`` (logged) when the previous config stays."""
        with self._lock:
            self._checked = time.monotonic()
            try:
                config = load_web_config(self.path)
                context = config.tls.context() if config.tls else None
                if (context is None) != (self._context is None):
                    raise ConfigError("TLS cannot be turned on or off without a restart")
                if self._config.basic_auth and not config.basic_auth:
                    raise ConfigError(
                        "it lists no basic_auth_users (empty, or being rewritten?); "
                        "basic auth cannot be turned off without a restart"
                    )
            except ConfigError as exc:
                LOG.error("web config %s not reloaded, the previous one stays: %s", self.path, exc)
                RELOAD_FAILURES.add()
                self._stamp = self._stamps(self._config)
                return False
            self._config, self._context = config, context
            self._stamp = self._stamps(config)
            self.reloads += 1
        LOG.info("web config %s reloaded", self.path)
        return True

    def reload_on_sighup(self) -> None:
        """Read the files again when the process gets SIGHUP (call from the main thread)."""

        def on_hangup(signum: int, frame: FrameType | None) -> None:
            threading.Thread(target=self.reload, name="web-config-reload", daemon=True).start()

        signal.signal(signal.SIGHUP, on_hangup)

    def _check(self) -> None:
        if time.monotonic() - self._checked < self.check_seconds:
            return
        self._checked = time.monotonic()
        if self._stamps(self._config) != self._stamp:
            self.reload()

    def _stamps(self, config: WebConfig) -> _Stamp:
        files = [self.path, *(config.tls.files if config.tls else ())]
        stamps = []
        for file in files:
            try:
                info = os.stat(file)
            except OSError:
                stamps.append((str(file), -1, -1, -1))
            else:
                stamps.append((str(file), info.st_mtime_ns, info.st_size, info.st_ino))
        return tuple(stamps)


class LiveTlsAdapter(BuiltinSSLAdapter):
    """cheroot's TLS adapter wrapping each new connection with the live config's context."""

    def __init__(self, web: LiveWebConfig) -> None:
        tls = web.current().tls
        assert tls is not None
        super(BuiltinSSLAdapter, self).__init__(str(tls.cert_file), str(tls.key_file))
        self._web = web
        self._server_env: dict[str, Any] = {}

    def wrap(self, sock: Any) -> Any:
        """Shake hands with :data:`HANDSHAKE_SECONDS` at most, with the current context.

        A client that speaks plain HTTP gets a 400 (:mod:`toposcope.serving.plainhttp`) and its
        connection is closed; cheroot is told the connection was dropped.
        """
        self.context = self._web.tls_context()
        sock.settimeout(HANDSHAKE_SECONDS)
        try:
            plain = speaks_plain_http(sock)
        except OSError as exc:
            raise errors.FatalSSLAlert(f"no TLS handshake: {exc}") from exc
        if plain:
            answer_plain_http(sock)
            raise errors.FatalSSLAlert("plain HTTP on a TLS port: answered 400 and closed")
        return super().wrap(sock)  # type: ignore[no-untyped-call]  # cheroot's stub is untyped
