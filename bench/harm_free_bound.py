#!/usr/bin/env python3
"""What advice that harms no job could reach on a scenario with gang jobs, seed by seed.

The closed loop (``bench/closed_loop.py``) judges the advisor against the oracle, which may
slow one job to speed up others; the judge counts any such slowdown as harm. This script
builds each perturbed run of a scenario as the closed loop does (same draws, same
settling), solves the oracle and the harm-free search (:mod:`toposcope.sim.harm_free_oracle`:
every job kept at or above its efficiency now) from the same start, values both as the
judge does (each job's efficiency over its horizon less its moves' checkpoint-restores) and
prints, per run, both gains and their quotient ``harm_free_ceiling``: the highest ratio to
the oracle that an advisor held to 0 harmful and 0 collateral actions can reach, as far
as the two local searches find. No advisor runs; the closed loop's ratio is unchanged.

    .venv/bin/python bench/harm_free_bound.py --scenario fabric-mixed --perturb 0.3 --seeds 10
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from loop_seeds import perturbed, seed_numbers
from round_truth import aggregate, counted_jobs

from toposcope.sim.clock import SimClock
from toposcope.sim.gang_oracle import gang_move_costs
from toposcope.sim.harm_free_oracle import solve_harm_free
from toposcope.sim.judge import DEFAULT_HORIZON_S, horizon_total, horizons_now, ratios
from toposcope.sim.oracle import OracleResult, solve
from toposcope.sim.scenarios import Scenario, build_cluster, builtin_scenarios, load_scenario
from toposcope.sim.truth_perturb import check_fraction


def bound_run(scenario: Scenario, horizon_s: float, budget_s: float) -> dict[str, Any]:
    """One run: the oracle's and the harm-free search's gains from the settled start."""
    cluster = build_cluster(scenario, SimClock(seed=scenario.seed, speed=0))
    settle = max((job.spec.submit_time for job in scenario.jobs), default=0.0) + 1.0
    cluster.advance(settle)
    cluster.scheduler = "none"
    if cluster.gangs is None:
        raise SystemExit(f"{scenario.name} has no gang jobs: the oracle there harms no job")
    oracle = solve(cluster, budget_s=budget_s)
    harm_free = solve_harm_free(cluster, budget_s=budget_s)
    states = cluster.job_states()
    specs = {s.name: s.spec for s in states}
    start = {s.name: s.allocation for s in states}
    ideal = counted_jobs(cluster)
    horizons = horizons_now(cluster, ideal, horizon_s)
    truth = {row.name: row.throughput for row in cluster.truth()}
    base = aggregate(truth, ideal)

    def valued(found: OracleResult) -> float:
        costs = gang_move_costs(found.allocations, start, specs, cluster.gangs)
        return horizon_total(found.efficiencies, costs, horizons)

    oracle_total, free_total = valued(oracle), valued(harm_free)
    best = ratios(base, free_total, oracle_total, float(oracle.upper_bound))
    fallen = sorted(
        n
        for n, e in harm_free.efficiencies.items()
        if e < base_efficiency(n, truth, ideal) * (1 - 1e-6)
    )
    return {
        "aggregate_before": round(base, 4),
        "aggregate_oracle": round(oracle_total, 4),
        "aggregate_harm_free": round(free_total, 4),
        "oracle_gain": round(best.oracle_gain, 4),
        "harm_free_gain": round(best.gain, 4),
        "harm_free_ceiling": round(best.ratio, 4),
        "harm_free_jobs_below_start": fallen,
        "oracle_jobs_below_start": sorted(
            n
            for n, e in oracle.efficiencies.items()
            if e < base_efficiency(n, truth, ideal) * (1 - 1e-6)
        ),
        "seconds": round(oracle.seconds + harm_free.seconds, 1),
    }


def base_efficiency(name: str, truth: dict[str, float], ideal: dict[str, float]) -> float:
    """A job's efficiency at the start (``throughput / ideal``)."""
    return truth.get(name, 0.0) / ideal[name] if ideal.get(name) else 0.0


def main(argv: list[str] | None = None) -> int:
    """Parse options, bound every run of the scenario, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", required=True, help="a built-in's name or a file")
    parser.add_argument("--perturb", type=float, default=0.0, metavar="F")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0, metavar="K")
    parser.add_argument("--horizon", type=float, default=DEFAULT_HORIZON_S)
    parser.add_argument("--oracle-budget", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.perturb:
        check_fraction(args.perturb)
    if not 1 <= args.seeds <= 1000 or args.horizon <= 0:
        parser.error("--seeds must be 1 to 1000 and --horizon above 0")
    ref = args.scenario
    scenario = load_scenario(f"builtin:{ref}" if ref in builtin_scenarios() else ref)
    runs = []
    for run in seed_numbers(args.first_seed, args.seeds):
        with perturbed(scenario, args.perturb, run) as moved:
            runs.append({"run": run, **bound_run(moved, args.horizon, args.oracle_budget)})
    ceilings = [r["harm_free_ceiling"] for r in runs]
    out = {
        "scenario": scenario.name,
        "perturb": args.perturb,
        "horizon_seconds": args.horizon,
        "runs": runs,
        "worst_harm_free_ceiling": min(ceilings),
        "mean_harm_free_ceiling": round(sum(ceilings) / len(ceilings), 4),
    }
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
