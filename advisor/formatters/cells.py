"""What the human-readable formats share: the header line, the cells of a recommendation
and its actions written with compact CPU lists (``0-31,64-95``, never a 64-element array).
"""

from __future__ import annotations

from collections.abc import Sequence

from toposcope.cpulist import format_cpulist
from toposcope.report.recommendation import Recommendation, Report
from toposcope.rm import ActionRequest

#: the columns of the table and Markdown formats, in order
COLUMNS = ("ID", "KIND", "TARGET", "GAIN", "SEVERITY", "RISK", "CONF", "SUMMARY", "CHANGE")
#: the columns whose numbers are right-aligned
NUMERIC = frozenset({"GAIN", "CONF"})


def header(report: Report) -> str:
    """One line: how many recommendations, from which source, over which window."""
    count = len(report.recommendations)
    return (
        f"toposcope advise: {count} recommendation(s) from {report.run.source} over "
        f"{report.run.window} (min gain {report.run.min_gain:g})"
    )


def indexes(values: Sequence[int]) -> str:
    """CPU, NUMA node or GPU numbers as a compact list (``0-7,16``), ``-`` when none."""
    return format_cpulist(values) or "-"


def action_text(action: ActionRequest) -> str:
    """One action in a line: its kind, then only the fields it uses, lists compacted."""
    parts = [str(action.kind)]
    if action.node:
        parts.append(f"node={action.node}")
    for name, values in (("cpus", action.cpus), ("mems", action.mems), ("gpus", action.gpus)):
        if values:
            parts.append(f"{name}={indexes(values)}")
    return " ".join(parts)


def change_text(rec: Recommendation) -> str:
    """The actions of ``rec`` joined by ``"; "``, or ``-`` for advice without actions."""
    return "; ".join(action_text(a) for a in rec.actions) or "-"


def cells(rec: Recommendation) -> dict[str, str]:
    """The cells of ``rec`` under :data:`COLUMNS`."""
    return {
        "ID": rec.id,
        "KIND": str(rec.kind),
        "TARGET": rec.target.label(),
        "GAIN": f"{rec.estimated_gain:.1%}",
        "SEVERITY": str(rec.severity),
        "RISK": str(rec.risk),
        "CONF": f"{rec.confidence:.2f}",
        "SUMMARY": rec.summary,
        "CHANGE": change_text(rec),
    }
