"""parse_json_body: JSON from outside, with bounded nesting and a clear error for the rest."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toposcope.serving.jsonbody import DEFAULT_MAX_DEPTH, JsonBodyError, parse_json_body


def nested(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_parses_an_ordinary_body() -> None:
    body = b'{"request_id": "r-1", "cpus": [4, 5], "reason": "\\u00e9[{"}'
    assert parse_json_body(body) == {"request_id": "r-1", "cpus": [4, 5], "reason": "é[{"}
    assert parse_json_body('["text", 2]') == ["text", 2]


def test_the_limit_is_inclusive() -> None:
    assert parse_json_body(json.dumps(nested(DEFAULT_MAX_DEPTH))) == nested(DEFAULT_MAX_DEPTH)
    with pytest.raises(JsonBodyError, match=f"deeper than {DEFAULT_MAX_DEPTH} levels"):
        parse_json_body(json.dumps(nested(DEFAULT_MAX_DEPTH + 1)))
    with pytest.raises(JsonBodyError, match="deeper than 2 levels"):
        parse_json_body(b'{"a": [[1]]}', max_depth=2)


@pytest.mark.parametrize("body", [b"[" * 100_000, b"[" * 50_000 + b"]" * 50_000, b'{"a":' * 9000])
def test_nesting_that_would_exhaust_the_parser_is_a_value_error(body: bytes) -> None:
    with pytest.raises(JsonBodyError, match="deeper than") as refused:
        parse_json_body(body)
    assert isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{", "not valid JSON: Expecting property name"),
        (b"", "not valid JSON"),
        (b"[NaN]", "NaN is not a JSON number"),
        (b'{"x": -Infinity}', "-Infinity is not a JSON number"),
    ],
)
def test_what_is_not_json_is_named(body: bytes, message: str) -> None:
    with pytest.raises(JsonBodyError, match=message):
        parse_json_body(body)


@settings(max_examples=200, database=None)
@given(st.binary(max_size=256) | st.text(alphabet='[]{}",:0 ab\\', max_size=256))
def test_any_input_parses_or_is_refused_with_a_value_error(body: bytes | str) -> None:
    try:
        parse_json_body(body, max_depth=4)
    except JsonBodyError as exc:
        assert str(exc)
