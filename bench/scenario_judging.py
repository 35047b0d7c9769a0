"""One closed-loop run of a scenario: build, settle, solve, run the advisor, and judge.

:func:`run_scenario` loads a scenario (``large`` sampled: :data:`SAMPLED`) and runs it under
the truth a seed's perturbation puts in effect; :func:`judge_scenario` builds the simulated
cluster, settles it, solves the oracle (and, with ``--harm-free-bound``, the best allocation
that slows no job), runs the advisor's rounds (:func:`judge_loop.run_rounds`) and judges the
end state against the best known, with the figures per round, per action and per job
(:func:`job_results`). The steps are described in ``bench/closed_loop.py``'s docstring.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from judge_loop import run_rounds
from loop_calibration import calibration_rows
from loop_learning import verdict_counts
from loop_options import LoopOptions
from loop_seeds import TARGET_HARMFUL, TARGET_RATIO, perturbed
from round_truth import aggregate, applied_costs, counted_jobs

from toposcope.cpulist import format_cpulist
from toposcope.rm import Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import DONE, SimCluster
from toposcope.sim.gang_engine import GangBook
from toposcope.sim.gang_oracle import gang_move_costs
from toposcope.sim.harm_free_oracle import solve_harm_free
from toposcope.sim.jobs import JobSpec
from toposcope.sim.judge import horizon_total, horizons_now, ratios
from toposcope.sim.memory_measure import write_memory_files
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.oracle import OracleResult, knapsack_bound, solve
from toposcope.sim.p2p_measure import write_p2p_files
from toposcope.sim.scenarios import Scenario, build_cluster, load_scenario

#: ``large`` (1,000 nodes x 4,000 workloads) is judged on a seeded random sample of its
#: nodes with every workload they hold (its jobs never span nodes, so a node's jobs are a
#: self-contained sub-problem): the full oracle's search tries every job on every node
#: (hours), and a Prometheus scraping 1,000 simulated nodes every second needs a scrape
#: round of about 8 s. The ratio to the cheap bound (every job at its best alone) is
#: reported with it.
SAMPLED = {"large"}
SAMPLE_SEED = 17


def sample_scenario(scenario: Scenario, nodes: int, seed: int = SAMPLE_SEED) -> Scenario:
    """``nodes`` nodes of ``scenario`` drawn at random (seeded) with the jobs placed on them
    (jobs without a placement are dropped: they could go anywhere in the full cluster).
    """
    rng = random.Random(seed)
    kept = rng.sample(list(scenario.nodes), min(nodes, len(scenario.nodes)))
    names = {n.name for n in kept}
    jobs = tuple(j for j in scenario.jobs if j.placement is not None and j.placement.node in names)
    return replace(
        scenario,
        name=f"{scenario.name}-sample{len(kept)}",
        nodes=tuple(n for n in scenario.nodes if n.name in names),
        jobs=jobs,
    )


def move_costs(
    chosen: Mapping[str, Allocation | None],
    start: Mapping[str, Allocation | None],
    specs: Mapping[str, JobSpec],
    gangs: GangBook | None = None,
) -> dict[str, float]:
    """Checkpoint-restore seconds of the jobs an oracle solution moves off their GPUs or
    node from where they ran at ``start`` (placing a pending job costs nothing; moving one
    part of a gang job restarts every rank: :func:`~toposcope.sim.gang_oracle.gang_move_costs`).
    """
    return gang_move_costs(chosen, start, specs, gangs)


def run_scenario(ref: str, args: argparse.Namespace, workdir: Path, run: int) -> dict[str, Any]:
    """The closed loop on one scenario, perturbed by run ``run``'s draws when ``--perturb``
    is given (see ``bench/closed_loop.py``'s docstring).
    """
    scenario = load_scenario(ref)
    if scenario.name in SAMPLED:
        scenario = sample_scenario(scenario, args.sample_nodes)
    with perturbed(scenario, args.perturb, run) as moved:
        return judge_scenario(moved, args, workdir, run)


def measured_p2p(cluster: SimCluster, directory: Path) -> dict[str, Path]:
    """Each node's peer bandwidth as a bandwidth test measures it under the truth in effect
    (an operator's ``--p2p-bandwidth`` files), node -> file.
    """
    return write_p2p_files(templates_of(cluster), directory)


def templates_of(cluster: SimCluster) -> dict[str, NodeTemplate]:
    """Each node's machine template (what a measurement on it reads)."""
    return {n: cluster.template_of(n) for n in cluster.node_names()}


def judge_scenario(
    scenario: Scenario, args: argparse.Namespace, workdir: Path, run: int
) -> dict[str, Any]:
    """Build, settle, solve, run the advisor and judge (under the truth now in effect)."""
    clock = SimClock(seed=scenario.seed, speed=0)
    cluster = build_cluster(scenario, clock)
    settle = max((job.spec.submit_time for job in scenario.jobs), default=0.0) + 1.0
    cluster.advance(settle)
    cluster.scheduler = "none"
    oracle = solve(cluster, budget_s=args.oracle_budget)
    harm_free = (
        solve_harm_free(cluster, budget_s=args.oracle_budget)
        if getattr(args, "harm_free_bound", False) and cluster.gangs is not None
        else None
    )
    ideal = counted_jobs(cluster)
    specs = {s.name: s.spec for s in cluster.job_states()}
    start = {s.name: s.allocation for s in cluster.job_states()}
    horizons = horizons_now(cluster, ideal, args.horizon)
    options = LoopOptions(
        window=args.window,
        rounds=args.rounds,
        max_actions=args.max_actions,
        max_actions_per_node=args.max_actions_per_node,
        prometheus_binary=args.prometheus_binary,
        keep_reports=Path(args.keep_reports) if args.keep_reports else None,
        learn=args.learn,
        progress=getattr(args, "progress_mode", "counter"),
        # gang jobs: the advisor sees the fabric (file and series) and moves them whole
        fabric=scenario.fabric if scenario.fabric is not None and scenario.fabric.gangs else None,
        p2p=measured_p2p(cluster, workdir / f"p2p-{run}") if args.measure_p2p else {},
        memory=(
            write_memory_files(templates_of(cluster), workdir / f"memory-{run}")
            if getattr(args, "measure_memory", False)
            else {}
        ),
        outcome_store=getattr(args, "outcome_store", None),
        rounds_before=getattr(args, "rounds_before", 0),
    )
    before, after, rounds, actions = run_rounds(
        cluster, clock, ideal, options, workdir, f"{scenario.name}-{run}"
    )
    done = {s.name for s in cluster.job_states() if s.state == DONE}
    kept = {n: v for n, v in ideal.items() if n not in done}
    kept_horizons = {n: horizons[n] for n in kept}
    finish = solve(cluster, names=kept, budget_s=args.oracle_budget)
    base_total = aggregate(before, kept)
    after_eff = {n: after.get(n, 0.0) / v for n, v in kept.items()}
    advisor_total = horizon_total(after_eff, applied_costs(cluster), kept_horizons)
    oracle_total, best = max(
        (
            horizon_total(
                found.efficiencies,
                move_costs(found.allocations, start, specs, cluster.gangs),
                kept_horizons,
            ),
            index,
        )
        for index, found in enumerate((oracle, finish))
    )
    best_found = (oracle, finish)[best]
    total_gpus = sum(len(cluster.template_of(n).gpus) for n in cluster.node_names())
    bound = float(knapsack_bound([specs[n].gpus for n in kept], total_gpus))
    scored = ratios(base_total, advisor_total, oracle_total, bound)
    for entry in rounds:
        mine = [a for a in actions if a["round"] == entry["round"]]
        entry["calibration"] = calibration_rows(mine)
        entry["verdicts"] = verdict_counts(mine) if args.learn else {}
    harmful = sum(len(r["targets_fallen"]) for r in rounds)
    collateral = sum(len(r["collateral"]) for r in rounds)
    beside: dict[str, float] = {}
    if harm_free is not None:
        free_total = horizon_total(
            harm_free.efficiencies,
            move_costs(harm_free.allocations, start, specs, cluster.gangs),
            kept_horizons,
        )
        free = ratios(base_total, advisor_total, free_total, bound)
        beside = {
            "harm_free_gain": round(free.oracle_gain, 4),
            "ratio_to_harm_free": round(free.ratio, 4),
        }
    return {
        "name": scenario.name,
        "run": run,
        "gain": round(scored.gain, 4),
        "oracle_gain": round(scored.oracle_gain, 4),
        "best_known_gain": round(scored.best_known_gain, 4),
        "bound_gain": round(scored.bound_gain, 4),
        "ratio": round(scored.ratio, 4),
        "ratio_to_bound": round(scored.ratio_to_bound, 4),
        **beside,
        "harmful_actions": harmful,
        "collateral_harm": collateral,
        "useless_actions": sum(1 for a in actions if a["useless"]),
        "applied_actions": len(actions),
        "met": scored.ratio >= TARGET_RATIO and harmful + collateral <= TARGET_HARMFUL,
        "jobs_counted": len(kept),
        "jobs_finished_during_loop": len(set(ideal) & done),
        "aggregate_before": round(base_total, 4),
        "aggregate_after": round(advisor_total, 4),
        "aggregate_oracle": round(oracle_total, 4),
        "upper_bound": bound,
        "oracle_seconds": round(oracle.seconds + finish.seconds, 2),
        "rounds": rounds,
        "actions": actions,
        "jobs": job_results(
            cluster,
            start,
            {n: before.get(n, 0.0) / v for n, v in kept.items()},
            after_eff,
            best_found,
            {a["target"].rpartition("/")[2] for a in actions},
        ),
    }


def job_results(
    cluster: SimCluster,
    start: Mapping[str, Allocation | None],
    before: Mapping[str, float],
    after: Mapping[str, float],
    best: OracleResult,
    targeted: set[str],
) -> list[dict[str, Any]]:
    """Per counted job: where it ran before and after the loop and where the oracle's better
    solution puts it, its efficiency (throughput / ideal) in each, and whether an applied
    action targeted it: what a reader needs to see which jobs the advisor left short.
    """
    now = {s.name: s.allocation for s in cluster.job_states()}

    def where(allocation: Allocation | None) -> dict[str, Any] | None:
        if allocation is None:
            return None
        return {
            "node": allocation.node,
            "gpus": list(allocation.gpus),
            "cpus": format_cpulist(allocation.cpus),
            "mems": list(allocation.mems),
        }

    return [
        {
            "name": name,
            "before": where(start.get(name)),
            "after": where(now.get(name)),
            "oracle": where(best.allocations.get(name)),
            "efficiency_before": round(before[name], 4),
            "efficiency_after": round(after.get(name, 0.0), 4),
            "efficiency_oracle": round(best.efficiencies.get(name, 0.0), 4),
            "targeted": name in targeted,
        }
        for name in sorted(before)
    ]
