"""The table formatter: one line per recommendation that fits the terminal, its summary
under it.

Each recommendation is a row of :data:`COMPACT` columns (kind, target, gain, confidence,
change: what a person scans for), then its id, severity, risk and summary, indented and
wrapped to :attr:`FormatOptions.width` at spaces (:func:`~.wrapping.wrap`: a name is never
split inside a word). The target and the change share what the fixed columns leave; a cell
that does not fit is cut with an ellipsis and then written whole on an indented line of its
own, so nothing is lost; when the change column would be too narrow to say anything, each
change is written under its row instead. With :attr:`FormatOptions.wide` every column
(:data:`~.cells.COLUMNS`) is on one line, unwrapped, for ``grep`` or a wide screen. Control
characters in names and notes are shown as escapes (:func:`~.escaping.visible`), never
written to the terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toposcope.advisor.formatters.cells import COLUMNS, NUMERIC, cells, change_text, header
from toposcope.advisor.formatters.escaping import visible
from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions
from toposcope.advisor.formatters.wrapping import shorten, wrap
from toposcope.report.recommendation import Recommendation, Report

#: the columns of a recommendation's line (the default, compact table)
COMPACT = ("KIND", "TARGET", "GAIN", "CONF", "CHANGE")
#: the columns that give up width when a line is too long, with their share of what is left
#: (a name whole matters more: a change cut short is written whole under its row)
SHARES: Mapping[str, int] = {"TARGET": 4, "CHANGE": 1}
#: a change column narrower than this says nothing: it is left out, each change written below
MIN_CHANGE = 16
#: the narrowest a sharing column becomes
MIN_SHARE = 8
#: the space between columns
GAP = "  "
#: the indent of the lines under a recommendation's row
INDENT = "    "


def fit_widths(
    natural: Sequence[int], names: Sequence[str], width: int, shares: Mapping[str, int] = SHARES
) -> list[int]:
    """Column widths no wider than ``natural`` whose total (gaps included) fits ``width``
    when it can: the other columns keep their width and the ``shares`` columns share what
    is left by weight, a column that needs less than its share giving the rest to the
    others (none narrower than :data:`MIN_SHARE`).
    """
    widths = list(natural)
    if width <= 0 or sum(widths) + len(GAP) * (len(widths) - 1) <= width:
        return widths
    sharing = [i for i, name in enumerate(names) if name in shares]
    budget = width - len(GAP) * (len(widths) - 1)
    budget -= sum(w for i, w in enumerate(widths) if i not in sharing)
    left = list(sharing)
    while left:
        unit = budget / sum(shares[names[i]] for i in left)
        fits = [i for i in left if natural[i] <= unit * shares[names[i]]]
        if not fits:
            for i in left:
                widths[i] = max(MIN_SHARE, int(unit * shares[names[i]]))
            break
        for i in fits:
            budget -= natural[i]
            left.remove(i)
    return widths


def aligned(names: Sequence[str], row: Sequence[str], widths: Sequence[int]) -> str:
    """One line of ``row`` in columns of ``widths`` (numbers right-aligned), no trailing space."""
    parts = [
        cell.rjust(w) if name in NUMERIC else cell.ljust(w)
        for name, cell, w in zip(names, row, widths, strict=True)
    ]
    return GAP.join(parts).rstrip()


def _wide(recs: Sequence[Recommendation]) -> list[str]:
    rows = [[visible(cells(rec)[c]) for c in COLUMNS] for rec in recs]
    widths = [max(len(n), *(len(r[i]) for r in rows)) for i, n in enumerate(COLUMNS)]
    return [aligned(COLUMNS, row, widths) for row in [list(COLUMNS), *rows]]


def _compact_row(rec: Recommendation) -> list[str]:
    row = {**cells(rec), "CHANGE": change_text(rec, brief=True)}
    return [visible(row[c]) for c in COMPACT]


def _compact(recs: Sequence[Recommendation], width: int) -> list[str]:
    rows = [_compact_row(rec) for rec in recs]
    natural = [max(len(n), *(len(r[i]) for r in rows)) for i, n in enumerate(COMPACT)]
    widths = fit_widths(natural, COMPACT, width)
    names = list(COMPACT)
    if widths[-1] < min(MIN_CHANGE, natural[-1]):
        names, rows = names[:-1], [row[:-1] for row in rows]
        widths = fit_widths(natural[:-1], names, width)
    lines = [aligned(names, names, widths)]
    for rec, row in zip(recs, rows, strict=True):
        shown = [
            shorten(cell, w, middle=name == "TARGET")
            for name, cell, w in zip(names, row, widths, strict=True)
        ]
        lines.append(aligned(names, shown, widths))
        about = f"{rec.id} ({rec.severity}, {rec.risk} risk): {rec.summary}"
        lines += wrap(visible(about), width, INDENT)
        for name, cell, cut in zip(names, row, shown, strict=True):
            if cut != cell:
                lines += wrap(f"{name.lower()}: {cell}", width, INDENT)
        if "CHANGE" not in names:
            lines += wrap("change: " + visible(change_text(rec, brief=True)), width, INDENT)
    return lines


def table(report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
    """The recommendations by gain (highest first), then the notes: compact and fitted to
    ``options.width`` (0: no limit), or one unwrapped line each with ``options.wide``.
    """
    width = 0 if options.wide else options.width
    lines = wrap(visible(header(report)), width)
    recs = report.by_gain()
    lines.append("")
    if not recs:
        lines.append("nothing to do")
    elif options.wide:
        lines += _wide(recs)
    else:
        lines += _compact(recs, width)
    if report.notes:
        lines += ["", "notes:"]
        for n in report.notes:
            lines += wrap(visible(f"[{n.policy}] {n.target}: {n.reason}"), width, "  ")
    return "\n".join(lines) + "\n"
