"""Writing untrusted values into PromQL as label-matcher values, never as PromQL.

A workload, node or job name comes from whoever runs an exporter; pasted into an expression
it could close the string and add operators (``x"} or vector(1) or y{a="``). These helpers
turn any value into one PromQL string literal: :func:`string_literal` for ``=`` and ``!=``
matchers, :func:`regex_literal` for ``=~`` and ``!~`` ones, whose value is also a regular
expression (RE2, anchored by Prometheus) and so needs its metacharacters escaped first.
"""

from __future__ import annotations

import re

#: characters RE2 reads as syntax; each is matched literally once escaped with a backslash
_REGEX_META = re.compile(r"([\\.+*?()|\[\]{}^$])")


def string_literal(value: str) -> str:
    """``value`` as a double-quoted PromQL string (backslashes, quotes and newlines escaped)."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def regex_literal(value: str) -> str:
    """``value`` as a PromQL string that, as an RE2 pattern, matches exactly ``value``."""
    return string_literal(_REGEX_META.sub(r"\\\1", value))
