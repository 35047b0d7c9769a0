"""The closed loop's figures as text (``bench/closed_loop.py`` without ``--json``): for each
way of measuring progress, the summary, the calibration against the truth (overall, by round
and after the learning rounds), the factors each round ran with, and every applied action.
"""

from __future__ import annotations

from typing import Any


def print_table(result: dict[str, Any]) -> None:
    """Human-readable figures: the headline's, then each other way of measuring progress."""
    print(
        f"closed loop, window {result['window_seconds']}s, perturb {result['perturb']:g}, "
        f"horizon {result['horizon_seconds']:g}s"
    )
    for mode, figures in result["side_by_side"].items():
        print(f"== progress measured by: {mode}")
        print_figures(figures, result["learn"])


def print_figures(figures: dict[str, Any], learn: bool) -> None:
    """One way of measuring progress: summary, calibration, calibration by round, actions."""
    print(
        f"{'scenario':20} {'runs':>4} {'worst':>6} {'mean':>6} {'/bound':>6} {'harm':>5} "
        f"{'collat':>6} {'useless':>7} {'applied':>7}  target"
    )
    for s in figures["summary"]:
        if "skipped" in s:
            print(f"{s['name']:20} skipped: {s['skipped']}")
            continue
        print(
            f"{s['name']:20} {s['runs']:4d} {s['worst_ratio']:6.3f} {s['mean_ratio']:6.3f} "
            f"{s['mean_ratio_to_bound']:6.3f} {s['harmful_actions']:5d} "
            f"{s['collateral_harm']:6d} {s['useless_actions']:7d} {s['applied_actions']:7d}  "
            + ("met" if s["met"] else "MISSED")
        )

    def median(c: dict[str, Any]) -> str:
        found = c["median_relative_error"]
        return "n/a" if found is None else f"{found:.2f} ({c['gaining_actions']})"

    print("calibration (estimated vs true gain of applied actions):")
    for c in figures["calibration"]:
        print(
            f"  {c['kind']:16} {c['actions']:4d} actions  MAE {c['mean_abs_error']:.3f}  "
            f"mean true {c['mean_true_gain']:.3f}  relative {c['relative_error']:.2f}  "
            f"median |est-true|/true {median(c)}  " + ("met" if c["met"] else "MISSED")
        )
    print(
        "calibration by round (learning "
        + ("on: each round calibrated from the verdicts before it" if learn else "off")
        + "):"
    )
    for c in figures["calibration_by_round"]:
        verdicts = ", ".join(f"{k} {n}" for k, n in c["verdicts"].items())
        print(
            f"  r{c['round']} {c['kind']:16} {c['actions']:4d} actions  "
            f"MAE {c['mean_abs_error']:.3f}  median {median(c)}"
            + (f"  verdicts: {verdicts}" if learn else "")
        )
    for c in figures.get("calibration_by_seed", ()):
        print(
            f"  seed {c['run']} ({c['learned_rounds']} rounds learned before it) "
            f"{c['kind']:16} {c['actions']:4d} actions  median {median(c)}"
        )
    for c in figures["calibration_after"]:
        judged = ("met" if c["met"] else "MISSED") if c["judged"] else "too few to judge"
        print(
            f"  after round {c['after_round']}: {c['kind']:16} {c['actions']:4d} actions  "
            f"median {median(c)}  {judged}"
        )
    target = figures.get("calibration_target")
    if target:
        print(f"calibration target ({target['target']}):")
        for kind, t in target["kinds"].items():
            status = "MISSED" if t["status"] == "missed" else t["status"]
            print(f"  {kind:16} {status}: {t['why']}")
    for s in figures["scenarios"]:
        for r in s.get("rounds", []):
            learned = ", ".join(
                f"{k} x{f['factor']:.2f} ({f['outcomes']})"
                for k, f in r.get("calibration_in_effect", {}).items()
            )
            if learned:
                print(f"  {s['name']:16} #{s['run']} r{r['round']} calibrated by {learned}")
        for a in s.get("actions", []):
            actual = "n/a" if a["actual_gain"] is None else f"{a['actual_gain']:.1%}"
            flags = ("  HARMFUL" if a["harmful"] else "") + ("  useless" if a["useless"] else "")
            print(
                f"  {s['name']:16} #{s['run']} r{a['round']} {a['kind']:15} {a['target']:40} "
                f"est {a['estimated_gain']:7.1%} actual {actual:>7}{flags}"
                + (f"  verdict {a['verdict']}" if "verdict" in a else "")
            )
