"""The closed loop's calibration target, stated and judged per kind.

The target: after the first ``after_round`` rounds of learning (three), the median of
``|estimated - true| / true`` over a kind's applied actions is at most ``limit`` (25 %) for
each kind that applied at least ``min_actions`` actions (five) in the later rounds. The
figures are the closed loop's ``calibration_after`` rows (one per kind with a judged action
after those rounds); this module only names the target and says, for every kind the loop
applied at all, whether it was ``met``, ``missed`` or ``not judged`` (too few actions after
the learning rounds), and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

#: a kind's standing against the target
MET, MISSED, NOT_JUDGED = "met", "missed", "not judged"


def target_text(after_round: int, min_actions: int, limit: float) -> str:
    """The target in words, from its numbers."""
    return (
        f"after {after_round} rounds, median |estimated - true| / true per kind with at "
        f"least {min_actions} applied actions <= {limit * 100:g} %"
    )


def _judged(
    row: Mapping[str, Any] | None, after_round: int, min_actions: int, limit: float
) -> dict[str, Any]:
    """One kind's entry: its figures after the learning rounds, status and reason."""
    actions = int(row["actions"]) if row else 0
    gaining = int(row["gaining_actions"]) if row else 0
    median = row["median_relative_error"] if row else None
    if actions < min_actions:
        status = NOT_JUDGED
        why = (
            f"{actions} action(s) with a true gain after round {after_round}, "
            f"fewer than {min_actions}"
        )
    elif median is None:
        status, why = MISSED, "no action with a true gain above zero to measure the error on"
    elif median <= limit:
        status, why = MET, f"median {median:.3f} <= {limit:g}"
    else:
        status, why = MISSED, f"median {median:.3f} > {limit:g}"
    return {
        "status": status,
        "actions_after_round": actions,
        "gaining_actions": gaining,
        "median_relative_error": median,
        "why": why,
    }


def calibration_target(
    runs: Iterable[Mapping[str, Any]],
    after: Iterable[Mapping[str, Any]],
    *,
    after_round: int,
    min_actions: int,
    limit: float,
) -> dict[str, Any]:
    """The target (:func:`target_text` and its numbers) and, for every kind that the
    ``runs`` applied, the actions it applied in all rounds and its entry (:func:`_judged`)
    from the ``calibration_after`` rows ``after``; ``met`` is whether every judged kind met
    it (``None`` when none could be judged).
    """
    rows = {str(r["kind"]): r for r in after}
    applied = Counter(str(a["kind"]) for r in runs for a in r.get("actions", ()))
    kinds = {
        kind: {
            "actions_applied": applied[kind],
            **_judged(rows.get(kind), after_round, min_actions, limit),
        }
        for kind in sorted(set(applied) | set(rows))
    }
    judged = [k["status"] for k in kinds.values() if k["status"] != NOT_JUDGED]
    return {
        "target": target_text(after_round, min_actions, limit),
        "after_round": after_round,
        "min_actions": min_actions,
        "max_median_relative_error": limit,
        "kinds": kinds,
        "met": all(s == MET for s in judged) if judged else None,
    }
