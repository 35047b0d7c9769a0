"""The server layer's request checks, without a socket."""

from __future__ import annotations

from email.message import Message

import pytest

from toposcope.errors import UsageError
from toposcope.serving.httplimits import RequestLimits
from toposcope.serving.httpserver import HttpServer


def headers(*pairs: tuple[str, str]) -> Message:
    message = Message()
    for name, value in pairs:
        message[name] = value
    return message


LIMITS = RequestLimits(("GET", "POST"), max_body=100)


@pytest.mark.parametrize(
    ("method", "pairs", "length", "status", "drain"),
    [
        ("POST", [("Content-Length", "100")], 100, None, None),
        ("POST", [], 0, None, None),
        ("POST", [("Content-Length", "101")], 101, 413, True),
        ("POST", [("Content-Length", "1e3")], 0, 400, False),
        ("POST", [("Content-Length", "\u00b2")], 0, 400, False),
        ("POST", [("Content-Length", "5"), ("Content-Length", "5")], 5, None, None),
        ("POST", [("Transfer-Encoding", "chunked")], 0, 411, False),
        ("DELETE", [("Content-Length", "7")], 7, 405, True),
        ("get", [], 0, 405, True),
        ("DELETE", [("Content-Length", "x")], 0, 405, False),
    ],
)
def test_request_checks(
    method: str,
    pairs: list[tuple[str, str]],
    length: int,
    status: int | None,
    drain: bool | None,
) -> None:
    declared, refusal = LIMITS.check(method, headers(*pairs))
    assert declared == length
    assert (refusal.status if refusal else None) == status
    assert (refusal.drain if refusal else None) == drain
    if status == 405:
        assert refusal is not None and refusal.headers == (("Allow", "GET, POST"),)


def test_a_negative_limit_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="body limit"):
        HttpServer(lambda environ, start_response: [], "127.0.0.1:0", max_body=-1)
