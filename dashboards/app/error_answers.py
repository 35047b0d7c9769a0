"""The Dash app's error answers: JSON ``{"error": "...", "field": null}`` like every other
toposcope daemon (:func:`toposcope.serving.httplimits.json_error`), each logged as one short line.

Flask and Dash answer errors with HTML pages and log a full traceback for each; a client
asking for junk under the bundle route made about 7 KB of log per 2 KB request. Here a
client's error (an unknown bundle file, a bad request) answers its 4xx, an exception of the
app's own answers 500 with no detail, and the log gets the method, the start of the path and
the first line of the reason; the traceback of a 500 goes to the debug level only.
"""

from __future__ import annotations

import logging

from dash.exceptions import DependencyException, InvalidResourceError
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from toposcope.serving.httplimits import json_error

LOG = logging.getLogger("toposcope.dashboards.app")

#: the most characters of a path or reason a log line carries
LOGGED_CHARS = 120
INTERNAL = "internal server error; the app's log has the details"


def clipped(text: str, limit: int = LOGGED_CHARS) -> str:
    """The first line of ``text``, printable and at most ``limit`` characters, for a log line."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    shown = line.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else f"{shown[: limit - 3]}..."


def json_answer(message: str, status: int) -> Response:
    """An error answer with the JSON body of every toposcope daemon."""
    return Response(json_error(message), status=status, mimetype="application/json")


def _logged(status: int, reason: str) -> None:
    LOG.warning("%s %s: %d %s", request.method, clipped(request.path), status, clipped(reason))


def install_error_answers(server: Flask) -> None:
    """Answer every error of ``server`` as the module says (Dash's ``PreventUpdate``, an
    answer of its own, is left to Dash).
    """

    @server.errorhandler(HTTPException)
    def on_http_error(error: HTTPException) -> Response:
        status = error.code or 500
        message = error.description or error.name
        if status == 404:
            message = f"no route {request.method} {clipped(request.path)}"
        _logged(status, message)
        answer = json_answer(message, status)
        for name, value in error.get_headers():
            if name.lower() != "content-type":
                answer.headers[name] = value
        return answer

    @server.errorhandler(DependencyException)
    @server.errorhandler(InvalidResourceError)
    def on_unknown_resource(error: Exception) -> Response:
        _logged(404, str(error))
        return json_answer(f"no such file: {clipped(request.path)}", 404)

    @server.errorhandler(Exception)
    def on_unexpected(error: Exception) -> Response:
        _logged(500, f"{type(error).__name__}: {error}")
        LOG.debug("%s %s failed", request.method, clipped(request.path), exc_info=error)
        return json_answer(INTERNAL, 500)
