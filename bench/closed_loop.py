"""Closed loop: the advisor applied to simulated clusters, judged against the oracle.

For every scenario (``--scenario``: a built-in's name or a scenario file; default every
built-in; ``large`` is judged on a seeded random sample of ``--sample-nodes`` of its nodes,
see :data:`SAMPLED`):

1. build the simulated cluster, advance its clock past the scenario's last arrival (the
   first-fit scheduler places arrivals as a topology-blind scheduler would), then switch the
   scheduler off so that from here on only the advisor changes placements;
2. solve the oracle (:mod:`toposcope.sim.oracle`: single-job moves to a local optimum, then
   ejection chains) for the best joint allocation the model and the actions allow;
3. serve the cluster on loopback (node ``/metrics``, ``/truth/metrics``, the
   resource-manager API with a token) and have a real Prometheus scrape it every second
   through file_sd, the clock at speed 1 so that counter rates are real rates; wait one
   ``--window`` so the window holds history;
4. run rounds of the real CLI, ``toposcope advise --apply --resource-manager sim``
   (a subprocess, audit log in SQLite). After each round the clock jumps ahead by the
   longest cost of the round's actions, the truth is read again, and the bench waits one
   window. Rounds stop when one applies nothing. With ``--learn`` (the default) the loop
   verifies each round's applied actions from the metrics as the advisor service does
   (:mod:`loop_learning`: verdicts and measured gains in the audit log's outcome table,
   never the truth) and runs the next round with ``--calibrate-from`` that log;
   ``--no-learn`` runs every round uncalibrated. The verdicts measure a job's progress by
   its step counter (``--progress counter``: the simulator's ``/jobs/metrics``, scraped as
   a job's own endpoint, read as a ``--progress-metric``) or by the default proxies alone
   (``--progress proxies``: SM active and link bytes, GPU utilization, CPU cores);
   ``--progress both`` (the default with learning) runs every scenario both ways and
   reports the two side by side, so that neither can hide behind the other. Each seed
   learns alone unless ``--learn-across-seeds``: then, as a deployment keeps its audit log
   from job to job, a scenario's seeds share one outcome store (:mod:`loop_learning`),
   seed N's rounds calibrate from every earlier seed's verdicts too, and each round and
   action carries its ``learning_round`` (its number counted over the rounds of every seed
   it learned from), which ``calibration_after`` judges by;
5. judge (:mod:`toposcope.sim.judge`): every counted job whose true throughput fell in a
   round counts as harm (``harmful_actions`` when it was a target of the round's actions,
   ``collateral_harm`` otherwise); each job's value is its efficiency over its horizon
   (``--horizon``, at most its remaining time) minus the seconds its moves stood it still;
   applied actions whose target gained nothing are ``useless``; the oracle is solved again
   from the advisor's end state, and ``ratio`` is the advisor's gain over the best known
   (the larger of the oracle's and the advisor's, so at most 1), ``ratio_to_bound`` its
   gain over the cheap upper bound (every job at its best alone, within the GPU count);
   with ``--harm-free-bound`` on a scenario with gang jobs, ``ratio_to_harm_free`` its gain
   over the best allocation found that slows no job from the start
   (:mod:`toposcope.sim.harm_free_oracle`): where the oracle slows some jobs to speed up
   others, advice held to 0 harm cannot reach it, and this says how far it is from what it
   could reach. A yardstick beside the ratio, never the target.

**Aggregate throughput**: the sum over the counted jobs of ``throughput / ideal``, where
``ideal`` is the job's best throughput alone on any node of the cluster (each job counts 1
at its best and 0 while pending). Counted: every running or pending job with a non-zero ideal
(notebooks have none) present at the baseline and not finished at the end.

``--perturb F --seeds N`` runs each scenario N times under truths moved by up to ``F``
(:mod:`toposcope.sim.truth_perturb`; run 0 is perturbed too when ``F`` > 0; ``--first-seed
K`` numbers the runs from K; :mod:`loop_seeds`, which ``--rm slurm`` shares) and reports the
worst and mean ratio and the harm across runs. The calibration table gives, per
recommendation kind, the mean absolute error of estimated against true gain over every
applied action and the median of ``|estimated - true| / true`` over those with a true gain
above zero (a job move's estimate before its checkpoint cost, as its true gain is measured
once it runs again), and the calibration by round the same per round with the verdicts the
loop measured (each scenario's rounds also list the calibration factors their advisor ran
with, by kind and by cell, and each action the cell its verdict was learned in);
``calibration_by_seed`` the same per run with the rounds learned before its first;
``calibration_after`` the same over the rounds after the first
:data:`LEARNED_AFTER` (met: median <= 25% where a kind applied at least
:data:`MIN_ACTIONS` actions), and ``calibration_target`` states that target in words and
says for every kind the loop applied whether it was met, missed or not judged (too few
actions after those rounds; :mod:`calibration_target`). Targets: worst ratio >= 0.85 (0.9
for a single run), mean >=
0.9, 0 harmful or collateral, calibration within 25%; a missed target prints MISSED (exit status 0:
benchmarks print figures; 2 for a bad option or scenario). ``--json`` prints JSON only;
each run's ``jobs`` lists every counted job before, after and in the oracle's solution.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import closed_loop_slurm
from calibration_target import calibration_target
from closed_loop_text import print_table
from judge_loop import (
    LoopOptions,
    aggregate,
    applied_costs,
    counted_jobs,
    run_rounds,
)
from loop_learning import verdict_counts
from loop_seeds import (
    TARGET_HARMFUL,
    TARGET_RATIO,
    perturbed,
    ratio_targets,
    seed_numbers,
    summarize,
)

from toposcope.cpulist import format_cpulist
from toposcope.devtools.procs import exit_on_sigterm
from toposcope.errors import ConfigError
from toposcope.rm import Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import DONE, SimCluster
from toposcope.sim.gang_engine import GangBook
from toposcope.sim.gang_oracle import gang_move_costs
from toposcope.sim.harm_free_oracle import solve_harm_free
from toposcope.sim.jobs import JobSpec
from toposcope.sim.judge import (
    CALIBRATION_TARGET,
    DEFAULT_HORIZON_S,
    calibration,
    horizon_total,
    horizons_now,
    ratios,
)
from toposcope.sim.memory_measure import write_memory_files
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.oracle import OracleResult, knapsack_bound, solve
from toposcope.sim.p2p_measure import write_p2p_files
from toposcope.sim.scenarios import Scenario, build_cluster, builtin_scenarios, load_scenario
from toposcope.sim.truth_perturb import check_fraction

#: rounds of learning before the calibration target is judged (``calibration_after``)
LEARNED_AFTER = 3
#: actions a kind must have applied for its calibration to be judged
MIN_ACTIONS = 5
#: the ways of measuring progress ``--progress both`` runs, the first the headline
PROGRESS_MODES = ("counter", "proxies")
EXCLUDED: dict[str, str] = {}
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
    is given (see the module docstring).
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


def calibration_table(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per recommendation kind, estimated against true gain over every applied action."""
    return calibration_rows(a for r in runs for a in r["actions"])


def calibration_by_round(runs: Iterable[dict[str, Any]], learn: bool) -> list[dict[str, Any]]:
    """Per round and kind, estimated against true gain over the round's applied actions in
    every run, with the verdicts the loop measured when it ``learn``-ed (else none).
    """
    actions: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        for action in run["actions"]:
            actions.setdefault(action["round"], []).append(action)
    rows = []
    for number, done in sorted(actions.items()):
        for row in calibration_rows(done):
            mine = [a for a in done if a["kind"] == row["kind"]]
            verdicts = verdict_counts(mine) if learn else {}
            rows.append({"round": number, **row, "verdicts": verdicts})
    return rows


def calibration_by_seed(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run (seed) and kind, estimated against true gain over the run's applied actions,
    with the rounds of outcomes its first round had learned from (more than its own when
    ``--learn-across-seeds`` carried the earlier seeds' outcomes).
    """
    rows = []
    for run in runs:
        first = run["rounds"][0].get("learning_round", 1) if run["rounds"] else 1
        for row in calibration_rows(run["actions"]):
            rows.append(
                {"name": run["name"], "run": run["run"], "learned_rounds": first - 1, **row}
            )
    return rows


def carried(args: argparse.Namespace) -> bool:
    """Whether ``--learn-across-seeds`` carries the outcomes from seed to seed (learning on)."""
    return bool(args.learn and getattr(args, "learn_across_seeds", False))


def calibration_rows(actions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per recommendation kind, estimated against true gain over ``actions``."""
    done = [a for a in actions if a["actual_gain"] is not None]
    pairs = [(a["kind"], a["estimated_gain"], a["actual_gain"]) for a in done]
    return [
        {
            "kind": c.kind,
            "actions": c.actions,
            "mean_abs_error": round(c.mean_abs_error, 4),
            "mean_true_gain": round(c.mean_true_gain, 4),
            "relative_error": round(c.relative_error, 3),
            **median_error([a for a in done if a["kind"] == c.kind]),
            "met": c.met,
        }
        for c in calibration(pairs)
    ]


def median_error(actions: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The median of ``|estimated - true| / true`` over ``actions`` whose true gain is above
    zero (the estimate before a move's checkpoint cost), and how many that was.
    """
    errors = [
        abs(a.get("estimated_gross_gain", a["estimated_gain"]) - a["actual_gain"])
        / a["actual_gain"]
        for a in actions
        if a["actual_gain"] is not None and a["actual_gain"] > 0
    ]
    median = statistics.median(errors) if errors else None
    return {
        "median_relative_error": None if median is None else round(median, 3),
        "gaining_actions": len(errors),
    }


def calibration_after(runs: Iterable[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Per kind, the calibration of the actions applied after the first ``rounds`` rounds
    (once that many rounds of verdicts were learned from: counted over the earlier seeds'
    rounds too when ``--learn-across-seeds`` carried them, an action's ``learning_round``),
    judged where a kind applied at least :data:`MIN_ACTIONS`: median relative error within
    the target.
    """
    late = [a for r in runs for a in r["actions"] if a.get("learning_round", a["round"]) > rounds]
    rows = []
    for row in calibration_rows(late):
        median = row["median_relative_error"]
        judged = row["actions"] >= MIN_ACTIONS
        met = not judged or (median is not None and median <= CALIBRATION_TARGET)
        rows.append({**row, "after_round": rounds, "judged": judged, "met": met})
    return rows


def scenario_ref(name: str) -> str:
    """``builtin:NAME`` for a built-in scenario's name, else the path as given."""
    return f"builtin:{name}" if name in builtin_scenarios() else name


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        help="a built-in scenario's name or a scenario file (repeatable; default: built-ins)",
    )
    parser.add_argument("--window", type=int, default=15, help="advisor window, seconds (15)")
    parser.add_argument("--rounds", type=int, default=6, help="most advisor rounds (6)")
    parser.add_argument("--max-actions", type=int, default=50)
    parser.add_argument("--max-actions-per-node", type=int, default=8)
    parser.add_argument(
        "--perturb",
        type=float,
        default=0.0,
        metavar="F",
        help="scale every truth parameter by a factor drawn from [1-F, 1+F] (0)",
    )
    parser.add_argument("--seeds", type=int, default=1, help="perturbed runs per scenario (1)")
    parser.add_argument(
        "--harm-free-bound",
        action="store_true",
        help="on scenarios with gang jobs, also search the best allocation that slows no job "
        "from the start and report the advisor's gain over it (ratio_to_harm_free, beside "
        "the ratio; it costs one more search of --oracle-budget per run)",
    )
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        metavar="K",
        help="number of the first perturbed run, so that runs K.. can be added later or one "
        "run repeated alone (0)",
    )
    parser.add_argument(
        "--horizon",
        type=float,
        default=DEFAULT_HORIZON_S,
        help="seconds a job's gain is integrated over, at most its remaining time (3600)",
    )
    parser.add_argument(
        "--oracle-budget", type=float, default=60.0, help="seconds for the oracle's chains (60)"
    )
    parser.add_argument(
        "--sample-nodes",
        type=int,
        default=40,
        help="nodes of large judged (a seeded random sample with their workloads; 40)",
    )
    parser.add_argument("--prometheus-binary", default=shutil.which("prometheus") or "prometheus")
    parser.add_argument("--keep-reports", metavar="DIR", help="write each round's report here")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--learn",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="verify each round's applied actions from the metrics, as the advisor service "
        "does, and run the next round with --calibrate-from those outcomes (default: on; the "
        "simulator's loop only)",
    )
    parser.add_argument(
        "--learn-across-seeds",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep the outcomes learned in one seed for the next, as a deployment keeps its "
        "audit log from job to job: seed N's rounds calibrate from every earlier seed's "
        "verdicts too, and the calibration target counts rounds over the seeds (default: "
        "off, each seed learns alone)",
    )
    parser.add_argument(
        "--measure-p2p",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="measure each node's PCIe peer bandwidth as a bandwidth test would "
        "(toposcope.sim.p2p_measure) and give it to the advisor as --p2p-bandwidth "
        "(default: off)",
    )
    parser.add_argument(
        "--measure-memory",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="measure each node's memory bandwidth between NUMA nodes as a single-thread "
        "STREAM run would (toposcope.sim.memory_measure) and give it to the advisor as "
        "--memory-bandwidth (default: off)",
    )
    parser.add_argument(
        "--progress",
        choices=["counter", "proxies", "both"],
        default="both",
        help="what the loop's verdicts measure a job's progress by: its step counter (as a "
        "--progress-metric), the default proxies alone, or both, reported side by side "
        "(default: both; each scenario then runs twice)",
    )
    parser.add_argument(
        "--rm",
        choices=["sim", "slurm"],
        default="sim",
        help="who applies: the simulator (default) or a real Slurm (bench/closed_loop_slurm.py)",
    )
    closed_loop_slurm.add_arguments(parser)
    args = parser.parse_args()
    try:
        check_fraction(args.perturb)
    except ValueError as exc:
        parser.error(str(exc))
    if not 1 <= args.seeds <= 1000 or args.window < 1 or args.horizon <= 0:
        parser.error("--seeds must be 1 to 1000, --window at least 1, --horizon above 0")
    if not 0 <= args.first_seed <= 1_000_000:
        parser.error("--first-seed must be 0 to 1000000")
    if not 1 <= args.sample_nodes <= 1000:
        parser.error("--sample-nodes must be 1 to 1000")
    return args


def progress_modes(args: argparse.Namespace) -> list[str]:
    """The ways of measuring progress to run, the headline first (one without learning:
    nothing is verified, so there is nothing to measure progress for).
    """
    if not args.learn:
        return ["proxies"]
    return list(PROGRESS_MODES) if args.progress == "both" else [args.progress]


def run_all(refs: list[tuple[str, str]], args: argparse.Namespace) -> dict[str, Any]:
    """Every scenario (each ``--seeds`` times) under ``args.progress_mode``: its runs, the
    summary and the calibration tables.
    """
    scenarios: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for name, ref in refs:
        if name in EXCLUDED:
            summary.append({"name": name, "skipped": EXCLUDED[name]})
            continue
        runs = []
        with contextlib.ExitStack() as stack:
            args.outcome_store = None
            if carried(args):  # what the seeds learn, kept for the next
                kept = stack.enter_context(tempfile.TemporaryDirectory(prefix="toposcope-learned-"))
                args.outcome_store = Path(kept) / "audit.sqlite"
            args.rounds_before = 0
            for run in seed_numbers(args.first_seed, args.seeds):
                with tempfile.TemporaryDirectory(prefix="toposcope-loop-") as work:
                    runs.append(run_scenario(ref, args, Path(work), run))
                if args.outcome_store is not None:
                    args.rounds_before += len(runs[-1]["rounds"])
        scenarios.extend(runs)
        summary.append(summarize(runs[0]["name"], runs))
    after = calibration_after(scenarios, LEARNED_AFTER)
    return {
        "summary": summary,
        "calibration": calibration_table(scenarios),
        "calibration_by_round": calibration_by_round(scenarios, args.learn),
        "calibration_by_seed": calibration_by_seed(scenarios),
        "calibration_after": after,
        "calibration_target": calibration_target(
            scenarios,
            after,
            after_round=LEARNED_AFTER,
            min_actions=MIN_ACTIONS,
            limit=CALIBRATION_TARGET,
        ),
        "scenarios": scenarios,
    }


def main() -> int:
    """Parse options, run every scenario (each ``--seeds`` times, each way of measuring
    progress), print figures.
    """
    args = parse_args()
    if args.rm == "slurm":
        return closed_loop_slurm.main(args)
    names = args.scenario or builtin_scenarios()
    try:
        refs = [(name, scenario_ref(name)) for name in names]
        for name, ref in refs:
            if name not in EXCLUDED:
                load_scenario(ref)
    except ConfigError as exc:
        print(f"closed_loop: {exc}", file=sys.stderr)
        return 2
    by_mode: dict[str, dict[str, Any]] = {}
    for mode in progress_modes(args):
        args.progress_mode = mode
        by_mode[mode] = run_all(refs, args)
    headline_mode = next(iter(by_mode))
    headline = by_mode[headline_mode]
    measured = [s for f in by_mode.values() for s in f["summary"] if "skipped" not in s]
    result = {
        **headline,
        "learn": args.learn,
        "learn_across_seeds": carried(args),
        "progress": headline_mode,
        "side_by_side": {
            mode: {k: v for k, v in figures.items() if k != "scenarios" or mode != headline_mode}
            for mode, figures in by_mode.items()
        },
        "window_seconds": args.window,
        "perturb": args.perturb,
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "horizon_seconds": args.horizon,
        "prometheus": args.prometheus_binary,
        "targets": {
            **ratio_targets(args.seeds),
            "calibration_relative_error": CALIBRATION_TARGET,
        },
        "all_met": all(s["met"] for s in measured),
        "min_ratio": min(
            (s["worst_ratio"] for s in headline["summary"] if "skipped" not in s), default=math.nan
        ),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for mode, figures in by_mode.items():
            result["side_by_side"][mode]["scenarios"] = figures["scenarios"]
        print_table(result)
        if not result["all_met"]:
            print("MISSED: a ratio or harm target on at least one scenario")
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
