"""Calibrated priors: the shrunk factor, the measured gain and the calibrated estimates."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from toposcope.advisor.calibration import (
    FACTOR_FLOOR,
    PRIOR_WEIGHT,
    RATIO_CEILING,
    RATIO_FLOOR,
    KindCalibration,
    calibrate,
    calibration_from,
    measured_gain,
    shrunk_factor,
)
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.advisor.recommendations import make_recommendation
from toposcope.report.advisor_api import Measurement, Verdict
from toposcope.report.recommendation import (
    Recommendation,
    RecommendationKind,
    Risk,
    Severity,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest


def _pin(gain: float, workload: str = "train") -> Recommendation:
    return make_recommendation(
        kind=RecommendationKind.PIN,
        policy="numa-pinning",
        target=Target("n1", workload),
        summary="pin",
        current={},
        proposed={"cpus": "0-7", "mems": [0]},
        evidence=(),
        estimated_gain=gain,
        gain_model="CRI-RM",
        confidence=0.8,
        risk=Risk.LOW,
        actions=[ActionRequest("", ActionKind.PIN, workload, "n1", list(range(8)), [0], [])],
    )


def test_no_outcome_leaves_the_prior_alone() -> None:
    assert shrunk_factor([]) == KindCalibration(1.0, 0)


def _geo(prior_weight: float, *ratios: float) -> float:
    """The factor of ``ratios`` shrunk toward 1 by ``prior_weight``, in logarithms."""
    return math.exp(sum(math.log(r) for r in ratios) / (prior_weight + len(ratios)))


def test_the_factor_is_the_geometric_mean_ratio_shrunk_toward_one() -> None:
    # two outcomes that measured half the estimate: exp((k log 1 + 2 log 0.5) / (k + 2))
    assert PRIOR_WEIGHT == 2.0
    found = shrunk_factor([(0.2, 0.1), (0.4, 0.2)])
    assert found.factor == pytest.approx(_geo(PRIOR_WEIGHT, 0.5, 0.5))
    assert found.factor == pytest.approx(0.5**0.5)  # two outcomes weigh as much as the prior
    assert found.outcomes == 2
    # many such outcomes approach the measured ratio
    assert shrunk_factor([(0.2, 0.1)] * 500).factor == pytest.approx(0.5, abs=0.01)
    # a weaker prior moves faster
    assert shrunk_factor([(0.2, 0.1)], prior_weight=1.0).factor == pytest.approx(0.5**0.5)


def test_under_and_over_estimates_are_corrected_alike() -> None:
    """In logarithms, gaining twice the estimate and half of it are the same distance off:
    the factors are reciprocal, and a cell that gains five times its estimate (a move onto
    NVLink priced at the PCIe prior) is learned as far as the ceiling. Less than half the
    estimate counts as half (a neutral verdict resolves no more).
    """
    up = shrunk_factor([(0.1, 0.2)] * 4).factor
    down = shrunk_factor([(0.2, 0.1)] * 4).factor
    assert up * down == pytest.approx(1.0)
    assert shrunk_factor([(0.1, 0.5)] * 20).factor == pytest.approx(5.0 ** (20 / 22))
    assert shrunk_factor([(0.5, 0.25)] * 20).factor == pytest.approx(0.5 ** (20 / 22))
    assert shrunk_factor([(0.5, 0.0)] * 20).factor == pytest.approx(0.5 ** (20 / 22))


def test_wild_ratios_and_harm_are_bounded() -> None:
    # a ratio of 500 counts as RATIO_CEILING, one outcome against a prior of weight k
    assert shrunk_factor([(0.01, 5.0)]).factor == pytest.approx(_geo(PRIOR_WEIGHT, RATIO_CEILING))
    assert shrunk_factor([(0.1, -0.5)] * 100).factor == pytest.approx(RATIO_FLOOR, rel=0.05)
    assert shrunk_factor([(0.1, -0.5)] * 100).factor >= FACTOR_FLOOR
    assert shrunk_factor([(0.0, 0.3)]).outcomes == 0  # no estimate, nothing to compare


def test_measured_gain_reads_gpus_first_then_cores() -> None:
    gpu = measured_gain(Measurement(cores=4, gpu_utilization=0.5), Measurement(2, 2, 0.6))
    assert gpu == pytest.approx(0.2)
    assert measured_gain(Measurement(cores=4.0), Measurement(cores=5.0)) == pytest.approx(0.25)
    assert measured_gain(Measurement(cores=0.0), Measurement(cores=5.0)) is None
    assert measured_gain(Measurement(), Measurement()) is None


def test_calibration_counts_settled_outcomes_with_an_estimate(tmp_path: Path) -> None:
    log = OutcomeLog(tmp_path / "audit.sqlite")
    for i, (verdict, after) in enumerate(
        [(Verdict.PAID, 4.4), (Verdict.HARMFUL, 2.0), (Verdict.PENDING, 8.0)]
    ):
        rec = _pin(0.2, f"w{i}")
        log.start(rec, Measurement(remote_share=0.5, cores=4.0), 100.0 + i)
        log.settle(rec.id, verdict, Measurement(0.0, after), "", 200.0)
    [(kind, found)] = calibration_from(log).items()
    assert kind == "pin" and found.outcomes == 2
    # ratios 0.1/0.2 and -0.5/0.2 (clipped to the floor), shrunk toward 1
    assert found.factor == pytest.approx(_geo(PRIOR_WEIGHT, 0.5, RATIO_FLOOR))


def test_an_outcome_log_from_before_estimates_were_kept_still_opens(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE verifications (recommendation_id TEXT PRIMARY KEY, kind TEXT NOT NULL,"
            " node TEXT NOT NULL, workload TEXT NOT NULL, target_numa INTEGER NOT NULL,"
            " applied_at REAL NOT NULL, baseline_json TEXT NOT NULL, verdict TEXT NOT NULL,"
            " measured_json TEXT, verified_at REAL, detail TEXT NOT NULL DEFAULT '')"
        )
        conn.execute(
            "INSERT INTO verifications VALUES ('pin-1', 'pin', 'n1', 'w', 0, 1.0,"
            " '{\"cores\": 4.0}', 'effective', '{\"cores\": 2.0}', 2.0, '')"
        )
    log = OutcomeLog(db)
    [old] = log.all()
    assert old.estimated_gain is None
    assert old.verdict == Verdict.PAID  # written as "effective" before the rename
    assert calibration_from(log) == {}


def test_calibrated_estimates_name_the_factor_and_lower_the_severity() -> None:
    rec = _pin(0.2)
    assert rec.severity == Severity.CRITICAL
    [scaled] = calibrate([rec], {"pin": KindCalibration(0.25, 12)})
    assert scaled.estimated_gain == pytest.approx(0.05)
    assert "x 0.25 calibration from 12 verified pin outcome(s)" in scaled.gain_model
    assert scaled.severity == Severity.INFO
    assert scaled.id == rec.id
    assert calibrate([rec], {"migrate-job": KindCalibration(0.5, 3)}) == [rec]
