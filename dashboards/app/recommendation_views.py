"""The recommendations page's filled-in parts, built without I/O: each recommendation's state
from the audit log, the table rows, the evidence panel and the audit table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from dash import html

from toposcope.dashboards.app.advisorclient import AuditRow
from toposcope.dashboards.app.components import (
    banner,
    simple_table,
)
from toposcope.report.recommendation import Recommendation

#: table statuses under which something can be reverted
REVERTIBLE = frozenset({"applied", "in progress"})
AUDIT_ROWS = 50


def status_of(rows: Sequence[AuditRow]) -> str:
    """A recommendation's state from its audit rows (the advisor's own rules).

    ``open`` (never acted on), ``applied`` (an action succeeded and is not reverted),
    ``reverted``, ``in progress`` (the resource manager still runs an action; the advisor
    settles it on its next apply or revert), ``failed`` or ``unknown``.
    """
    forward = [r for r in rows if not r.reverts]
    if not forward:
        return "open"
    if any(r.result == "succeeded" and not r.reverted_by for r in forward):
        return "applied"
    if any(r.reverted_by for r in forward):
        return "reverted"
    if any(r.result in (None, "running") for r in forward):
        return "in progress"
    last = max(forward, key=lambda r: r.seq)
    return "failed" if last.result == "failed" else last.result or "unknown"


def table_rows(
    recs: Sequence[Recommendation],
    audit: Sequence[AuditRow],
    verdicts: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The recommendations table: the latest report, plus audited ones no longer in it;
    ``verdicts`` (by recommendation id) fills the verdict of the applied ones.
    """
    verdicts = verdicts or {}
    by_rec: dict[str, list[AuditRow]] = {}
    for row in audit:
        by_rec.setdefault(row.recommendation_id, []).append(row)
    rows: list[dict[str, Any]] = [
        {
            "id": r.id,
            "status": status_of(by_rec.get(r.id, ())),
            "verdict": verdicts.get(r.id, ""),
            "gain": r.estimated_gain,
            "kind": str(r.kind),
            "severity": str(r.severity),
            "target": r.target.label(),
            "summary": r.summary,
            "confidence": r.confidence,
            "risk": str(r.risk),
        }
        for r in recs
    ]
    listed = {r.id for r in recs}
    for rec_id, actions in sorted(by_rec.items()):
        if rec_id in listed:
            continue
        first = min(actions, key=lambda a: a.seq)
        rows.append(
            {
                "id": rec_id,
                "status": status_of(actions),
                "verdict": verdicts.get(rec_id, ""),
                "gain": None,
                "kind": first.kind,
                "severity": "",
                "target": f"{first.node}/{first.workload}" if first.node else first.workload,
                "summary": "no longer in the latest report",
                "confidence": None,
                "risk": "",
            }
        )
    return rows


def evidence(rec: Recommendation) -> html.Div:
    """The evidence, gain model and proposed change of one recommendation."""
    items = [
        html.Tr(
            [
                html.Td(e.series),
                html.Td(", ".join(f"{k}={v}" for k, v in sorted(e.labels.items()))),
                html.Td(f"{e.value:.4g}"),
            ]
        )
        for e in rec.evidence
    ]
    return html.Div(
        [
            html.P(html.B(rec.summary)),
            html.P(f"estimated gain {rec.estimated_gain:.1%} ({rec.gain_model})"),
            html.P(f"confidence {rec.confidence:.0%}, risk {rec.risk}, policy {rec.policy}"),
            html.P(f"current {dict(rec.current)}; proposed {dict(rec.proposed)}"),
            html.Table(
                [
                    html.Thead(html.Tr([html.Th("series"), html.Th("labels"), html.Th("value")])),
                    html.Tbody(items),
                ],
                className="simple",
            )
            if items
            else banner("no evidence series recorded", "info"),
        ]
    )


def audit_table(rows: Sequence[AuditRow]) -> Any:
    """The audit log, newest first."""
    if not rows:
        return banner("nothing has been applied yet", "info")
    newest = sorted(rows, key=lambda r: r.seq, reverse=True)[:AUDIT_ROWS]
    frame = pd.DataFrame(
        [
            {
                "seq": r.seq,
                "when": r.result_at or r.intent_at,
                "recommendation": r.recommendation_id,
                "action": "revert" if r.reverts else r.kind,
                "target": f"{r.node}/{r.workload}" if r.node else r.workload,
                "result": r.result or "pending",
                "by": r.actor,
                "error": r.error,
            }
            for r in newest
        ]
    )
    return simple_table(frame)
