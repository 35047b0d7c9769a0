"""The closed loop's calibration figures and its ways of measuring progress, from hand-made
actions (no cluster, no Prometheus).
"""

from __future__ import annotations

import argparse
from typing import Any

import closed_loop_args
import loop_calibration
import loop_seeds
import pytest
from closed_loop_text import print_table
from loop_learning import STEP_COUNTER, step_counter_metric

from tests.bench.judged_actions import judged_action


def test_the_median_error_is_relative_to_the_true_gain_of_gaining_actions() -> None:
    actions = [
        judged_action("pin", 1, 0.10, 0.20),  # 50 % off
        judged_action("pin", 1, 0.30, 0.20),  # 50 % off
        judged_action("pin", 1, 0.19, 0.20),  # 5 % off
        judged_action("pin", 1, 0.10, 0.0),  # no true gain: no relative error
        judged_action("pin", 1, 0.10, None),  # finished: not judged
    ]
    found = loop_calibration.median_error(actions)
    assert found == {"median_relative_error": 0.5, "gaining_actions": 3}
    [row] = loop_calibration.calibration_rows(actions)
    assert row["actions"] == 4 and row["median_relative_error"] == 0.5


def test_a_kind_is_judged_after_the_learning_rounds_with_enough_actions() -> None:
    early = [judged_action("pin", 1, 0.1, 0.5)] * 10  # before learning: not judged here
    good = [judged_action("migrate-job", 4, 0.9, 1.0)] * loop_calibration.MIN_ACTIONS
    few = [judged_action("pin", 5, 0.1, 1.0)] * (loop_calibration.MIN_ACTIONS - 1)
    runs = [{"actions": early + good + few}]
    rows = {
        r["kind"]: r
        for r in loop_calibration.calibration_after(runs, loop_calibration.LEARNED_AFTER)
    }
    assert rows["migrate-job"]["judged"] and rows["migrate-job"]["met"]
    assert rows["migrate-job"]["median_relative_error"] == pytest.approx(0.1)
    assert not rows["pin"]["judged"] and rows["pin"]["actions"] == loop_calibration.MIN_ACTIONS - 1
    bad = [{"actions": [judged_action("pin", 4, 0.1, 1.0)] * loop_calibration.MIN_ACTIONS}]
    [row] = loop_calibration.calibration_after(bad, loop_calibration.LEARNED_AFTER)
    assert row["judged"] and not row["met"]


def test_both_ways_of_measuring_progress_run_only_when_the_loop_learns() -> None:
    args = argparse.Namespace(learn=True, progress="both")
    assert closed_loop_args.progress_modes(args) == ["counter", "proxies"]
    args.progress = "proxies"
    assert closed_loop_args.progress_modes(args) == ["proxies"]
    args.learn, args.progress = False, "both"
    assert closed_loop_args.progress_modes(args) == ["proxies"]


def test_the_step_counter_setting_escapes_the_workload_name() -> None:
    [setting] = step_counter_metric(15)
    assert setting.matches("train.service")
    promql = setting.promql('x"} or vector(1) or y{a="')
    assert promql == (
        f'sum(rate({STEP_COUNTER}{{workload="x\\"}} or vector(1) or y{{a=\\""}}[15s]))'
    )


def test_the_text_shows_each_way_of_measuring_progress_side_by_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def figures(ratio: float) -> dict[str, Any]:
        summary = {
            "name": "demo",
            "runs": 1,
            "worst_ratio": ratio,
            "mean_ratio": ratio,
            "mean_ratio_to_bound": ratio,
            "harmful_actions": 0,
            "collateral_harm": 0,
            "useless_actions": 0,
            "applied_actions": 2,
            "met": ratio >= loop_seeds.TARGET_RATIO,
        }
        late = [judged_action("pin", 4, 0.1, 0.2)] * loop_calibration.MIN_ACTIONS
        return {
            "summary": [summary],
            "calibration": loop_calibration.calibration_rows(late),
            "calibration_by_round": [],
            "calibration_after": loop_calibration.calibration_after([{"actions": late}], 3),
            "scenarios": [],
        }

    result = {
        "window_seconds": 15,
        "perturb": 0.0,
        "horizon_seconds": 3600.0,
        "learn": True,
        "side_by_side": {"counter": figures(0.95), "proxies": figures(0.8)},
    }
    print_table(result)
    text = capsys.readouterr().out
    counter, proxies = text.split("== progress measured by: proxies")
    assert "== progress measured by: counter" in counter and "0.950" in counter
    assert "0.800" in proxies and "MISSED" in proxies
    assert "after round 3: pin" in proxies and "median 0.50 (5)  MISSED" in proxies
