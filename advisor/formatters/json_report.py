"""The JSON formatter: the report contract of the core, with its ``schema_version``."""

from __future__ import annotations

from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions
from toposcope.report.recommendation import Report


def as_json(report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
    """The whole report as JSON (sorted keys, with its ``schema_version``), the form
    :func:`toposcope.report.decoder.report_from_json` reads back and
    ``docs/advisor-report.schema.json`` describes.
    """
    return report.to_json() + "\n"
