"""Report formatters: plain functions ``(report) -> str`` registered by name.

:func:`formatter` registers a function under a name in :data:`FORMATTERS`; the modules
below register table, json, csv, markdown and html when this package is imported. A
formatter reads only the report it is given (no settings from elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable

from toposcope.errors import ConfigError
from toposcope.recommendation import Report

Formatter = Callable[[Report], str]

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


from toposcope.advisor.formatters import html, text  # noqa: E402  (registration)

__all__ = ["FORMATTERS", "Formatter", "find_formatter", "formatter", "html", "text"]
