"""Calibration per kind, policy, node type and link tier: the cells, their shrinkage toward
the kind, outcomes compared with the prior estimate, and the progress metric as the gain.
"""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, gpu, numa_nodes, pcie8, workload
from toposcope.advisor.calibration import (
    PRIOR_WEIGHT,
    Calibration,
    KindCalibration,
    calibrate,
    calibration_from,
    measured_gain,
)
from toposcope.advisor.calibration_cells import cell_of, link_tier, node_type, prior_gain
from toposcope.advisor.capacity_ledger import CapacityLedger
from toposcope.advisor.model import NodeModel
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.advisor.recommendations import make_recommendation, severity_for, value
from toposcope.advisor.runner import assemble
from toposcope.report.advisor_api import Measurement, Verdict
from toposcope.report.recommendation import (
    Recommendation,
    RecommendationKind,
    Risk,
    RunInfo,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest

K = PRIOR_WEIGHT


def _pin(
    gain: float, workload_name: str, gpus: tuple[int, ...], node: str = "n8"
) -> Recommendation:
    return make_recommendation(
        kind=RecommendationKind.PIN,
        policy="numa-pinning",
        target=Target(node, workload_name, gpus),
        summary="pin",
        current={},
        proposed={"cpus": "0-7", "mems": [0]},
        evidence=(),
        estimated_gain=gain,
        gain_model="CRI-RM",
        confidence=0.8,
        risk=Risk.LOW,
        actions=[ActionRequest("", ActionKind.PIN, workload_name, node, list(range(8)), [0], [])],
    )


def _a100(name: str = "a1") -> NodeModel:
    placement = {0: 0, 1: 0}
    return NodeModel(
        name,
        numa_nodes(),
        tuple(gpu(g, n, model="NVIDIA A100-SXM4-80GB") for g, n in placement.items()),
        {(0, 1): "NV12", (1, 0): "NV12"},
    )


def test_a_cell_names_the_node_type_and_the_dearest_link() -> None:
    model = cluster([pcie8(), _a100(), NodeModel("cpu1", numa_nodes())])
    assert node_type(model, "a1") == "NVIDIA A100-SXM4-80GB x2"
    assert node_type(model, "cpu1") == "cpu-only"
    assert node_type(model, "nowhere") == "unknown"
    assert link_tier(model, "n8", [0, 1]) == "PIX"
    assert link_tier(model, "n8", [0, 1, 4]) == "SYS"  # the dearest pair decides
    assert link_tier(model, "a1", [0, 1]) == "NV12"
    assert link_tier(model, "n8", [3]) == "single"
    assert link_tier(model, "n8", []) == "none"
    # a pin moves no GPUs: its cell reads the workload's own GPUs in the model
    model = cluster([pcie8()], [workload("w", node="n8", gpus=(2, 6))])
    assert cell_of(_pin(0.2, "w", ()), model, "n8", ()) == (
        "pin",
        "numa-pinning",
        "unknown GPU x8",
        "SYS",
    )


def _verified(log: OutcomeLog, rec: Recommendation, gain: float, model: object, at: float) -> None:
    log.start(rec, Measurement(remote_share=0.5, cores=4.0), at, model)  # type: ignore[arg-type]
    log.settle(rec.id, Verdict.PAID, Measurement(remote_share=0.0), "", at + 1, gain)


def test_each_cell_is_shrunk_toward_its_kind(tmp_path: Path) -> None:
    model = cluster([pcie8()])
    log = OutcomeLog(tmp_path / "audit.sqlite")
    for i in range(2):  # behind one switch the pins gained twice the estimate
        _verified(log, _pin(0.1, f"near{i}", (0, 1)), 0.2, model, 10.0 + i)
    for i in range(2):  # across sockets, half of it
        _verified(log, _pin(0.1, f"far{i}", (0, 4)), 0.05, model, 20.0 + i)
    found = calibration_from(log)
    # in logarithms: log 2 twice and log 0.5 twice cancel, so the kind learns 1
    assert found["pin"] == KindCalibration(pytest.approx(1.0), 4)  # type: ignore[arg-type]
    kind = found["pin"].factor
    near = found.levels[("pin", "numa-pinning", "unknown GPU x8", "PIX")]
    far = found.levels[("pin", "numa-pinning", "unknown GPU x8", "SYS")]
    # each cell shrinks toward its kind's other cell, itself shrunk toward 1 by k
    near_prior = 2 * math.log(0.5) / (K + 2)
    far_prior = 2 * math.log(2.0) / (K + 2)
    assert near.factor == pytest.approx(math.exp((K * near_prior + 2 * math.log(2.0)) / (K + 2)))
    assert far.factor == pytest.approx(math.exp((K * far_prior + 2 * math.log(0.5)) / (K + 2)))
    assert near.factor > 1.0 > far.factor  # each follows its own evidence
    assert near.outcomes == far.outcomes == 2
    # the next pins are scaled by their own cell's factor, an unseen cell by the kind's
    [scaled_near, scaled_far, scaled_new] = calibrate(
        [_pin(0.1, "x", (0, 1)), _pin(0.1, "y", (4, 5, 0)), _pin(0.1, "z", (0, 2))], found, model
    )
    assert scaled_near.estimated_gain == pytest.approx(0.1 * near.factor, rel=1e-4)
    assert "of numa-pinning on unknown GPU x8, link tier PIX" in scaled_near.gain_model
    assert scaled_far.estimated_gain == pytest.approx(0.1 * far.factor, rel=1e-4)
    assert scaled_new.estimated_gain == pytest.approx(0.1 * kind, rel=1e-4)
    assert "link tier" not in scaled_new.gain_model


def test_an_outcome_is_compared_with_the_prior_not_the_calibrated_estimate(
    tmp_path: Path,
) -> None:
    model = cluster([pcie8()])
    [calibrated] = calibrate(
        [_pin(0.1, "w", (0, 1))], Calibration({("pin",): KindCalibration(2.0, 5)}), model
    )
    assert calibrated.estimated_gain == pytest.approx(0.2)
    assert prior_gain(calibrated) == pytest.approx(0.1)
    log = OutcomeLog(tmp_path / "audit.sqlite")
    _verified(log, calibrated, 0.2, model, 1.0)
    # the pin gained twice its prior: ratio 2, not the 1 an already-scaled estimate gives
    assert calibration_from(log)["pin"].factor == pytest.approx(2.0 ** (1 / (K + 1)))


def test_the_progress_metric_is_the_measured_gain_where_it_was_read() -> None:
    before = Measurement(cores=4.0, gpu_utilization=0.95, progress=10.0)
    after = Measurement(cores=4.0, gpu_utilization=0.95, progress=13.0)
    assert measured_gain(before, after) == pytest.approx(0.3)
    # without it, the saturated proxy says nothing moved
    assert measured_gain(Measurement(cores=4.0, gpu_utilization=0.95), after) == 0.0


def test_round_after_round_the_factor_converges_on_what_was_measured(tmp_path: Path) -> None:
    """Each round calibrates from the outcomes of the rounds before it (as the closed loop's
    ``--calibrate-from`` does): pins that always pay twice their prior move the factor toward
    2 round after round, though every round's estimates were already scaled up.
    """
    model = cluster([pcie8()])
    log = OutcomeLog(tmp_path / "audit.sqlite")
    seen = []
    cell = ("pin", "numa-pinning", "unknown GPU x8", "PIX")
    for rnd in range(4):
        found = calibration_from(log)
        seen.append(found.levels[cell].factor if cell in found.levels else 1.0)
        recs = [_pin(0.1, f"w{rnd}-{i}", (0, 1)) for i in range(3)]
        for i, rec in enumerate(calibrate(recs, found, model)):
            assert rec.estimated_gain == pytest.approx(0.1 * seen[-1], rel=1e-4)
            _verified(log, rec, 0.2, model, 10.0 * rnd + i)  # twice the prior, every time
    assert seen[0] == 1.0
    assert all(a < b < 2.0 for a, b in pairwise(seen))
    # nine outcomes in the kind's only cell: the cell's factor is the kind's
    assert found["pin"].factor == seen[-1] == pytest.approx(2.0 ** (9 / (K + 9)))


def test_once_evidence_exists_each_cells_bias_is_corrected_and_reorders_the_report(
    tmp_path: Path,
) -> None:
    """Two cells missing their priors in opposite directions (behind one switch the pins
    gain three times their estimate, across sockets half of it, as a move onto NVLink
    priced at the PCIe prior, or one whose job gains locality the estimate ignores, would):
    after sixteen outcomes each, the next estimate of each cell is within 25 % of what its
    pins gained, the report ranks the under-estimated cell's pin first where the prior
    ranked it last, and its severity follows the calibrated figure.
    """
    model = cluster([pcie8()])
    log = OutcomeLog(tmp_path / "audit.sqlite")
    for i in range(16):
        _verified(log, _pin(0.1, f"near{i}", (0, 1)), 0.3, model, 10.0 + i)
        _verified(log, _pin(0.2, f"far{i}", (0, 4)), 0.1, model, 40.0 + i)
    found = calibration_from(log)
    near, far = _pin(0.1, "x", (0, 1)), _pin(0.2, "y", (0, 4))
    run = RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("numa-pinning",), 0.05)
    before = assemble(run, [near, far], [], 0.05)
    assert [r.target.workload for r in before.recommendations] == ["y", "x"]
    after = assemble(run, [near, far], [], 0.05, ledger=CapacityLedger(model), calibration=found)
    assert [r.target.workload for r in after.recommendations] == ["x", "y"]
    scaled = {r.target.workload: r for r in after.recommendations}
    assert abs(scaled["x"].estimated_gain - 0.3) / 0.3 <= 0.25
    assert abs(scaled["y"].estimated_gain - 0.1) / 0.1 <= 0.25
    assert scaled["x"].severity != near.severity or scaled["y"].severity != far.severity
    for rec, prior in ((scaled["x"], near), (scaled["y"], far)):
        assert rec.severity == severity_for(
            value(rec.kind, rec.estimated_gain, rec.confidence, 0.0)
        )
        assert prior_gain(rec) == pytest.approx(prior.estimated_gain)


def _move(name: str, basis: object) -> Recommendation:
    """A job move onto GPUs 0 and 1 of ``n8`` whose estimate came from ``basis``."""
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy="job-migration",
        target=Target("n8", name, (0, 4)),
        summary="move",
        current={"communication_share": {"estimate": basis}},
        proposed={"node": "n8", "gpus": [0, 1]},
        evidence=(),
        estimated_gain=0.5,
        gain_model="link prices",
        confidence=0.8,
        risk=Risk.MEDIUM,
        actions=[ActionRequest("", ActionKind.MIGRATE, name, "n8", gpus=[0, 1])],
    )


def test_moves_estimated_from_measured_traffic_and_from_the_prior_are_learned_apart() -> None:
    model = cluster([pcie8()])
    measured = cell_of(_move("a", "measured"), model, "n8", (0, 1))
    prior = cell_of(_move("b", "prior"), model, "n8", (0, 1))
    assert measured == ("migrate-job", "job-migration (measured estimate)", "unknown GPU x8", "PIX")
    assert prior[1] == "job-migration (prior estimate)" and prior[2:] == measured[2:]
    # a value the advisor does not write names no basis (label input is not trusted)
    assert cell_of(_move("c", "x'); DROP"), model, "n8", (0, 1))[1] == "job-migration"
    assert cell_of(_move("d", None), model, "n8", (0, 1))[1] == "job-migration"
    assert cell_of(_pin(0.1, "w", (0, 1)), model, "n8", ())[1] == "numa-pinning"
