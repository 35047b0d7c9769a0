"""The closed loop's judge: harm, horizons, useless actions, ratios, calibration, and the
perturbed truths it judges under.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from round_truth import round_actions

from tests.advisor.test_fabric_swaps import LONG, joint
from toposcope.rm import Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.judge import (
    calibration,
    fallen,
    horizon_total,
    horizon_value,
    job_horizon,
    ratios,
    useless,
)
from toposcope.sim.model import evaluate
from toposcope.sim.oracle import solve
from toposcope.sim.scenarios import build_cluster, load_scenario
from toposcope.sim.templates import builtin_template
from toposcope.sim.truth_params import shipped_truth, truth, truth_in_effect
from toposcope.sim.truth_perturb import (
    check_fraction,
    perturb_job,
    perturb_scenario,
    perturb_truth,
)

REPO = Path(__file__).resolve().parents[2]


def test_every_job_whose_throughput_fell_counts_not_only_targets() -> None:
    before = {"a": 10.0, "b": 5.0, "c": 1.0, "gone": 3.0}
    after = {"a": 11.0, "b": 4.0, "c": 1.0}
    assert fallen(before, after, {"a": 1.0, "b": 1.0, "c": 1.0, "gone": 1.0}) == ["b"]


def test_an_action_without_true_gain_is_useless() -> None:
    assert useless(0.0) and useless(-0.2) and not useless(0.05)
    assert not useless(None)  # the target was pending: any throughput is a gain


def test_a_move_pays_its_pause_over_the_horizon() -> None:
    assert horizon_value(1.0, 0.0, 3600.0) == 1.0
    assert horizon_value(1.0, 360.0, 3600.0) == pytest.approx(0.9)
    assert horizon_value(1.0, 7200.0, 3600.0) == 0.0
    assert job_horizon(600.0, 3600.0) == 600.0 and job_horizon(None, 3600.0) == 3600.0
    # a 10% gain bought with a pause of a fifth of the horizon is a loss
    moved = horizon_total({"j": 1.1}, {"j": 720.0}, {"j": 3600.0})
    assert moved < horizon_total({"j": 1.0}, {}, {"j": 3600.0})


def test_the_ratio_is_against_the_best_known_and_never_above_one() -> None:
    beat = ratios(baseline=10.0, advisor=13.0, oracle=12.0, bound=15.0)
    assert beat.ratio == 1.0 and beat.best_known_gain == pytest.approx(0.3)
    assert beat.ratio_to_bound == pytest.approx(0.6)
    short = ratios(baseline=10.0, advisor=11.0, oracle=12.0, bound=12.0)
    assert short.ratio == pytest.approx(0.5)
    lost = ratios(baseline=10.0, advisor=9.0, oracle=10.0, bound=10.0)
    assert lost.ratio == 0.0
    assert ratios(baseline=10.0, advisor=10.0, oracle=10.0, bound=10.0).ratio == 1.0


def test_calibration_is_per_kind_relative_to_the_true_gain() -> None:
    rows = calibration(
        [("pin", 0.5, 0.4), ("pin", 0.3, 0.4), ("migrate", 1.0, 0.0), ("release", 0.0, 0.0)]
    )
    by_kind = {c.kind: c for c in rows}
    assert by_kind["pin"].mean_abs_error == pytest.approx(0.1)
    assert by_kind["pin"].relative_error == pytest.approx(0.25) and by_kind["pin"].met
    assert math.isinf(by_kind["migrate"].relative_error) and not by_kind["migrate"].met
    assert by_kind["release"].relative_error == 0.0


def test_perturbed_truth_moves_every_figure_within_the_fraction() -> None:
    base = shipped_truth()
    moved = perturb_truth(base, 0.3, seed=4)
    assert moved == perturb_truth(base, 0.3, seed=4)  # seeded
    assert moved != perturb_truth(base, 0.3, seed=5)
    for tier, param in base.links.items():
        assert 0.7 * param.value <= moved.links[tier].value <= 1.3 * param.value
        assert moved.links[tier].value != param.value
    for (_, old), (_, new) in zip(base.numa_bandwidth, moved.numa_bandwidth, strict=True):
        assert new.value <= 1.0 and new.value >= 0.7 * old.value
    assert perturb_truth(base, 0.0, seed=4) is base


def test_each_job_draws_its_own_perturbation() -> None:
    a = make_job("a", JobKind.GPU_TRAIN, gpus=2)
    b = make_job("b", JobKind.GPU_TRAIN, gpus=2)
    pa, pb = (perturb_job(j, 0.3, 1, overhead=0.2) for j in (a, b))
    factor_a = pa.numa_sensitivity / a.numa_sensitivity
    factor_b = pb.numa_sensitivity / b.numa_sensitivity
    assert 0.7 <= factor_a <= 1.3 and 0.7 <= factor_b <= 1.3 and factor_a != factor_b
    assert pa.comm_intensity <= 1.0 and pa.sharing_overhead is not None


def test_the_model_reads_the_truth_in_effect_and_gets_the_shipped_one_back() -> None:
    xeon = builtin_template("xeon-2s")
    job = make_job("cnn", JobKind.CPU_TRAIN, threads=28, memory_gb=8)
    remote = Allocation("x", list(xeon.node_cpus(0)), [1], [])
    shipped = evaluate(job, remote, xeon).slowdown
    with truth_in_effect(perturb_truth(shipped_truth(), 0.3, seed=2)) as moved:
        assert truth() is moved
        assert evaluate(job, remote, xeon).slowdown != pytest.approx(shipped)
    assert truth() is shipped_truth()
    assert evaluate(job, remote, xeon).slowdown == pytest.approx(shipped)


def test_a_perturbed_scenario_keeps_its_jobs_and_placements() -> None:
    scenario = load_scenario("builtin:cpu-numa")
    moved = perturb_scenario(scenario, shipped_truth(), 0.3, seed=1)
    assert [j.spec.name for j in moved.jobs] == [j.spec.name for j in scenario.jobs]
    assert [j.placement for j in moved.jobs] == [j.placement for j in scenario.jobs]
    assert any(
        m.spec.numa_sensitivity != j.spec.numa_sensitivity
        for m, j in zip(moved.jobs, scenario.jobs, strict=True)
    )
    build_cluster(moved, SimClock(speed=0))  # still a valid cluster


def test_a_perturbation_out_of_range_is_refused() -> None:
    assert check_fraction(0.3) == 0.3
    with pytest.raises(ValueError, match="between 0 and"):
        check_fraction(1.5)


def test_ejection_chains_find_what_single_moves_miss_on_the_demo() -> None:
    scenario = load_scenario("builtin:demo")
    cluster = build_cluster(scenario, SimClock(seed=scenario.seed, speed=0))
    cluster.advance(max(j.spec.submit_time for j in scenario.jobs) + 1.0)
    cluster.scheduler = "none"
    single = solve(cluster, budget_s=0.0)
    chained = solve(cluster, budget_s=120.0)
    assert chained.total > single.total + 0.1
    assert chained.total <= chained.upper_bound + 1e-9


def test_the_bench_names_a_missing_scenario_file_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench/closed_loop.py"), "--scenario", str(tmp_path / "no")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr


def test_the_bench_refuses_a_negative_first_seed_with_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench/closed_loop.py"), "--first-seed", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "--first-seed must be 0 to" in done.stderr and "Traceback" not in done.stderr


def test_an_action_whose_target_finished_in_the_round_is_neither_harmful_nor_useless() -> None:
    recs = {
        "pin-a": {
            "kind": "pin",
            "policy": "numa-pinning",
            "estimated_gain": 0.2,
            "target": {"node": "n1", "workload": "done.service"},
        },
        "pin-b": {
            "kind": "pin",
            "policy": "numa-pinning",
            "estimated_gain": 0.1,
            "target": {"node": "n1", "workload": "slow.service"},
        },
    }
    current = {"done.service": 100.0, "slow.service": 100.0}
    after = {"slow.service": 50.0}  # done.service finished: the truth lists it no more
    done, slow = round_actions(1, recs, {"pin-a", "pin-b"}, current, after)
    assert done["workload"] == "done.service" and done["finished"] is True
    assert done["actual_gain"] is None and not done["harmful"] and not done["useless"]
    assert slow["finished"] is False and slow["harmful"] and slow["actual_gain"] == -0.5


def test_a_joint_move_is_judged_by_every_part_it_moves() -> None:
    [move] = joint(LONG)  # three spread jobs, serve and notebook moved aside, as the report has it
    rec = json.loads(json.dumps(move.to_dict()))
    moved = [p["part"] for job in rec["proposed"]["jobs"] for p in job["parts"]]
    current = dict.fromkeys(moved, 10.0)
    after = {**dict.fromkeys(moved, 20.0), "serve": 4.0}
    [done] = round_actions(1, {move.id: rec}, {move.id}, current, after)
    assert sorted(done["parts"]) == sorted(moved) and "serve" in moved
    total = 10.0 * len(moved)
    assert done["actual_gain"] == round((total * 2 - 16.0) / total - 1, 4)
    assert not done["harmful"]
