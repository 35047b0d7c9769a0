"""The Markdown formatter: a document for a pull request, a wiki or a ticket.

Every text that is not the formatter's own goes through :func:`~.escaping.markdown_text`:
a name from metrics renders as the literal text it is, never as HTML, a link, emphasis or
an extra table cell. The report holds no links. Under the table, each recommendation's gain
model and evidence (the series and values that triggered it) follow, so that a reviewer can
check the advice without re-running it.
"""

from __future__ import annotations

from toposcope.advisor.formatters.cells import COLUMNS, NUMERIC, cells, evidence_text
from toposcope.advisor.formatters.escaping import markdown_text as _md
from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions
from toposcope.report.recommendation import Recommendation, Report


def _details(rec: Recommendation) -> list[str]:
    """A recommendation's section: its gain model, then its evidence, one value a line."""
    lines = ["", f"### {_md(rec.id)}", "", f"- gain model: {_md(rec.gain_model)}"]
    if rec.evidence:
        lines.append("- evidence:")
        lines += [f"  - {_md(evidence_text(e))}" for e in rec.evidence]
    else:
        lines.append("- evidence: none recorded")
    return lines


def as_markdown(report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
    """Run metadata, a table by gain (actions with compact CPU lists), each recommendation's
    gain model and evidence, notes.
    """
    run = report.run
    lines = [
        "# toposcope advisor report",
        "",
        f"- source: {_md(run.source)}",
        f"- window: {_md(run.window)}, started {_md(run.started_at)}",
        f"- policies: {_md(', '.join(run.policies))}",
        f"- minimum gain: {run.min_gain:g}",
        "",
    ]
    recs = report.by_gain()
    if recs:
        lines += [
            "| " + " | ".join(c.lower() for c in COLUMNS) + " |",
            "|" + "|".join("---:" if c in NUMERIC else "---" for c in COLUMNS) + "|",
        ]
        for rec in recs:
            row = cells(rec)
            lines.append("| " + " | ".join(_md(row[c]) for c in COLUMNS) + " |")
        lines += ["", "## Gain models and evidence"]
        for rec in recs:
            lines += _details(rec)
    else:
        lines.append("Nothing to do.")
    if report.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- **{_md(n.policy)}** {_md(n.target)}: {_md(n.reason)}" for n in report.notes]
    return "\n".join(lines) + "\n"
