"""The WSGI layer every toposcope server puts around its application: basic auth and the
extra headers of the web configuration, a JSON 503 before the application is set, a JSON
500 (logged here, never with a traceback) when the application raises, and gzip for metrics
answers (:mod:`toposcope.serving.httpgzip`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

from toposcope.serving.httpgzip import WsgiApp, gzip_metrics
from toposcope.serving.httplimits import Refusal, json_error
from toposcope.serving.livewebconfig import LiveWebConfig

LOG = logging.getLogger("toposcope.http")

STARTING = Refusal(503, "the server is starting")
UNAUTHORIZED = Refusal(
    401,
    "this server needs a basic-auth user and password",
    (("WWW-Authenticate", 'Basic realm="toposcope", charset="UTF-8"'),),
)
INTERNAL = "internal server error; the server's log has the details"


class Guard:
    """A WSGI application that checks what the web configuration asks, then runs ``app``.

    ``web`` is the live web configuration (``None``: no checks); with ``in_app`` the
    application checks the basic-auth users and adds the headers itself (the Dash app, which
    records who signed in), and the guard leaves both to it.

    Nothing is rebuilt per request: the gzip layer is put around ``app`` when it is set, and
    the header list is made once per loaded web configuration (a reload makes a new one).
    """

    def __init__(self, app: WsgiApp | None) -> None:
        self.app = app
        self.web: LiveWebConfig | None = None
        self.in_app = False
        # (configuration, its header list), replaced as one object: threads share it
        self._headers: tuple[object, list[tuple[str, str]]] = (None, [])

    @property
    def app(self) -> WsgiApp | None:
        """The application served (``None`` until it is set: 503)."""
        return self._app

    @app.setter
    def app(self, app: WsgiApp | None) -> None:
        self._app = app
        self._gzipped = gzip_metrics(app) if app is not None else None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """Answer one request."""
        headers: list[tuple[str, str]] = []
        if self.web is not None and not self.in_app:
            config = self.web.current()
            seen, headers = self._headers
            if config is not seen:
                headers = list(config.headers.items())
                self._headers = (config, headers)
            if config.basic_auth:
                user = config.check_basic_auth(environ.get("HTTP_AUTHORIZATION"))
                if user is None:
                    return _with_headers(UNAUTHORIZED.app, headers)(environ, start_response)
                environ["REMOTE_USER"] = user
        app = self._gzipped
        if app is None:
            return _with_headers(STARTING.app, headers)(environ, start_response)
        try:
            return _with_headers(app, headers)(environ, start_response)
        except Exception:
            request = f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')}"
            LOG.error("error answering %s", request, exc_info=True)
            body = json_error(INTERNAL)
            status = Refusal(500, INTERNAL)
            start_response(status.status_line, status.header_list(body), sys.exc_info())
            return [body]


def _with_headers(app: WsgiApp, headers: list[tuple[str, str]]) -> WsgiApp:
    """``app`` with ``headers`` added to its answer."""
    if not headers:
        return app

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def starting(status: str, answer: list[tuple[str, str]], *exc_info: Any) -> Any:
            return start_response(status, [*answer, *headers], *exc_info)

        return app(environ, starting)

    return wrapped
