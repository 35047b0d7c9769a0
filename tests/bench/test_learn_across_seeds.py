"""Learning across seeds: the outcome store a closed loop keeps from seed to seed (as a
deployment keeps its audit log from job to job), and the calibration target counted over
the rounds every seed learned from. No cluster and no Prometheus: outcome logs written as
the loop's learning writes them, and hand-made judged actions.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import closed_loop_args
import loop_calibration
import pytest
from calibration_target import calibration_target
from loop_learning import carry_outcomes

from tests.advisor.builders import cluster, pcie8
from tests.advisor.test_calibration_cells import _pin
from tests.bench.judged_actions import judged_action
from toposcope.advisor.calibration import PRIOR_WEIGHT, calibration_from
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.report.advisor_api import Measurement, Verdict
from toposcope.sim.judge import CALIBRATION_TARGET


def _seed_log(path: Path, gains: dict[str, float | None]) -> OutcomeLog:
    """An outcome log of one seed: a pin per workload of ``gains`` (prior 0.1), settled
    paid with that measured gain, or left pending where it is ``None``.
    """
    model = cluster([pcie8()])
    log = OutcomeLog(path)
    for i, (name, gain) in enumerate(gains.items()):
        rec = _pin(0.1, name, (0, 1))
        log.start(rec, Measurement(remote_share=0.5, cores=4.0), 10.0 + i, model)
        if gain is not None:
            log.settle(rec.id, Verdict.PAID, Measurement(remote_share=0.0), "", 20.0 + i, gain)
    return log


def test_settled_outcomes_travel_from_seed_to_seed_and_pending_ones_stay(
    tmp_path: Path,
) -> None:
    store = tmp_path / "kept.sqlite"
    seed0 = _seed_log(tmp_path / "seed0.sqlite", {"a": 0.2, "b": 0.2, "late": None})
    assert carry_outcomes(seed0.path, store, "demo-0:") == 2
    # the next seed starts from what the store holds, ids as stored
    seed1_db = tmp_path / "seed1.sqlite"
    assert carry_outcomes(store, seed1_db) == 2
    seed1 = _seed_log(seed1_db, {"a": 0.2, "c": 0.2})  # the same pin made again: a new id
    ids = sorted(v.recommendation_id for v in seed1.all())
    assert len(ids) == 4 and sum(i.startswith("demo-0:") for i in ids) == 2
    # the second seed's advisor calibrates from both seeds' outcomes: four of ratio 2
    found = calibration_from(seed1)
    assert found["pin"].outcomes == 4
    assert found["pin"].factor == pytest.approx(2.0 ** (4 / (PRIOR_WEIGHT + 4)))
    assert calibration_from(seed0)["pin"].outcomes == 2
    # back to the store: only the second seed's own outcomes are added, once
    assert carry_outcomes(seed1_db, store, "demo-1:") == 2
    assert carry_outcomes(seed1_db, store, "demo-1:") == 0
    kept = OutcomeLog(store)
    assert len(kept.all()) == 4 and all(v.verdict == Verdict.PAID for v in kept.all())
    # cells and priors travel with the verdicts
    cells = kept.cells()
    assert {cell for cell, _ in cells.values()} == {
        ("pin", "numa-pinning", "unknown GPU x8", "PIX")
    }
    assert [prior for _, prior in cells.values()] == [pytest.approx(0.1)] * 4


def _runs(*seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of one scenario, each with its actions and the rounds they came in."""
    return [
        {
            "name": "s",
            "run": n,
            "actions": actions,
            "rounds": [
                {"round": r, "learning_round": a["learning_round"]}
                for r, a in {a["round"]: a for a in actions}.items()
            ],
        }
        for n, actions in enumerate(seeds)
    ]


def _action(rnd: int, learning_round: int, estimated: float, actual: float) -> dict[str, Any]:
    return {**judged_action("pin", rnd, estimated, actual), "learning_round": learning_round}


def test_rounds_learned_in_earlier_seeds_count_toward_the_target() -> None:
    """A seed whose rounds ran after the three rounds of the seed before it is judged: its
    round-1 pins were estimated by an advisor that had learned from those three rounds.
    Without the carried rounds (each seed alone) the same actions are not judged.
    """
    first = [_action(r, r, 0.1, 0.2) for r in (1, 2, 3)]  # before learning: 50 % off
    second = [_action(1, 4, 0.19, 0.2)] * loop_calibration.MIN_ACTIONS  # learned: 5 % off
    runs = _runs(first, second)
    after = loop_calibration.calibration_after(runs, loop_calibration.LEARNED_AFTER)
    target = calibration_target(
        runs,
        after,
        after_round=loop_calibration.LEARNED_AFTER,
        min_actions=loop_calibration.MIN_ACTIONS,
        limit=CALIBRATION_TARGET,
    )
    assert target["kinds"]["pin"]["status"] == "met"
    assert target["kinds"]["pin"]["actions_after_round"] == loop_calibration.MIN_ACTIONS
    assert target["kinds"]["pin"]["median_relative_error"] == pytest.approx(0.05)
    alone = [
        {k: v for k, v in a.items() if k != "learning_round"} for r in runs for a in r["actions"]
    ]
    assert (
        loop_calibration.calibration_after([{"actions": alone}], loop_calibration.LEARNED_AFTER)
        == []
    )
    # each seed's calibration, with the rounds learned before its first round
    rows = loop_calibration.calibration_by_seed(runs)
    assert [(r["run"], r["learned_rounds"], r["median_relative_error"]) for r in rows] == [
        (0, 0, pytest.approx(0.5)),
        (1, 3, pytest.approx(0.05)),
    ]


def test_learning_across_seeds_needs_learning() -> None:
    on = argparse.Namespace(learn=True, learn_across_seeds=True)
    assert closed_loop_args.carried(on)
    assert not closed_loop_args.carried(argparse.Namespace(learn=False, learn_across_seeds=True))
    assert not closed_loop_args.carried(argparse.Namespace(learn=True))
