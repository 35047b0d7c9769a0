"""A plain-HTTP request on a TLS listener, answered as Go's net/http answers it: ``400 Bad
Request`` (the JSON error shape of every refusal) and the connection closed, instead of a
failed handshake that the client sees as a reset connection.

The request is recognised from the connection's first byte, read without taking it
(``MSG_PEEK``): a TLS record starts with its content type (``0x14``-``0x18``, or ``0x80`` and
up for an SSLv2 hello), an HTTP request with its method, upper-case ASCII letters. The answer
goes out before any TLS is spoken, so nothing of the application is ever served in the clear.
After the answer the server stops writing and reads what the client sent (at most
:data:`LINGER_BYTES` for :data:`LINGER_SECONDS`, until the client closes), so that closing
does not reset the connection before the client has read the answer.
"""

from __future__ import annotations

import logging
import socket
import time

from toposcope.serving.httpconnection import SERVER_SOFTWARE
from toposcope.serving.httplimits import Refusal

LOG = logging.getLogger("toposcope.http")

#: What a plain-HTTP client on a TLS port is told.
PLAIN_HTTP = Refusal(400, "the client sent an HTTP request to an HTTPS server: use https://")
#: Most seconds the server waits for the client to read the answer and close.
LINGER_SECONDS = 0.5
#: Most bytes of the client's request read and dropped after the answer.
LINGER_BYTES = 64 * 1024
_METHOD_LETTERS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def speaks_plain_http(sock: socket.socket) -> bool:
    """Whether the first byte the client sent starts an HTTP request, not a TLS record.

    Waits for that byte as long as the socket's timeout allows (a TLS handshake would wait
    the same); the byte stays to be read. ``OSError`` (a timeout included) when none comes,
    ``False`` when the client closed without sending.
    """
    first = sock.recv(1, socket.MSG_PEEK)
    return bool(first) and first[0] in _METHOD_LETTERS


def answer_plain_http(sock: socket.socket) -> None:
    """Answer :data:`PLAIN_HTTP` on ``sock``, let the client read it, and close ``sock``."""
    head, body = PLAIN_HTTP.raw_answer("HTTP/1.1", SERVER_SOFTWARE)
    try:
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        _drain(sock)
    except OSError as exc:
        LOG.debug("answering plain HTTP on a TLS port: %s", exc)
    finally:
        sock.close()


def _drain(sock: socket.socket) -> None:
    """Read and drop what the client sends until it closes (bounded), so the close that
    follows is a clean one the client reads the answer before.
    """
    deadline = time.monotonic() + LINGER_SECONDS
    left = LINGER_BYTES
    while left > 0 and (wait := deadline - time.monotonic()) > 0:
        sock.settimeout(wait)
        try:
            chunk = sock.recv(min(left, 16384))
        except TimeoutError:
            return
        if not chunk:
            return
        left -= len(chunk)
