"""What every report formatter takes: the report and the :class:`FormatOptions` to render it
with, and the shape of a formatter (:class:`Formatter`).

Kept apart from the package's table of formatters (:mod:`toposcope.advisor.formatters`) so
that each formatter module imports these and the table imports the formatters, one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from toposcope.report.recommendation import Report


@dataclass(frozen=True)
class FormatOptions:
    """How to render.

    ``width`` is the line length a table fits to (0: no limit); ``wide`` puts every column
    of a table on one line, unwrapped; ``standalone`` inlines the bundled plotly.js in an
    HTML report for its interactive chart (default: a small page with no script at all).
    """

    width: int = 0
    wide: bool = False
    standalone: bool = False


#: the options a formatter gets when its caller gives none
DEFAULT_OPTIONS = FormatOptions()


class Formatter(Protocol):
    """A function rendering one report as text."""

    def __call__(self, report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
        """The report as text."""
        ...
