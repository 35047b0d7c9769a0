"""The closed loop's calibration target: stated in words from its numbers and judged per
kind (met, missed, not judged) from hand-made actions (no cluster, no Prometheus).
"""

from __future__ import annotations

from typing import Any

import loop_calibration
import pytest
from calibration_target import calibration_target
from closed_loop_text import print_figures

from tests.bench.judged_actions import judged_action
from toposcope.sim.judge import CALIBRATION_TARGET


def _target(actions: list[dict[str, Any]]) -> dict[str, Any]:
    """The target as the closed loop computes it from runs holding ``actions``."""
    runs = [{"actions": actions}]
    return calibration_target(
        runs,
        loop_calibration.calibration_after(runs, loop_calibration.LEARNED_AFTER),
        after_round=loop_calibration.LEARNED_AFTER,
        min_actions=loop_calibration.MIN_ACTIONS,
        limit=CALIBRATION_TARGET,
    )


FIVE = loop_calibration.MIN_ACTIONS
ACTIONS = (
    [judged_action("migrate-job", 4, 0.9, 1.0)] * FIVE  # 10 % off: met
    + [judged_action("pin", 5, 0.1, 1.0)] * FIVE  # 90 % off: missed
    + [judged_action("place", 4, 0.1, 0.1)] * (FIVE - 1)  # too few after round 3
    + [judged_action("release-idle", 1, 0.1, 0.1)] * 10  # all before the learning rounds
)


def test_the_target_is_stated_in_words() -> None:
    found = _target(ACTIONS)
    assert found["target"] == (
        "after 3 rounds, median |estimated - true| / true per kind with at least 5 applied "
        "actions <= 25 %"
    )
    assert (found["after_round"], found["min_actions"]) == (3, 5)
    assert found["max_median_relative_error"] == 0.25


def test_each_kind_the_loop_applied_is_met_missed_or_not_judged() -> None:
    kinds = _target(ACTIONS)["kinds"]
    assert {k: v["status"] for k, v in kinds.items()} == {
        "migrate-job": "met",
        "pin": "missed",
        "place": "not judged",
        "release-idle": "not judged",
    }
    assert kinds["migrate-job"]["median_relative_error"] == pytest.approx(0.1)
    assert kinds["pin"]["why"] == "median 0.900 > 0.25"
    assert kinds["place"]["why"] == "4 action(s) with a true gain after round 3, fewer than 5"
    assert kinds["release-idle"]["actions_after_round"] == 0
    assert kinds["release-idle"]["actions_applied"] == 10


def test_a_kind_without_a_gaining_action_misses() -> None:
    [entry] = _target([judged_action("pin", 4, 0.1, 0.0)] * FIVE)["kinds"].values()
    assert entry["status"] == "missed" and entry["median_relative_error"] is None


def test_met_holds_only_when_every_judged_kind_met() -> None:
    assert _target(ACTIONS)["met"] is False
    assert _target([a for a in ACTIONS if a["kind"] != "pin"])["met"] is True
    assert _target([judged_action("pin", 1, 0.1, 0.5)] * 10)["met"] is None  # nothing judged


def test_the_text_names_the_target_and_each_kind(capsys: pytest.CaptureFixture[str]) -> None:
    figures = {
        "summary": [],
        "calibration": [],
        "calibration_by_round": [],
        "calibration_after": [],
        "calibration_target": _target(ACTIONS),
        "scenarios": [],
    }
    print_figures(figures, learn=True)
    text = capsys.readouterr().out
    assert "calibration target (after 3 rounds, median |estimated - true| / true" in text
    assert "pin              MISSED: median 0.900 > 0.25" in text
    assert "migrate-job      met: median 0.100 <= 0.25" in text
