"""The closed loop's calibration tables: estimated against true gain, per kind, round and seed.

Every applied action of a run carries the advisor's estimated gain and, once the judge read
the truth again, its true gain. :func:`calibration_rows` compares them per recommendation
kind (mean absolute error, and :func:`median_error`: the median of ``|estimated - true| /
true`` over the actions that gained); :func:`calibration_table`, :func:`calibration_by_round`
and :func:`calibration_by_seed` do so over every run, per round and per run;
:func:`calibration_after` judges the target over the rounds after the first
:data:`LEARNED_AFTER`, for the kinds that applied at least :data:`MIN_ACTIONS` actions.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from loop_learning import verdict_counts

from toposcope.sim.judge import CALIBRATION_TARGET, calibration

#: rounds of learning before the calibration target is judged (``calibration_after``)
LEARNED_AFTER = 3
#: actions a kind must have applied for its calibration to be judged
MIN_ACTIONS = 5


def calibration_table(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per recommendation kind, estimated against true gain over every applied action."""
    return calibration_rows(a for r in runs for a in r["actions"])


def calibration_by_round(runs: Iterable[dict[str, Any]], learn: bool) -> list[dict[str, Any]]:
    """Per round and kind, estimated against true gain over the round's applied actions in
    every run, with the verdicts the loop measured when it ``learn``-ed (else none).
    """
    actions: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        for action in run["actions"]:
            actions.setdefault(action["round"], []).append(action)
    rows = []
    for number, done in sorted(actions.items()):
        for row in calibration_rows(done):
            mine = [a for a in done if a["kind"] == row["kind"]]
            verdicts = verdict_counts(mine) if learn else {}
            rows.append({"round": number, **row, "verdicts": verdicts})
    return rows


def calibration_by_seed(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run (seed) and kind, estimated against true gain over the run's applied actions,
    with the rounds of outcomes its first round had learned from (more than its own when
    ``--learn-across-seeds`` carried the earlier seeds' outcomes).
    """
    rows = []
    for run in runs:
        first = run["rounds"][0].get("learning_round", 1) if run["rounds"] else 1
        for row in calibration_rows(run["actions"]):
            rows.append(
                {"name": run["name"], "run": run["run"], "learned_rounds": first - 1, **row}
            )
    return rows


def calibration_rows(actions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per recommendation kind, estimated against true gain over ``actions``."""
    done = [a for a in actions if a["actual_gain"] is not None]
    pairs = [(a["kind"], a["estimated_gain"], a["actual_gain"]) for a in done]
    return [
        {
            "kind": c.kind,
            "actions": c.actions,
            "mean_abs_error": round(c.mean_abs_error, 4),
            "mean_true_gain": round(c.mean_true_gain, 4),
            "relative_error": round(c.relative_error, 3),
            **median_error([a for a in done if a["kind"] == c.kind]),
            "met": c.met,
        }
        for c in calibration(pairs)
    ]


def median_error(actions: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The median of ``|estimated - true| / true`` over ``actions`` whose true gain is above
    zero (the estimate before a move's checkpoint cost), and how many that was.
    """
    errors = [
        abs(a.get("estimated_gross_gain", a["estimated_gain"]) - a["actual_gain"])
        / a["actual_gain"]
        for a in actions
        if a["actual_gain"] is not None and a["actual_gain"] > 0
    ]
    median = statistics.median(errors) if errors else None
    return {
        "median_relative_error": None if median is None else round(median, 3),
        "gaining_actions": len(errors),
    }


def calibration_after(runs: Iterable[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Per kind, the calibration of the actions applied after the first ``rounds`` rounds
    (once that many rounds of verdicts were learned from: counted over the earlier seeds'
    rounds too when ``--learn-across-seeds`` carried them, an action's ``learning_round``),
    judged where a kind applied at least :data:`MIN_ACTIONS`: median relative error within
    the target.
    """
    late = [a for r in runs for a in r["actions"] if a.get("learning_round", a["round"]) > rounds]
    rows = []
    for row in calibration_rows(late):
        median = row["median_relative_error"]
        judged = row["actions"] >= MIN_ACTIONS
        met = not judged or (median is not None and median <= CALIBRATION_TARGET)
        rows.append({**row, "after_round": rounds, "judged": judged, "met": met})
    return rows
