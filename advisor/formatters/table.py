"""The table formatter: aligned columns for a terminal, wrapped to its width.

The short columns (id, kind, gain, severity...) keep their width, so an id can be copied
whole; when a row is longer than :attr:`FormatOptions.width`, the summary, the change and
the target share what is left and wrap onto continuation lines. A line is longer than the
width only when the short columns and the narrowest wrapped ones alone already are.
Control characters in names and notes are shown as escapes (:func:`~.escaping.visible`),
never written to the terminal.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from toposcope.advisor.formatters.cells import COLUMNS, NUMERIC, action_text, cells, header
from toposcope.advisor.formatters.escaping import visible
from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions
from toposcope.report.recommendation import Report

#: the columns that wrap, with their share of the width left by the others
WRAPPING = {"SUMMARY": 3, "CHANGE": 2, "TARGET": 2}
#: the narrowest a wrapping column becomes
MIN_WRAP = 8
#: the space between columns
GAP = "  "


def fit_widths(natural: Sequence[int], names: Sequence[str], width: int) -> list[int]:
    """Column widths no wider than ``natural`` whose total (gaps included) fits ``width``
    when it can: the other columns keep their width and the :data:`WRAPPING` columns share
    what is left by weight, a column that needs less than its share giving the rest to
    the others (none narrower than :data:`MIN_WRAP`).
    """
    widths = list(natural)
    if width <= 0 or sum(widths) + len(GAP) * (len(widths) - 1) <= width:
        return widths
    wrapping = [i for i, name in enumerate(names) if name in WRAPPING]
    budget = width - len(GAP) * (len(widths) - 1)
    budget -= sum(w for i, w in enumerate(widths) if i not in wrapping)
    left = list(wrapping)
    while left:
        unit = budget / sum(WRAPPING[names[i]] for i in left)
        fits = [i for i in left if natural[i] <= unit * WRAPPING[names[i]]]
        if not fits:
            for i in left:
                widths[i] = max(MIN_WRAP, int(unit * WRAPPING[names[i]]))
            break
        for i in fits:
            budget -= natural[i]
            left.remove(i)
    return widths


def _lines(cell: str, width: int) -> list[str]:
    lines: list[str] = []
    for part in cell.split("\n"):
        lines += [part] if len(part) <= width else textwrap.wrap(part, width) or [""]
    return lines


def render_rows(names: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """``rows`` under the header ``names``, aligned, wrapped to ``width`` (0: no wrapping);
    a newline in a cell starts a new line within it.
    """
    natural = [
        max(len(n), *(len(line) for r in rows for line in r[i].split("\n")))
        for i, n in enumerate(names)
    ]
    widths = fit_widths(natural, names, width)
    out = [GAP.join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip()]
    for row in rows:
        wrapped = [_lines(cell, w) for cell, w in zip(row, widths, strict=True)]
        for k in range(max(len(c) for c in wrapped)):
            parts = []
            for i, (lines, w) in enumerate(zip(wrapped, widths, strict=True)):
                text = lines[k] if k < len(lines) else ""
                parts.append(text.rjust(w) if names[i] in NUMERIC else text.ljust(w))
            out.append(GAP.join(parts).rstrip())
    return out


def _wrap(text: str, width: int, indent: str = "", more: str = "") -> list[str]:
    if width <= len(more) + 8:
        return [indent + text]
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=more)


def table(report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
    """Aligned columns sorted by gain (highest first), each action of a recommendation on a
    line of its own, then the notes; all wrapped to ``options.width``.
    """
    lines = _wrap(visible(header(report)), options.width)
    rows = []
    for rec in report.by_gain():
        row = {name: visible(cell) for name, cell in cells(rec).items()}
        row["CHANGE"] = "\n".join(visible(action_text(a)) for a in rec.actions) or "-"
        rows.append([row[c] for c in COLUMNS])
    if rows:
        lines.append("")
        lines += render_rows(COLUMNS, rows, options.width)
    else:
        lines.append("nothing to do")
    if report.notes:
        lines += ["", "notes:"]
        for n in report.notes:
            note = visible(f"[{n.policy}] {n.target}: {n.reason}")
            lines += _wrap(note, options.width, "  ", "    ")
    return "\n".join(lines) + "\n"
