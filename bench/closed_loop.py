"""Closed loop: the advisor applied to simulated clusters, judged against the oracle.

For every scenario (``--scenario``: a built-in's name or a scenario file; default every
built-in; ``large`` is judged on a seeded random sample of ``--sample-nodes`` of its nodes,
see :data:`scenario_judging.SAMPLED`):

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
:data:`loop_calibration.LEARNED_AFTER` (met: median <= 25% where a kind applied at least
:data:`loop_calibration.MIN_ACTIONS` actions), and ``calibration_target`` states that target
in words and says for every kind the loop applied whether it was met, missed or not judged (too few
actions after those rounds; :mod:`calibration_target`). Targets: worst ratio >= 0.85 (0.9
for a single run), mean >=
0.9, 0 harmful or collateral, calibration within 25%; a missed target prints MISSED (exit status 0:
benchmarks print figures; 2 for a bad option or scenario). ``--json`` prints JSON only;
each run's ``jobs`` lists every counted job before, after and in the oracle's solution.

This script runs the scenarios and prints the figures; the command line is
:mod:`closed_loop_args`, a scenario's run and its judging :mod:`scenario_judging`, the
calibration tables :mod:`loop_calibration`, the text :mod:`closed_loop_text`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import closed_loop_args
import closed_loop_slurm
from calibration_target import calibration_target
from closed_loop_args import carried, progress_modes, scenario_ref
from closed_loop_text import print_table
from loop_calibration import (
    LEARNED_AFTER,
    MIN_ACTIONS,
    calibration_after,
    calibration_by_round,
    calibration_by_seed,
    calibration_table,
)
from loop_seeds import ratio_targets, seed_numbers, summarize
from scenario_judging import run_scenario

from toposcope.devtools.procs import exit_on_sigterm
from toposcope.errors import ConfigError
from toposcope.sim.judge import CALIBRATION_TARGET
from toposcope.sim.scenarios import builtin_scenarios, load_scenario

EXCLUDED: dict[str, str] = {}


def parse_args() -> argparse.Namespace:
    """The command line (:func:`closed_loop_args.parse_args`), its help headed by this
    module's first line.
    """
    return closed_loop_args.parse_args(__doc__.splitlines()[0] if __doc__ else "")


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
