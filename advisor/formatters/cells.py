"""What the human-readable formats share: the header line, the cells of a recommendation,
its actions written with compact CPU lists (``0-31,64-95``, never a 64-element array) and
its evidence as PromQL-like lines (``series{label="value"} = 1.5``).

A move names the workload it moves and where from and to (``migrate job-b n8 gpus=0,4 ->
n9 gpus=0,1``): the recommendation's target for its own workload, the ``defragment`` list of
its proposed state for the jobs moved out of the way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toposcope.cpulist import format_cpulist
from toposcope.report.recommendation import Evidence, Recommendation, Report
from toposcope.rm import ActionKind, ActionRequest

#: the columns of the table and Markdown formats, in order
COLUMNS = ("ID", "KIND", "TARGET", "GAIN", "SEVERITY", "RISK", "CONF", "SUMMARY", "CHANGE")
#: the columns whose numbers are right-aligned
NUMERIC = frozenset({"GAIN", "CONF"})
#: the actions that move a workload, written with its name and destination
_MOVES = frozenset({ActionKind.MIGRATE, ActionKind.PLACE})

#: where a moved workload runs now: its node and GPUs
Origin = tuple[str, Sequence[int]]


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


def _place(node: str | None, gpus: Sequence[int]) -> str:
    return " ".join(p for p in (node or "", f"gpus={indexes(gpus)}" if gpus else "") if p)


def action_text(
    action: ActionRequest, origin: Origin | None = None, here: str = "", named: str = ""
) -> str:
    """One action in a line: its kind, then only the fields it uses, lists compacted.

    A move (migrate, place) names its workload (unless it is ``named``, a workload the
    reader already sees) and its destination after ``->``, with ``origin`` (where the
    workload runs now) before it when known. Another action leaves out its ``node=`` when
    it is ``here`` (a node the reader already sees).
    """
    parts = [str(action.kind)]
    if action.kind in _MOVES:
        parts.append("" if action.workload == named else action.workload)
        if origin is not None:
            parts.append(_place(*origin))
        parts += ["->", _place(action.node, action.gpus)]
    elif action.node and action.node != here:
        parts.append(f"node={action.node}")
    for name, values in (("cpus", action.cpus), ("mems", action.mems)):
        if values:
            parts.append(f"{name}={indexes(values)}")
    if action.gpus and action.kind not in _MOVES:
        parts.append(f"gpus={indexes(action.gpus)}")
    return " ".join(p for p in parts if p)


def _origins(rec: Recommendation) -> dict[str, Origin]:
    """Where each workload a recommendation moves runs now, by name."""
    found: dict[str, Origin] = {}
    moves: Any = rec.proposed.get("defragment")
    for move in moves if isinstance(moves, list | tuple) else ():
        if isinstance(move, Mapping) and isinstance(move.get("workload"), str):
            listed = move.get("from_gpus")
            gpus: Sequence[int] = ()
            if isinstance(listed, list | tuple) and all(isinstance(g, int) for g in listed):
                gpus = listed
            found[move["workload"]] = (str(move.get("from_node", "")), gpus)
    if rec.target.workload and rec.kind != "place":
        found[rec.target.workload] = (rec.target.node, rec.target.gpus)
    return found


def action_lines(rec: Recommendation, *, brief: bool = False) -> list[str]:
    """Each action of ``rec`` as :func:`action_text`, moves with where they start; ``brief``
    leaves out the target's own node and workload names (a table shows them as the target).
    """
    origins = _origins(rec)
    here, named = (rec.target.node, rec.target.workload or "") if brief else ("", "")
    return [
        action_text(
            a, origins.get(a.workload) if a.kind == ActionKind.MIGRATE else None, here, named
        )
        for a in rec.actions
    ]


def change_text(rec: Recommendation, *, brief: bool = False) -> str:
    """The actions of ``rec`` joined by ``"; "``, or ``-`` for advice without actions
    (``brief``: see :func:`action_lines`).
    """
    return "; ".join(action_lines(rec, brief=brief)) or "-"


def number(value: float) -> str:
    """A metric value as a person reads it: whole numbers without a fraction, others to 6
    significant digits (``8589934592``, ``0.9``, ``1.5e-07``).
    """
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def evidence_text(evidence: Evidence) -> str:
    """One evidence value as PromQL shows a sample: ``series{name="value",...} = value``."""
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(evidence.labels.items()))
    return f"{evidence.series}{{{labels}}} = {number(evidence.value)}"


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
