"""The HTML formatter: one self-contained file with a bar chart of the gains, a table and
each recommendation's evidence.

By default the page holds no script at all: the chart is bars drawn in CSS, the evidence is
in ``<details>`` elements, and a report of a few dozen recommendations weighs tens of
kilobytes. It opens offline, in an air-gapped site and under a strict Content-Security-Policy,
and fetches nothing when opened (a report that loads a CDN script tells a third party who
reads it, and depends on it being reachable). With :attr:`FormatOptions.standalone`
(``--html-standalone``) the chart is plotly's, interactive, with the plotly.js bundled in the
``plotly`` package inlined (``include_plotlyjs=True``, about 4.8 MB): still no network
access. Every text is escaped (:func:`~.escaping.html_text`: control characters shown as
escapes, then HTML-escaped), the plotly chart's hover texts too (plotly reads tags in them).
"""

from __future__ import annotations

import plotly.graph_objects as go

from toposcope.advisor.formatters.cells import action_lines, evidence_text, header
from toposcope.advisor.formatters.escaping import html_text, visible
from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions
from toposcope.report.recommendation import Recommendation, Report

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; }
.critical { background: #fdd; } .warning { background: #ffe9c6; } .info { background: #eef6ff; }
code { font-size: 0.9em; }
.bars { display: grid; grid-template-columns: max-content 1fr max-content; gap: 0.2em 0.6em;
        align-items: center; margin: 1em 0 2em; font-size: 0.9em; }
.bar { background: #4c78a8; height: 1em; }
details summary { cursor: pointer; }
"""


def _bars(report: Report) -> str:
    """The gains as CSS bars, scaled to the largest one: a chart that needs no script."""
    recs = report.by_gain()
    top = max((r.estimated_gain for r in recs), default=0.0)
    if top <= 0:
        return ""
    rows = "".join(
        f"<code>{html_text(r.id)}</code>"
        f'<div><div class="bar" style="width:{max(r.estimated_gain, 0.0) / top:.1%}"></div></div>'
        f"<span>{r.estimated_gain:.1%}</span>"
        for r in recs
    )
    return f'<h2>Estimated gain by recommendation</h2><div class="bars">{rows}</div>'


def _evidence(rec: Recommendation) -> str:
    """The series and values behind ``rec``, folded: a count, open to the list."""
    if not rec.evidence:
        return "-"
    items = "".join(f"<li><code>{html_text(evidence_text(e))}</code></li>" for e in rec.evidence)
    return f"<details><summary>{len(rec.evidence)} value(s)</summary><ul>{items}</ul></details>"


def _plotly_chart(report: Report) -> str:
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
    """A standalone HTML page: metadata, a bar chart of the gains (CSS, or plotly's with
    ``options.standalone``), a table by gain (actions with compact CPU lists, evidence), notes.
    """
    esc = html_text
    run = report.run
    rows = []
    for r in report.by_gain():
        actions = "<br>".join(esc(line) for line in action_lines(r))
        rows.append(
            f'<tr class="{esc(str(r.severity))}"><td><code>{esc(r.id)}</code></td>'
            f"<td>{esc(str(r.kind))}</td><td>{esc(r.target.label())}</td>"
            f'<td class="num">{r.estimated_gain:.1%}</td><td>{esc(str(r.severity))}</td>'
            f'<td>{esc(str(r.risk))}</td><td class="num">{r.confidence:.2f}</td>'
            f"<td>{esc(r.summary)}<br><small>{esc(r.gain_model)}</small></td>"
            f"<td><small>{actions or '-'}</small></td><td><small>{_evidence(r)}</small></td></tr>"
        )
    table = (
        "<table><tr><th>id</th><th>kind</th><th>target</th><th>gain</th><th>severity</th>"
        "<th>risk</th><th>confidence</th><th>summary and gain model</th><th>actions</th>"
        "<th>evidence</th></tr>" + "".join(rows) + "</table>"
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
        f"{_plotly_chart(report) if options.standalone else _bars(report)}{table}"
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
        + "</body></html>\n"
    )
