"""What every toposcope HTTP server refuses before an application sees a request.

A method outside the server's list answers 405 with an ``Allow`` header; a body over the
server's limit answers 413 from its ``Content-Length`` alone; an invalid ``Content-Length``
answers 400 and a ``Transfer-Encoding`` (a body of unknown length) 411. Every refusal is JSON
``{"error": "...", "field": null}``, the error shape of the resource-manager API.
"""

from __future__ import annotations

import email.utils
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.message import Message
from http import HTTPStatus
from typing import Any

#: Largest request body a server accepts unless it is given another limit (1 MiB).
DEFAULT_MAX_BODY = 1024 * 1024
#: Methods a server accepts unless it is given another list.
DEFAULT_METHODS = ("GET", "HEAD", "POST")


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

    @property
    def status_line(self) -> str:
        """``CODE Phrase``, as WSGI's ``start_response`` takes it."""
        return f"{self.status} {HTTPStatus(self.status).phrase}"

    def header_list(self, body: bytes) -> list[tuple[str, str]]:
        """The answer's headers for ``body``: JSON type, length and the refusal's own."""
        return [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            *self.headers,
        ]

    def raw_answer(
        self, protocol: str, server: str, extra: Sequence[tuple[str, str]] = ()
    ) -> tuple[bytes, bytes]:
        """The answer as written straight to a connection, outside WSGI: the status line and
        headers (``Connection: close``, then ``extra``) ending in the blank line, and the body.
        """
        body = json_error(self.message)
        headers = [
            ("Server", server),
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Connection", "close"),
            *self.header_list(body),
            *extra,
        ]
        head = f"{protocol} {self.status_line}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in headers
        )
        return (head + "\r\n").encode("latin-1"), body

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        """Answer as a WSGI application would."""
        body = json_error(self.message)
        start_response(self.status_line, self.header_list(body))
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
