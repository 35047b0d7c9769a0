"""The committed dashboards read as data: panels, queries, variables, and ``$variable``
substitution so that their PromQL can be parsed and evaluated outside Grafana."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from toposcope.dashboards.grafana import JSON_DIR
from toposcope.dashboards.grafana.boards import BUILDERS

#: Grafana's own variables that panels use, with the values the tests put in their place.
#: ``$__rate_interval`` is at least four scrape intervals in Grafana; the tests' Prometheus
#: scrapes every second, and one minute holds enough samples for rate() from the second scrape.
BUILTINS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}
#: ``$name``, ``${name}`` and ``${name:format}``.
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
#: A query variable's definition.
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


@dataclass(frozen=True)
class Query:
    """One query of one panel of one committed dashboard."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard}:{self.panel}:{self.ref_id}"


@cache
def dashboards() -> dict[str, dict[str, Any]]:
    """The committed dashboards keyed by uid (generated from the code in the order of BUILDERS)."""
    loaded: dict[str, dict[str, Any]] = {}
    for path in sorted(JSON_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        loaded[str(data["uid"])] = data
    assert len(loaded) == len(BUILDERS), f"{JSON_DIR} should hold one file per dashboard"
    return loaded


def panels(data: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard, rows' inner panels included, rows themselves left out."""
    for panel in data.get("panels", []):
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def all_panels() -> list[tuple[str, dict[str, Any]]]:
    """(dashboard uid, panel) for every panel of every dashboard."""
    return [(uid, panel) for uid, data in dashboards().items() for panel in panels(data)]


def queries() -> list[Query]:
    """Every query of every panel of every dashboard."""
    return [
        Query(uid, str(panel["title"]), str(target["refId"]), str(target["expr"]))
        for uid, panel in all_panels()
        for target in panel["targets"]
    ]


def variables(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A dashboard's template variables, in order."""
    found: list[dict[str, Any]] = data.get("templating", {}).get("list", [])
    return found


def variable_names(text: str) -> set[str]:
    """Names of the ``$variables`` a query or definition uses."""
    return {a or b for a, b in VARIABLE.findall(text)}


def substitute(text: str, values: Mapping[str, str]) -> str:
    """``text`` with every ``$variable`` replaced by ``values`` or :data:`BUILTINS`.

    Raises ``KeyError`` for a variable that has no value.
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return {**BUILTINS, **values}[name]

    return VARIABLE.sub(value, text)


def label_values(definition: str) -> tuple[str, str]:
    """(selector, label) of a ``label_values(selector, label)`` variable definition."""
    match = LABEL_VALUES.match(definition.strip())
    assert match, f"not a label_values(selector, label) query: {definition!r}"
    return match["selector"], match["label"]
