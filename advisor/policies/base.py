"""What every policy is: a name, frozen settings with bounds and help, required metrics,
and ``evaluate(model)`` returning recommendations plus "cannot decide" notes.

Policies only decide; they never call a resource manager (the applier acts). Settings are
frozen dataclasses whose fields are declared with :func:`setting` (default, bounds, help):
:meth:`PolicySettings.validate` reports every problem at once, :meth:`PolicySettings.with_overrides`
turns ``--set policy.field=value`` text into typed values, and the docs' settings tables are
generated from the same declarations.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from toposcope.advisor.model import ClusterModel
from toposcope.catalogue import MetricSpec
from toposcope.errors import ConfigError
from toposcope.report.recommendation import Note, Recommendation


def setting(
    default: Any,
    *,
    help: str,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Iterable[str] | None = None,
) -> Any:
    """Declare a settings field with its default, bounds and help text."""
    metadata = {
        "help": help,
        "ge": ge,
        "gt": gt,
        "le": le,
        "lt": lt,
        "choices": tuple(choices) if choices is not None else None,
    }
    if isinstance(default, list | dict | set):
        raise TypeError("settings defaults must be immutable (use a tuple)")
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class SettingInfo:
    """One setting as documentation and the CLI see it."""

    name: str
    type: str
    default: Any
    help: str
    bounds: str


@dataclass(frozen=True)
class PolicySettings:
    """Base of every policy's frozen settings dataclass."""

    def problems(self) -> list[str]:
        """Every violated bound or choice, as ``field: message`` lines (empty when valid)."""
        found: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            meta = f.metadata
            values = value if isinstance(value, tuple) else (value,)
            for item in values:
                if meta.get("choices") is not None and item not in meta["choices"]:
                    found.append(f"{f.name}: {item!r} is not one of {', '.join(meta['choices'])}")
                if isinstance(item, bool) or not isinstance(item, int | float):
                    continue
                if meta.get("ge") is not None and item < meta["ge"]:
                    found.append(f"{f.name}: {item} must be >= {meta['ge']}")
                if meta.get("gt") is not None and item <= meta["gt"]:
                    found.append(f"{f.name}: {item} must be > {meta['gt']}")
                if meta.get("le") is not None and item > meta["le"]:
                    found.append(f"{f.name}: {item} must be <= {meta['le']}")
                if meta.get("lt") is not None and item >= meta["lt"]:
                    found.append(f"{f.name}: {item} must be < {meta['lt']}")
        return found

    def validate(self) -> None:
        """Raise :class:`ConfigError` listing every problem at once."""
        found = self.problems()
        if found:
            raise ConfigError(f"invalid {type(self).__qualname__}: " + "; ".join(found))

    @classmethod
    def describe(cls) -> list[SettingInfo]:
        """The settings' names, types, defaults, help and bounds, for docs and ``--help``."""
        infos = []
        for f in dataclasses.fields(cls):
            meta = f.metadata
            bounds = []
            for key, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
                if meta.get(key) is not None:
                    bounds.append(f"{symbol} {meta[key]:g}")
            if meta.get("choices"):
                bounds.append("one of " + ", ".join(meta["choices"]))
            default = f.default
            type_name = type(default).__name__
            if isinstance(default, tuple):
                inner = type(default[0]).__name__ if default else "str"
                type_name = f"list of {inner}"
            infos.append(
                SettingInfo(f.name, type_name, default, meta.get("help", ""), ", ".join(bounds))
            )
        return infos

    def with_overrides(self, overrides: Mapping[str, str]) -> PolicySettings:
        """A copy with fields set from text (``"0.3"``, ``"true"``, ``"a,b"``), validated.

        Unknown names and unparsable values are reported together with bound violations.
        """
        known = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        found: list[str] = []
        for name, text in overrides.items():
            key = name.replace("-", "_")
            if key not in known:
                found.append(f"{name}: unknown setting (known: {', '.join(sorted(known))})")
                continue
            try:
                changes[key] = _convert(getattr(self, key), text)
            except ValueError as exc:
                found.append(f"{name}: {exc}")
        candidate = dataclasses.replace(self, **changes) if changes else self
        found += candidate.problems()
        if found:
            raise ConfigError(f"invalid {type(self).__qualname__}: " + "; ".join(found))
        return candidate

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (for the report's run metadata)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _convert(current: Any, text: str) -> Any:
    if isinstance(current, bool):
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{text!r} is not a boolean")
    if isinstance(current, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
    if isinstance(current, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    if isinstance(current, tuple):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if current and isinstance(current[0], int):
            try:
                return tuple(int(i) for i in items)
            except ValueError:
                raise ValueError(f"{text!r} is not a list of integers") from None
        return tuple(items)
    return text


@dataclass(frozen=True)
class Evaluation:
    """What a policy found: recommendations and notes for what it could not decide."""

    recommendations: tuple[Recommendation, ...] = ()
    undecided: tuple[Note, ...] = ()


S = TypeVar("S", bound=PolicySettings)


class Policy(ABC, Generic[S]):
    """A policy: ``name``, ``description``, ``Settings``, ``requires`` and :meth:`evaluate`.

    ``requires`` lists the catalogue rows the policy cannot work without; when none of
    their series came back, :meth:`missing_note` says so instead of deciding on nothing.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    settings_type: ClassVar[type[PolicySettings]]
    requires: ClassVar[tuple[MetricSpec, ...]]

    def __init__(self, settings: S | None = None) -> None:
        chosen = settings if settings is not None else self.settings_type()
        chosen.validate()
        self.settings: S = chosen  # type: ignore[assignment]

    def missing_note(self, model: ClusterModel) -> Note | None:
        """A note naming the required metrics that had no series, or ``None``."""
        missing = [s.name for s in self.requires if not model.has(s.name)]
        if not missing:
            return None
        return Note(self.name, "*", "no series for " + ", ".join(missing))

    def note(self, target: str, reason: str) -> Note:
        """A "cannot decide" note from this policy."""
        return Note(self.name, target, reason)

    @abstractmethod
    def evaluate(self, model: ClusterModel) -> Evaluation:
        """Recommendations for ``model`` and notes on what could not be decided."""
