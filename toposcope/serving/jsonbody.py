"""Parsing a JSON request body that came from outside, with a bound on its nesting.

Python's parser recurses once per level, so a body of 100,000 ``[`` raises
:class:`RecursionError`, which HTTP frameworks do not expect and answer with 500; and even
a nesting the parser survives makes every later recursive walk over the value costly. Every
API of toposcope expects shallow objects, so :func:`parse_json_body` refuses anything deeper
than ``max_depth`` levels with a :class:`JsonBodyError` (a ``ValueError``), which servers
answer with 400.
"""

from __future__ import annotations

import json
from typing import Any

#: Levels of arrays and objects a request body may nest: far more than any API body needs.
DEFAULT_MAX_DEPTH = 32


class JsonBodyError(ValueError):
    """A request body that is not JSON, or nests too deep; the message says which."""


def _refuse_constant(name: str) -> Any:
    raise JsonBodyError(f"the body is not valid JSON: {name} is not a JSON number")


def parse_json_body(raw: bytes | str, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The JSON value of a request body, nesting at most ``max_depth`` arrays and objects.

    :class:`JsonBodyError` names what is wrong: not UTF-8, not JSON (with the parser's
    position), ``NaN``/``Infinity`` (not JSON, though Python accepts them) or too deep.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise JsonBodyError(f"the body is not UTF-8 text: {exc.reason}") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise JsonBodyError(_too_deep(max_depth)) from None
    except JsonBodyError:
        raise
    except ValueError as exc:
        raise JsonBodyError(f"the body is not valid JSON: {exc}") from None
    if _deeper_than(value, max_depth):
        raise JsonBodyError(_too_deep(max_depth))
    return value


def _too_deep(max_depth: int) -> str:
    return f"the JSON body nests arrays and objects deeper than {max_depth} levels"


def _deeper_than(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests more than ``max_depth`` containers (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
