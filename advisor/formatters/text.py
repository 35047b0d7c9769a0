"""Text formatters: an aligned table for terminals, JSON, CSV and Markdown."""

from __future__ import annotations

import csv
import io
import json

from toposcope.advisor.formatters import formatter
from toposcope.recommendation import Recommendation, Report

COLUMNS = ("ID", "KIND", "TARGET", "GAIN", "SEVERITY", "RISK", "CONF", "SUMMARY")


def _row(rec: Recommendation) -> tuple[str, ...]:
    return (
        rec.id,
        str(rec.kind),
        rec.target.label(),
        f"{rec.estimated_gain:.1%}",
        str(rec.severity),
        str(rec.risk),
        f"{rec.confidence:.2f}",
        rec.summary,
    )


def header(report: Report) -> str:
    """One line: how many recommendations, from which source, over which window."""
    count = len(report.recommendations)
    return (
        f"toposcope advise: {count} recommendation(s) from {report.run.source} over "
        f"{report.run.window} (min gain {report.run.min_gain:g})"
    )


@formatter("table")
def table(report: Report) -> str:
    """Aligned columns sorted by gain (highest first), then the notes."""
    lines = [header(report)]
    rows = [_row(r) for r in report.by_gain()]
    if rows:
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
        lines.append("")
        lines.append("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip())
        for row in rows:
            cells = [
                cell.rjust(w) if i in (3, 6) else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ]
            lines.append("  ".join(cells).rstrip())
    else:
        lines.append("nothing to do")
    if report.notes:
        lines.append("")
        lines.append("notes:")
        lines.extend(f"  [{n.policy}] {n.target}: {n.reason}" for n in report.notes)
    return "\n".join(lines) + "\n"


@formatter("json")
def as_json(report: Report) -> str:
    """The whole report as JSON (sorted keys, with its ``schema_version``), the form
    :func:`toposcope.recommendation_decoder.report_from_json` reads back.
    """
    return report.to_json() + "\n"


@formatter("csv")
def as_csv(report: Report) -> str:
    """One row per recommendation (by gain); actions as compact JSON in the last column."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "id",
            "kind",
            "policy",
            "node",
            "workload",
            "gpus",
            "estimated_gain",
            "confidence",
            "risk",
            "severity",
            "summary",
            "gain_model",
            "actions",
        ]
    )
    for rec in report.by_gain():
        data = rec.to_dict()
        writer.writerow(
            [
                rec.id,
                rec.kind,
                rec.policy,
                rec.target.node,
                rec.target.workload or "",
                " ".join(str(g) for g in rec.target.gpus),
                f"{rec.estimated_gain:.6f}",
                f"{rec.confidence:.3f}",
                rec.risk,
                rec.severity,
                rec.summary,
                rec.gain_model,
                json.dumps(data["actions"], sort_keys=True, separators=(",", ":")),
            ]
        )
    return out.getvalue()


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


@formatter("markdown")
def as_markdown(report: Report) -> str:
    """A Markdown document: run metadata, a table by gain, gain models and notes."""
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
            "| id | kind | target | gain | severity | risk | confidence | summary |",
            "|---|---|---|---:|---|---|---:|---|",
        ]
        lines += [
            "| " + " | ".join(_md(c) for c in _row(r)[:3]) + f" | {r.estimated_gain:.1%} | "
            f"{r.severity} | {r.risk} | {r.confidence:.2f} | {_md(r.summary)} |"
            for r in recs
        ]
        lines += ["", "## Gain models", ""]
        lines += [f"- `{r.id}`: {_md(r.gain_model)}" for r in recs]
    else:
        lines.append("Nothing to do.")
    if report.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- **{n.policy}** `{_md(n.target)}`: {_md(n.reason)}" for n in report.notes]
    return "\n".join(lines) + "\n"
