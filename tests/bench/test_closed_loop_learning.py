"""The closed loop learns: each round's applied actions are verified from the metrics and
the next round's advisor runs with ``--calibrate-from`` that outcome log.

A real Prometheus scrapes one simulated 2-socket node whose three jobs run on the other
socket from their memory; with one action a round, each round fixes one of them (a pin or a
memory migration), its estimate scaled by the verified outcomes of the rounds before.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import loop_calibration
import pytest
import scenario_judging
from loop_learning import CALIBRATED

from tests.procs import require_binary
from toposcope.advisor.calibration import calibration_from, outcome_pairs
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.sim.judge import DEFAULT_HORIZON_S
from toposcope.sim.scenarios import load_scenario

pytestmark = pytest.mark.integration

SCENARIO = """\
name: learn
seed: 0
scheduler: none
nodes:
  - {name: xeon, template: xeon-2s, count: 1}
jobs:
  - {name: remote-a, type: cpu-train, threads: 4, memory_gb: 1,
     placement: {node: xeon-01, cpus: "0-3", mems: [1]}}
  - {name: remote-b, type: cpu-train, threads: 4, memory_gb: 1,
     placement: {node: xeon-01, cpus: "4-7", mems: [1]}}
  - {name: remote-c, type: cpu-train, threads: 4, memory_gb: 1,
     placement: {node: xeon-01, cpus: "8-11", mems: [1]}}
"""


def loop_args(
    reports: Path, learn: bool, rounds: int = 3, progress: str = "counter"
) -> argparse.Namespace:
    """The options of a short loop: a 3 s window, one action a round, at most ``rounds``,
    progress measured by ``progress`` (``counter`` or ``proxies``).
    """
    return argparse.Namespace(
        window=3,
        rounds=rounds,
        max_actions=1,
        max_actions_per_node=1,
        prometheus_binary=require_binary("prometheus"),
        keep_reports=str(reports),
        learn=learn,
        oracle_budget=1.0,
        horizon=DEFAULT_HORIZON_S,
        progress_mode=progress,
        measure_p2p=False,
    )


def test_each_round_calibrates_from_the_verdicts_of_the_rounds_before(tmp_path: Path) -> None:
    path = tmp_path / "learn.yaml"
    path.write_text(SCENARIO)
    workdir, reports = tmp_path / "work", tmp_path / "reports"
    workdir.mkdir()
    result = scenario_judging.judge_scenario(
        load_scenario(str(path)), loop_args(reports, learn=True), workdir, 0
    )
    rounds, actions = result["rounds"], result["actions"]
    assert [r["applied"] for r in rounds] == [1, 1, 1]
    assert rounds[0]["calibration_in_effect"] == {} and rounds[0]["calibrated_recommendations"] == 0
    assert all(a["verdict"] in {"paid", "neutral"} for a in actions)
    log = OutcomeLog(workdir / "audit.sqlite")
    assert [v.recommendation_id for v in log.all()] == [a["id"] for a in actions]
    for verification, action in zip(log.all(), actions, strict=True):
        assert verification.estimated_gain == pytest.approx(action["estimated_gain"], abs=1e-4)
    # round N+1 ran with the calibration of the outcomes of rounds 1..N, and no more
    for number in (2, 3):
        seen: dict[str, int] = {}
        for action in actions[: number - 1]:
            seen[action["kind"]] = seen.get(action["kind"], 0) + 1
        in_effect = rounds[number - 1]["calibration_in_effect"]
        assert {k: f["outcomes"] for k, f in in_effect.items()} == seen
    # a round that applied a kind verified in the rounds before it scaled that estimate by
    # the factor it read, and its report says so (which kind fixes which job depends on the
    # measured estimates; with two kinds over three rounds one repeats)
    kinds = [a["kind"] for a in actions]
    repeats = [n for n in (2, 3) if kinds[n - 1] in kinds[: n - 1]]
    assert repeats, f"no round applied a kind verified before it: {kinds}"
    number = repeats[0]
    last = rounds[number - 1]["calibration_in_effect"]
    assert rounds[number - 1]["calibrated_recommendations"] >= 1
    report = json.loads((reports / f"learn-0-round{number}.json").read_text())
    applied = next(r for r in report["recommendations"] if r["id"] == actions[number - 1]["id"])
    kind = applied["kind"]
    said = f"x {last[kind]['factor']:.2f} {CALIBRATED} {last[kind]['outcomes']} verified {kind}"
    assert said in applied["gain_model"]
    # the log after the loop is what a next round would read
    assert {k: c.outcomes for k, c in calibration_from(log).items()} == {
        k: sum(1 for a in actions if a["kind"] == k) for k in {a["kind"] for a in actions}
    }
    # the per-round calibration against the truth is in the JSON, round by round
    for entry, action in zip(rounds, actions, strict=True):
        assert [c["kind"] for c in entry["calibration"]] == [action["kind"]]
        assert entry["verdicts"] == {action["verdict"]: 1}
    rows = loop_calibration.calibration_by_round([result], learn=True)
    assert [(r["round"], r["kind"]) for r in rows] == [(a["round"], a["kind"]) for a in actions]
    # progress was read from each job's step counter, before and after, and the factors
    # were learned from its change (the saturated proxies are not what calibration reads)
    for verification in log.all():
        assert verification.baseline.progress is not None and verification.baseline.progress > 0
        assert verification.measured is not None and verification.measured.progress is not None
    pairs = outcome_pairs(log)
    assert sorted(cell[0] for cell, _, _ in pairs) == sorted(a["kind"] for a in actions)
    assert all(cell[1] and cell[2] == "cpu-only" for cell, _, _ in pairs)
    cells = rounds[2]["cells_in_effect"]
    assert cells and {c["kind"] for c in cells} <= {a["kind"] for a in actions[:2]}
    assert all(c["policy"] and c["node_type"] and c["link_tier"] for c in cells)


def test_with_the_proxies_alone_no_progress_metric_is_read(tmp_path: Path) -> None:
    path = tmp_path / "learn.yaml"
    path.write_text(SCENARIO)
    workdir = tmp_path / "work"
    workdir.mkdir()
    args = loop_args(tmp_path / "reports", learn=True, rounds=2, progress="proxies")
    result = scenario_judging.judge_scenario(load_scenario(str(path)), args, workdir, 0)
    assert [r["applied"] for r in result["rounds"]] == [1, 1]
    log = OutcomeLog(workdir / "audit.sqlite")
    assert len(log.all()) == 2
    assert all(v.baseline.progress is None for v in log.all())
    assert result["rounds"][1]["calibration_in_effect"]  # round 2 still learned, by proxies


def test_without_learning_no_round_is_calibrated(tmp_path: Path) -> None:
    path = tmp_path / "learn.yaml"
    path.write_text(SCENARIO)
    workdir = tmp_path / "work"
    workdir.mkdir()
    result = scenario_judging.judge_scenario(
        load_scenario(str(path)), loop_args(tmp_path / "reports", learn=False, rounds=1), workdir, 0
    )
    assert len(result["rounds"]) == 1
    for entry in result["rounds"]:
        assert entry["calibration_in_effect"] == {} and entry["calibrated_recommendations"] == 0
        assert entry["verdicts"] == {}
        assert [c["actions"] for c in entry["calibration"]] == [entry["applied"]]
    assert all("verdict" not in a for a in result["actions"])
    assert OutcomeLog(workdir / "audit.sqlite").all() == []
