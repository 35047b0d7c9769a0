"""The closed loop's per-job results: where each counted job ran before, after and in the
oracle's solution, with its efficiency in each.
"""

from __future__ import annotations

import closed_loop_args
import scenario_judging
from round_truth import counted_jobs, truth

from toposcope.sim.clock import SimClock
from toposcope.sim.oracle import solve
from toposcope.sim.scenarios import build_cluster, load_scenario


def test_every_counted_job_is_listed_with_its_placements_and_efficiencies() -> None:
    scenario = load_scenario(closed_loop_args.scenario_ref("cpu-numa"))
    cluster = build_cluster(scenario, SimClock(seed=scenario.seed, speed=0))
    cluster.advance(max(j.spec.submit_time for j in scenario.jobs) + 1.0)
    cluster.scheduler = "none"
    ideal = counted_jobs(cluster)
    now = truth(cluster)
    before = {n: now.get(n, 0.0) / v for n, v in ideal.items()}
    start = {s.name: s.allocation for s in cluster.job_states()}
    oracle = solve(cluster, budget_s=1.0)
    target = sorted(ideal)[0]
    rows = scenario_judging.job_results(cluster, start, before, before, oracle, {target})
    assert [r["name"] for r in rows] == sorted(ideal)
    assert any(r["efficiency_before"] < 1.0 for r in rows)  # cpu-numa has jobs to fix
    for row in rows:
        allocation = start[row["name"]]
        assert allocation is not None
        assert row["before"]["node"] == allocation.node == row["after"]["node"]
        assert row["efficiency_oracle"] == round(oracle.efficiencies[row["name"]], 4)
        assert row["oracle"]["node"] == oracle.allocations[row["name"]].node  # type: ignore[union-attr]
        assert row["targeted"] == (row["name"] == target)
