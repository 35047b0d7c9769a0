"""Reading a description's mappings field by field, so every error names file and path.

:class:`Fields` wraps one mapping of a description: it rejects unknown keys, reads typed
values with their limits and raises :class:`~toposcope.errors.ConfigError` naming the
description, the field's path (``gpus[3].power_mw.series[1]``) and the problem.
:func:`parse_value` reads a reading (a constant, a series or a counter) and :func:`bus_id` a
PCI address.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toposcope.errors import ConfigError
from toposcope.fake_nvml.values import Ramp, Series, Value
from toposcope.topology.nvml import normalise_pci_bus_id


class Fields:
    """Reads one mapping of a description, collecting the path of each field for errors."""

    def __init__(self, source: str, path: str, data: object, allowed: Iterable[str]) -> None:
        self.source = source
        self.path = path
        if not isinstance(data, Mapping):
            raise self.error(path, f"expected a mapping, got {type(data).__name__}")
        self.data: Mapping[str, Any] = data
        unknown = sorted(str(k) for k in data if k not in set(allowed))
        if unknown:
            raise self.error(
                self.path_of(unknown[0]), f"unknown field (known: {', '.join(sorted(allowed))})"
            )

    def error(self, path: str, problem: str) -> ConfigError:
        """The error for ``path`` (a field path inside the description)."""
        return ConfigError(f"fake NVML description {self.source}: {path or '(top)'}: {problem}")

    def path_of(self, key: str) -> str:
        """The full path of ``key`` in this mapping (for error messages)."""
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        """Whether ``key`` is given and not null."""
        return key in self.data and self.data[key] is not None

    def raw(self, key: str) -> Any:
        """The value of ``key`` as loaded, unchecked."""
        return self.data.get(key)

    def string(self, key: str, default: str | None = None) -> str | None:
        """``key`` as text (numbers are accepted and turned into text)."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise self.error(self.path_of(key), f"expected text, got {type(value).__name__}")
        return str(value)

    def integer(
        self, key: str, default: int | None = None, minimum: int | None = None
    ) -> int | None:
        """``key`` as an integer, at least ``minimum``."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(self.path_of(key), f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(self.path_of(key), f"must be at least {minimum}, got {value}")
        return value

    def number(
        self, key: str, default: float | None = None, minimum: float | None = None
    ) -> float | None:
        """``key`` as a number, at least ``minimum``."""
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(self.path_of(key), f"expected a number, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(self.path_of(key), f"must be at least {minimum}, got {value}")
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        """``key`` as true or false."""
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(self.path_of(key), f"expected true or false, got {value!r}")
        return value

    def value(self, key: str, maximum: float | None = None) -> Value | None:
        """``key`` as a reading (see :func:`parse_value`), ``None`` when absent."""
        raw = self.data.get(key)
        if raw is None:
            return None
        return parse_value(self, self.path_of(key), raw, maximum)

    def listing(self, key: str) -> list[Any]:
        """``key`` as a list (empty when absent)."""
        raw = self.data.get(key)
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.error(self.path_of(key), f"expected a list, got {type(raw).__name__}")
        return raw

    def child(self, key: str, allowed: Iterable[str]) -> Fields | None:
        """The mapping under ``key`` with its own allowed fields, ``None`` when absent."""
        raw = self.data.get(key)
        if raw is None:
            return None
        return Fields(self.source, self.path_of(key), raw, allowed)


def number_at(fields: Fields, path: str, raw: object) -> float:
    """``raw`` as a number (not a boolean), or an error naming ``path``."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise fields.error(path, f"expected a number, got {raw!r}")
    return float(raw)


def parse_value(fields: Fields, path: str, raw: object, maximum: float | None) -> Value:
    """A constant, ``{series: [[t, v], ...], period: p}`` or ``{start: s, rate: r}``."""
    if isinstance(raw, Mapping):
        if "series" in raw:
            sub = Fields(fields.source, path, raw, ("series", "period"))
            points_raw = sub.listing("series")
            if not points_raw:
                raise fields.error(f"{path}.series", "needs at least one [time, value] point")
            points: list[tuple[float, float]] = []
            for i, point in enumerate(points_raw):
                where = f"{path}.series[{i}]"
                if not isinstance(point, list | tuple) or len(point) != 2:
                    raise fields.error(where, f"expected [time, value], got {point!r}")
                when = number_at(fields, where, point[0])
                number = number_at(fields, where, point[1])
                if points and when <= points[-1][0]:
                    raise fields.error(where, "times must increase")
                check_range(fields, where, number, maximum)
                points.append((when, number))
            period = sub.number("period", minimum=0.0)
            if period is not None and period <= points[-1][0]:
                raise fields.error(f"{path}.period", "must be longer than the last point's time")
            return Series(tuple(points), period)
        sub = Fields(fields.source, path, raw, ("start", "rate"))
        start = sub.number("start", 0.0, minimum=0.0)
        rate = sub.number("rate", 0.0, minimum=0.0)
        assert start is not None and rate is not None
        return Ramp(start, rate)
    number = number_at(fields, path, raw)
    check_range(fields, path, number, maximum)
    return number


def check_range(fields: Fields, path: str, number: float, maximum: float | None) -> None:
    """Reject a negative reading or one above ``maximum``."""
    if number < 0:
        raise fields.error(path, f"must not be negative, got {number:g}")
    if maximum is not None and number > maximum:
        raise fields.error(path, f"must be at most {maximum:g}, got {number:g}")


def read_bus_id(fields: Fields, key: str, raw: object) -> str:
    """A PCI bus id in sysfs form, whatever notation the description used."""
    path = fields.path_of(key)
    if not isinstance(raw, str):
        raise fields.error(path, f"expected a PCI bus id such as 00000000:07:00.0, got {raw!r}")
    try:
        return normalise_pci_bus_id(raw)
    except ValueError:
        raise fields.error(
            path, f"expected a PCI bus id such as 00000000:07:00.0, got {raw!r}"
        ) from None
