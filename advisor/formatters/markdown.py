"""The Markdown formatter: a document for a pull request, a wiki or a ticket."""

from __future__ import annotations

from toposcope.advisor.formatters import DEFAULT_OPTIONS, FormatOptions, formatter
from toposcope.advisor.formatters.cells import COLUMNS, NUMERIC, cells
from toposcope.recommendation import Report


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


@formatter("markdown")
def as_markdown(report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
    """Run metadata, a table by gain (actions with compact CPU lists), gain models, notes."""
    run = report.run
    lines = [
        "# toposcope advisor report",
        "",
        f"- source: `{run.source}`",
        f"- window: {run.window}, started {run.started_at}",
        f"- policies: {', '.join(run.policies)}",
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
        lines += ["", "## Gain models", ""]
        lines += [f"- `{r.id}`: {_md(r.gain_model)}" for r in recs]
    else:
        lines.append("Nothing to do.")
    if report.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- **{n.policy}** `{_md(n.target)}`: {_md(n.reason)}" for n in report.notes]
    return "\n".join(lines) + "\n"
