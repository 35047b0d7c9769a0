"""The CSV formatter: one row per recommendation, for spreadsheets and scripts.

Text cells go through :func:`~.escaping.csv_cell` (a leading ``=``, ``+``, ``-``, ``@``, tab
or carriage return gets a ``'``, control characters are shown as escapes) so that a name
taken from metrics cannot become a spreadsheet formula; the numbers the formatter writes
itself (``gpus``, ``estimated_gain``, ``confidence``) are left as they are.
"""

from __future__ import annotations

import csv
import io
import json

from toposcope.advisor.formatters.cells import change_text
from toposcope.advisor.formatters.escaping import csv_cell
from toposcope.advisor.formatters.options import DEFAULT_OPTIONS, FormatOptions
from toposcope.report.recommendation import Report, action_to_dict

HEADER = (
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
    "change",
    "actions",
)


def as_csv(report: Report, options: FormatOptions = DEFAULT_OPTIONS) -> str:
    """One row per recommendation (by gain): ``change`` is the actions in words with compact
    CPU lists, ``actions`` the same as compact JSON (the resource-manager request bodies).
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    for rec in report.by_gain():
        actions = json.dumps(
            [action_to_dict(a) for a in rec.actions], sort_keys=True, separators=(",", ":")
        )
        text = [rec.id, rec.kind, rec.policy, rec.target.node, rec.target.workload or ""]
        numbers = [
            " ".join(str(g) for g in rec.target.gpus),
            f"{rec.estimated_gain:.6f}",
            f"{rec.confidence:.3f}",
        ]
        more = [rec.risk, rec.severity, rec.summary, rec.gain_model, change_text(rec), actions]
        writer.writerow(
            [*(csv_cell(str(t)) for t in text), *numbers, *(csv_cell(str(t)) for t in more)]
        )
    return out.getvalue()
