"""Report formatters: plain functions ``(report, options) -> str`` registered by name.

:func:`formatter` registers a function under a name in :data:`FORMATTERS`; the modules
below (one per format: table, json, yaml, csv, markdown, html) register themselves when this
package is imported. A formatter reads only the report and the :class:`FormatOptions` it is
given, never settings from elsewhere; the formatters know nothing of loaders or policies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from toposcope.errors import ConfigError
from toposcope.report.recommendation import Report


@dataclass(frozen=True)
class FormatOptions:
    """How to render: ``width`` is the line length a table wraps to (0: never wrap)."""

    width: int = 0


#: the options a formatter gets when its caller gives none
DEFAULT_OPTIONS = FormatOptions()


class Formatter(Protocol):
    """A function rendering one report as text."""

    def __call__(self, report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
        """The report as text."""
        ...


#: format name -> formatter, filled by :func:`formatter`
FORMATTERS: dict[str, Formatter] = {}


def formatter(name: str) -> Callable[[Formatter], Formatter]:
    """Register the decorated function as the formatter called ``name``."""

    def register(func: Formatter) -> Formatter:
        if name in FORMATTERS:
            raise ValueError(f"formatter {name!r} registered twice")
        FORMATTERS[name] = func
        return func

    return register


def find_formatter(name: str) -> Formatter:
    """The formatter called ``name``; :class:`ConfigError` lists the known ones."""
    try:
        return FORMATTERS[name]
    except KeyError:
        raise ConfigError(
            f"unknown format {name!r}; known formats: {', '.join(sorted(FORMATTERS))}"
        ) from None


from toposcope.advisor.formatters import (  # noqa: E402  (registration)
    csv_report,
    html,
    json_report,
    markdown,
    table,
    yaml_report,
)

__all__ = [
    "DEFAULT_OPTIONS",
    "FORMATTERS",
    "FormatOptions",
    "Formatter",
    "csv_report",
    "find_formatter",
    "formatter",
    "html",
    "json_report",
    "markdown",
    "table",
    "yaml_report",
]
