"""Scope every series a dashboard query selects to the ``cluster`` and ``job`` variables.

Every dashboard has the variables ``cluster`` and ``job`` (:mod:`toposcope.dashboards.grafana.
common`); :func:`scoped` adds ``cluster=~"$cluster", job=~"$job"`` to each vector selector of
a PromQL expression, so no panel can forget them and a dashboard module writes its queries
as if there were one cluster. dcgm-exporter's series come from their own scrape job, so they
get the cluster matcher only. With All chosen both variables are ``.*``, which also matches
series without the label (single-cluster setups need no ``cluster`` label).

The expression is read with a small PromQL scanner: strings, range and subquery brackets,
Grafana variables and numbers are copied; a name followed by ``(`` (a function or aggregation)
and the label lists of ``by``, ``without``, ``on``, ``ignoring``, ``group_left`` and
``group_right`` are not selectors. Anything else named is a metric selector.
"""

from __future__ import annotations

import re

#: Matchers added to toposcope's selectors.
SCOPE = 'cluster=~"$cluster", job=~"$job"'
#: Matchers added to dcgm-exporter's selectors (their job is dcgm-exporter's own).
CLUSTER_ONLY = 'cluster=~"$cluster"'
#: Prefix of dcgm-exporter's metric names.
DCGM_PREFIX = "DCGM_"

_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER = re.compile(r"(?:0x[0-9a-fA-F]+|\d[\d.]*(?:[eE][+-]?\d+)?[a-z]*(?:\d+[a-z]+)*)")
_VARIABLE = re.compile(r"\$(?:\{[^}]*\}|\w+)")
_AGGREGATIONS = {
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
}
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def _end_of_string(expr: str, start: int) -> int:
    quote = expr[start]
    index = start + 1
    while index < len(expr):
        if expr[index] == "\\" and quote != "`":
            index += 2
            continue
        if expr[index] == quote:
            return index + 1
        index += 1
    raise ValueError(f"unterminated string in {expr!r}")


def _end_of(expr: str, start: int, close: str) -> int:
    """Index after the ``close`` that ends the bracket at ``start`` (strings skipped)."""
    opening = expr[start]
    depth = 0
    index = start
    while index < len(expr):
        char = expr[index]
        if char in "\"'`":
            index = _end_of_string(expr, index)
            continue
        if char == opening:
            depth += 1
        elif char == close:
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    raise ValueError(f"unbalanced {opening!r} in {expr!r}")


def _skip_space(expr: str, index: int) -> int:
    while index < len(expr) and expr[index].isspace():
        index += 1
    return index


def _matchers(braces: str, metric: str) -> str:
    """``braces`` (``{...}``, possibly empty) with the scope matchers first."""
    inner = braces[1:-1].strip()
    if "$cluster" in inner:
        return braces
    scope = CLUSTER_ONLY if metric.startswith(DCGM_PREFIX) else SCOPE
    return "{" + scope + (", " + inner if inner else "") + "}"


def scoped(expr: str) -> str:
    """``expr`` with the ``cluster`` and ``job`` matchers in every vector selector."""
    out: list[str] = []
    index = 0
    while index < len(expr):
        char = expr[index]
        if char in "\"'`":
            end = _end_of_string(expr, index)
        elif char == "[":
            end = _end_of(expr, index, "]")
        elif char == "{":
            end = _end_of(expr, index, "}")
            out.append(_matchers(expr[index:end], ""))
            index = end
            continue
        elif (variable := _VARIABLE.match(expr, index)) is not None:
            end = variable.end()
        elif (number := _NUMBER.match(expr, index)) is not None:
            end = number.end()
        elif (ident := _IDENT.match(expr, index)) is not None:
            index = _scan_name(expr, ident.group(), ident.end(), out)
            continue
        else:
            end = index + 1
        out.append(expr[index:end])
        index = end
    return "".join(out)


def _scan_name(expr: str, name: str, end: int, out: list[str]) -> int:
    """Copy (and scope, when it is a selector) the name ending at ``end``; return the next index."""
    after = _skip_space(expr, end)
    follows = expr[after] if after < len(expr) else ""
    lowered = name.lower()
    if lowered in _LABEL_LISTS and follows == "(":
        close = _end_of(expr, after, ")")
        out.append(expr[end - len(name) : close])
        return close
    if lowered in _AGGREGATIONS or lowered in _KEYWORDS or follows == "(":
        out.append(name)
        return end
    if follows == "{":
        close = _end_of(expr, after, "}")
        out.append(name + _matchers(expr[after:close], name))
        return close
    out.append(name + _matchers("{}", name))
    return end
