"""The HTML formatter: one self-contained file with a table and a bar chart of the gains.

The chart is plotly's, rendered with ``include_plotlyjs=True`` so the library is inlined and
the file opens without network access. Every text is escaped (:func:`~.escaping.html_text`:
control characters shown as escapes, then HTML-escaped), the chart's hover texts too (plotly
reads tags in them).
"""

from __future__ import annotations

import plotly.graph_objects as go

from toposcope.advisor.formatters.cells import action_text, header
from toposcope.advisor.formatters.escaping import html_text, visible
from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions
from toposcope.report.recommendation import Report

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; }
.critical { background: #fdd; } .warning { background: #ffe9c6; } .info { background: #eef6ff; }
code { font-size: 0.9em; }
"""


def _chart(report: Report) -> str:
    recs = report.by_gain()
    if not recs:
        return ""
    figure = go.Figure()
    for kind in sorted({str(r.kind) for r in recs}):
        chosen = [r for r in recs if r.kind == kind]
        figure.add_trace(
            go.Bar(
                name=kind,
                x=[visible(r.id) for r in chosen],
                y=[round(r.estimated_gain * 100, 2) for r in chosen],
                hovertext=[html_text(r.summary) for r in chosen],
            )
        )
    figure.update_layout(
        title="Estimated gain by recommendation",
        yaxis_title="estimated gain (%)",
        xaxis={"categoryorder": "array", "categoryarray": [visible(r.id) for r in recs]},
        height=420,
    )
    text: str = figure.to_html(full_html=False, include_plotlyjs=True)
    return text


def as_html(report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
    """A standalone HTML page: metadata, plotly bar chart, table by gain (actions with
    compact CPU lists), notes.
    """
    esc = html_text
    run = report.run
    rows = []
    for r in report.by_gain():
        actions = "<br>".join(esc(f"{a.workload}: {action_text(a)}") for a in r.actions)
        rows.append(
            f'<tr class="{esc(str(r.severity))}"><td><code>{esc(r.id)}</code></td>'
            f"<td>{esc(str(r.kind))}</td><td>{esc(r.target.label())}</td>"
            f'<td class="num">{r.estimated_gain:.1%}</td><td>{esc(str(r.severity))}</td>'
            f'<td>{esc(str(r.risk))}</td><td class="num">{r.confidence:.2f}</td>'
            f"<td>{esc(r.summary)}<br><small>{esc(r.gain_model)}</small></td>"
            f"<td><small>{actions or '-'}</small></td></tr>"
        )
    table = (
        "<table><tr><th>id</th><th>kind</th><th>target</th><th>gain</th><th>severity</th>"
        "<th>risk</th><th>confidence</th><th>summary and gain model</th><th>actions</th></tr>"
        + "".join(rows)
        + "</table>"
        if rows
        else "<p>Nothing to do.</p>"
    )
    notes = "".join(
        f"<li><b>{esc(n.policy)}</b> <code>{esc(n.target)}</code>: {esc(n.reason)}</li>"
        for n in report.notes
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        "<title>toposcope advisor report</title>"
        f"<style>{_STYLE}</style></head><body>"
        "<h1>toposcope advisor report</h1>"
        f"<p>{esc(header(report))}<br>started {esc(run.started_at)}; policies "
        f"{esc(', '.join(run.policies))}</p>"
        f"{_chart(report)}{table}"
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
        + "</body></html>\n"
    )
