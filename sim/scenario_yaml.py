"""Scenario YAML read with line numbers, and typed access to its fields: every error
names ``FILE:LINE: FIELD`` (:mod:`toposcope.sim.scenarios`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import yaml

from toposcope.cpulist import parse_cpulist
from toposcope.errors import ConfigError
from toposcope.sim.jobs import (
    short_repr,
)

# -- YAML with line numbers ------------------------------------------------------------------


class ScenarioMap(dict[Any, Any]):
    """A YAML mapping that remembers its line and each key's line (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]


class _Seq(list[Any]):
    """A YAML sequence that remembers its line and each item's line (1-based)."""

    line: int = 0
    item_lines: list[int]


class ScenarioLoader(yaml.SafeLoader):
    """Safe YAML loader whose mappings and sequences carry line numbers, and whose values
    that cannot be built (a date such as ``2024-13-45``) are errors at their line.
    """

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """The value of ``node``; a value error becomes a YAML error at the node's line."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {short_repr(node.value)}: {exc}", node.start_mark
            ) from None


def _construct_map(loader: ScenarioLoader, node: yaml.MappingNode) -> ScenarioMap:
    loader.flatten_mapping(node)
    result = ScenarioMap()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"a key must be text or a number, not a {type_name(key)} ({short_repr(key)})",
                key_node.start_mark,
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_seq(loader: ScenarioLoader, node: yaml.SequenceNode) -> _Seq:
    result = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


ScenarioLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
ScenarioLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)


class ScenarioFields:
    """One mapping of the file being checked: typed getters that fail with file, line, field."""

    def __init__(
        self, source: str, path: str, data: object, allowed: tuple[str, ...], line: int = 0
    ) -> None:
        self.source = source
        self.path = path
        self.line = getattr(data, "line", line)
        self.data: Mapping[Any, Any] = {}
        if not isinstance(data, Mapping):
            raise self.error("", f"expected a mapping, got {type_name(data)}")
        self.data = data
        for key in data:
            if key not in allowed:
                raise self.error(str(key), f"unknown field (known: {', '.join(allowed)})")

    def _line_of(self, key: str) -> int:
        lines: dict[Any, int] = getattr(self.data, "key_lines", {})
        return lines.get(key, self.line)

    def where(self, key: str = "") -> str:
        """``FILE:LINE: FIELD`` for a key of this mapping."""
        field = f"{self.path}.{key}" if self.path and key else (key or self.path or "(top)")
        return f"{self.source}:{self._line_of(key) if key else self.line}: {field}"

    def error(self, key: str, problem: str) -> ConfigError:
        """A :class:`ConfigError` for ``key`` (or the mapping itself)."""
        return ConfigError(f"{self.where(key)}: {problem}")

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return self.data.get(key) is not None

    def text(self, key: str, default: str | None = None) -> str | None:
        """A string field."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"expected text, got {type_name(value)}")
        return value

    def required_text(self, key: str) -> str:
        """A string field that must be there."""
        value = self.text(key)
        if not value:
            raise self.error(key, "is required")
        return value

    def integer(
        self,
        key: str,
        default: int | None = None,
        minimum: int = 0,
        maximum: int | None = None,
    ) -> int | None:
        """An integer field within ``[minimum, maximum]``."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {short_repr(value)}")
        if value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {short_repr(value)}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be at most {maximum:,}, got {short_repr(value)}")
        return value

    def number(
        self,
        key: str,
        default: float | None = None,
        *,
        minimum: float = 0.0,
        maximum: float,
    ) -> float | None:
        """A finite number field within ``[minimum, maximum]``."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {short_repr(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value}")
        if value < minimum:
            raise self.error(key, f"must be at least {minimum:g}, got {short_repr(value)}")
        if value > maximum:
            raise self.error(key, f"must be at most {maximum:g}, got {short_repr(value)}")
        return float(value)

    def items(self, key: str) -> list[tuple[int, Any]]:
        """A list field as ``(line, item)`` pairs."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {type_name(value)}")
        lines = getattr(value, "item_lines", [self._line_of(key)] * len(value))
        return list(zip(lines, value, strict=True))

    def child(self, key: str, allowed: tuple[str, ...]) -> ScenarioFields | None:
        """A nested mapping field."""
        value = self.data.get(key)
        if value is None:
            return None
        path = f"{self.path}.{key}" if self.path else key
        return ScenarioFields(self.source, path, value, allowed, self._line_of(key))

    def int_list(self, key: str) -> list[int] | None:
        """A list of integers, or a cpulist string (``"0-13,28-41"``, bounded by
        :func:`~toposcope.cpulist.parse_cpulist`).
        """
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            try:
                return list(parse_cpulist(value))
            except ValueError as exc:
                raise self.error(key, f"not a cpulist: {exc}") from None
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(
                key, f"expected a list of integers or a cpulist, got {short_repr(value)}"
            )
        return list(value)


def type_name(value: object) -> str:
    """How an error message names the YAML type of ``value``."""
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    return type(value).__name__
