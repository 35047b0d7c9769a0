"""Report formatters: plain functions ``(report, options) -> str``, listed by name.

:data:`FORMATTERS` is the explicit table of formats (table, json, yaml, csv, markdown, html),
one module each; adding a format means writing its module and adding it here. A formatter
reads only the report and the :class:`~.options.FormatOptions` it is given, never settings
from elsewhere; the formatters know nothing of loaders or policies.
"""

from __future__ import annotations

from collections.abc import Mapping

from toposcope.advisor.formatters import csv_report, html, json_report, markdown, table, yaml_report
from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions, Formatter
from toposcope.errors import ConfigError

#: format name -> formatter
FORMATTERS: Mapping[str, Formatter] = {
    "csv": csv_report.as_csv,
    "html": html.as_html,
    "json": json_report.as_json,
    "markdown": markdown.as_markdown,
    "table": table.table,
    "yaml": yaml_report.as_yaml,
}


def find_formatter(name: str) -> Formatter:
    """The formatter called ``name``; :class:`ConfigError` lists the known ones."""
    try:
        return FORMATTERS[name]
    except KeyError:
        raise ConfigError(
            f"unknown format {name!r}; known formats: {', '.join(sorted(FORMATTERS))}"
        ) from None


__all__ = [
    "DEFAULT_OPTIONS",
    "FORMATTERS",
    "FormatOptions",
    "Formatter",
    "find_formatter",
]
