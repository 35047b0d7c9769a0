"""Closed loop: the advisor applied to each built-in scenario, scored against the oracle.

For every built-in scenario (``large`` excluded, with its reason in the output):

1. build the simulated cluster, advance its clock past the scenario's last arrival (the
   first-fit scheduler places arrivals as a topology-blind scheduler would), then switch the
   scheduler off so that from here on only the advisor changes placements;
2. solve the oracle (:mod:`toposcope.sim.oracle`): the best joint allocation of every job
   that the performance model and the resource-manager actions allow;
3. serve the cluster on loopback (node ``/metrics``, ``/truth/metrics``, the
   resource-manager API with a token) and have a real Prometheus scrape it every second
   through file_sd, the clock running at speed 1 so that counter rates are real rates; wait
   one ``--window`` so the window holds history (idle GPUs need samples over the window);
4. read the baseline from the ground truth, then run rounds of the real CLI,
   ``toposcope advise --prometheus URL --window W --apply --resource-manager sim``
   (a subprocess, audit log in SQLite). After each round the clock jumps ahead by the
   longest cost of the round's actions (page migration, checkpoint-restore), the truth is
   read again (per-action results), and the bench waits one window so the next round sees
   only samples taken after the changes. Rounds stop when one applies nothing;
5. compare: ``gain = after / before - 1`` of the aggregate, ``oracle_gain`` the same for
   the oracle's allocation, ``ratio = gain / oracle_gain`` (1.0 when the oracle gains
   nothing and the advisor lost nothing, 0.0 when it lost), ``harmful_actions`` the applied
   recommendations after which their target's true throughput was lower than before them.

**Aggregate throughput**: the sum over the counted jobs of ``throughput / ideal``, where
``ideal`` is the job's best throughput alone on any node of the cluster (so each job counts 1
at its best and 0 while pending; jobs of different kinds weigh the same). Counted: every
running or pending job with a non-zero ideal (notebooks have none) present at the baseline
and not finished at the end.

Each applied recommendation is listed with its estimated gain and the actual change of its
target's throughput over its round. ``--json`` prints JSON only. Targets: ratio >= 0.9 on
every scenario and 0 harmful actions; a missed target is printed as MISSED (exit status 0:
benchmarks print figures, as ``bench/sim_scale.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toposcope.procs import Prometheus, wait_until
from toposcope.resources import ResourceManagerError
from toposcope.rmapi import make_api_app
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import DONE, SimCluster
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.oracle import solve
from toposcope.sim.scenarios import build_cluster, builtin_scenarios, load_scenario
from toposcope.sim.server import SimServer, file_sd_targets, make_sim_app, write_file_sd

TARGET_RATIO = 0.9
TARGET_HARMFUL = 0
#: relative drop of a target's throughput that counts as harm (model noise is far below)
HARM_TOLERANCE = 1e-6
EXCLUDED = {
    "large": (
        "1,000 nodes x 4,000 workloads: the oracle's search tries every job on every node "
        "(about 4,000 x 1,000 x hundreds of candidate allocations per pass, hours), and a "
        "Prometheus scraping 1,000 simulated nodes every second needs a scrape round of "
        "about 8 s; bench/advisor_scale.py measures the advisor on this size instead"
    )
}


@contextmanager
def prometheus(binary: str, workdir: Path, targets: Path, nodes: int) -> Iterator[str]:
    """A real Prometheus scraping the file_sd ``targets`` every second; yields its URL once
    every simulated node has been scraped.
    """
    scrape_configs = [
        {
            "job_name": "toposcope-sim",
            "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
        }
    ]
    server = Prometheus(workdir, scrape_configs, binary=binary)
    with server.run():

        def all_up() -> bool:
            result = server.query('count(up{job="toposcope-sim"} == 1)')
            return bool(result) and int(float(result[0]["value"][1])) == nodes

        wait_until(all_up, 60, what="every simulated node scraped")
        yield server.url


def truth(cluster: SimCluster) -> dict[str, float]:
    """True throughput of every workload that is not done."""
    return {row.name: row.throughput for row in cluster.truth()}


def counted_jobs(cluster: SimCluster) -> dict[str, float]:
    """Counted jobs (running, or pending and arrived, with a non-zero ideal) -> ideal."""
    result = {}
    for state in cluster.job_states():
        if state.state == DONE or state.spec.submit_time > cluster.now:
            continue
        ideal = cluster.ideal_throughput(state.spec)
        if ideal > 0:
            result[state.name] = ideal
    return result


def aggregate(throughput: Mapping[str, float], ideal: Mapping[str, float]) -> float:
    """Sum of ``throughput / ideal`` over ``ideal``'s jobs."""
    return sum(throughput.get(name, 0.0) / value for name, value in ideal.items())


def ratio_of(gain: float, oracle_gain: float) -> float:
    """``gain / oracle_gain``; with nothing to gain, 1.0 unless the advisor lost."""
    if oracle_gain <= 1e-9:
        return 1.0 if gain >= -1e-9 else 0.0
    return gain / oracle_gain


def run_advisor(
    prom_url: str, sim_url: str, token_file: Path, audit_db: Path, window_s: int, args: Any
) -> tuple[dict[str, Any], dict[str, str], float]:
    """One ``toposcope advise --apply`` run: (JSON report, outcome by id, seconds)."""
    argv = [
        sys.executable, "-m", "toposcope.cli", "advise",
        "--prometheus", prom_url, "--window", f"{window_s}s", "--format", "json",
        "--apply", "--resource-manager", "sim", "--rm-url", sim_url,
        "--token-file", str(token_file), "--audit-db", str(audit_db),
        "--max-actions", str(args.max_actions),
        "--max-actions-per-node", str(args.max_actions_per_node),
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"toposcope advise exited {done.returncode}: {done.stderr[-2000:]}")
    outcomes = {}
    for line in done.stderr.splitlines():
        if line.startswith("apply "):
            rec_id, _, rest = line[len("apply ") :].partition(": ")
            outcomes[rec_id] = rest
    report: dict[str, Any] = json.loads(done.stdout)
    return report, outcomes, seconds


def action_costs(audit_db: Path, rec_ids: set[str], cluster: SimCluster) -> float:
    """The longest cost (simulated seconds) of the actions of ``rec_ids``."""
    longest = 0.0
    with sqlite3.connect(audit_db) as db:
        rows = db.execute("SELECT request_id, recommendation_id FROM actions").fetchall()
    for request_id, rec_id in rows:
        if rec_id in rec_ids:
            try:
                longest = max(longest, cluster.action(request_id).cost_seconds)
            except ResourceManagerError:  # an action the sim does not know cost nothing
                continue
    return longest


def run_scenario(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The closed loop on one scenario (see the module docstring)."""
    scenario = load_scenario(f"builtin:{name}")
    clock = SimClock(seed=scenario.seed, speed=0)
    cluster = build_cluster(scenario, clock)
    settle = max((job.spec.submit_time for job in scenario.jobs), default=0.0) + 1.0
    cluster.advance(settle)
    cluster.scheduler = "none"
    oracle = solve(cluster)
    ideal = counted_jobs(cluster)
    state_dir = workdir / "state"
    exporters = SimExporters(cluster, state_dir, background=False)
    token = secrets.token_hex(16)
    token_file = workdir / "token"
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)
    server = SimServer(
        make_sim_app(cluster, exporters, make_api_app(cluster, token)), "127.0.0.1:0"
    )
    address = server.address
    server.set_app(make_sim_app(cluster, exporters, make_api_app(cluster, token), address))
    server.start()
    targets = workdir / "targets.json"
    write_file_sd(targets, file_sd_targets(cluster.node_names(), address))
    sim_url = f"http://{address}"
    audit_db = workdir / "audit.sqlite"
    window = args.window
    rounds: list[dict[str, Any]] = []
    actions: list[dict[str, Any]] = []
    try:
        for node in cluster.node_names():  # write every tree before the clock runs
            exporters.scrape(node)
        clock.set_speed(1.0)
        with prometheus(args.prometheus_binary, workdir, targets, len(cluster.node_names())) as url:
            time.sleep(window + 2)
            before = truth(cluster)
            current = dict(before)
            for number in range(1, args.rounds + 1):
                report, outcomes, seconds = run_advisor(
                    url, sim_url, token_file, audit_db, window, args
                )
                if args.keep_reports:
                    keep = Path(args.keep_reports)
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / f"{name}-round{number}.json").write_text(json.dumps(report, indent=1))
                applied = {i for i, text in outcomes.items() if text.startswith("applied")}
                recs = {r["id"]: r for r in report["recommendations"]}
                cost = action_costs(audit_db, applied, cluster)
                cluster.advance(cost + 1.0)
                after_round = truth(cluster)
                for rec_id in sorted(applied, key=lambda i: -recs[i]["estimated_gain"]):
                    rec = recs[rec_id]
                    target = rec["target"].get("workload") or ""
                    was, now = current.get(target, 0.0), after_round.get(target, 0.0)
                    actual: float | None = now / was - 1.0 if was > 0 else None
                    actions.append(
                        {
                            "round": number,
                            "id": rec_id,
                            "kind": rec["kind"],
                            "policy": rec["policy"],
                            "target": f"{rec['target'].get('node')}/{target}",
                            "estimated_gain": round(rec["estimated_gain"], 4),
                            "actual_gain": None if actual is None else round(actual, 4),
                            "throughput_before": round(was, 3),
                            "throughput_after": round(now, 3),
                            "harmful": now < was * (1.0 - HARM_TOLERANCE),
                        }
                    )
                rounds.append(
                    {
                        "round": number,
                        "recommendations": len(recs),
                        "applied": len(applied),
                        "advise_seconds": round(seconds, 2),
                        "aggregate": round(aggregate(after_round, ideal), 4),
                    }
                )
                current = after_round
                if not applied:
                    break
                time.sleep(window + 2)
            after = truth(cluster)
    finally:
        server.shutdown()
        exporters.close()
    done = {s.name for s in cluster.job_states() if s.state == DONE}
    kept = {n: v for n, v in ideal.items() if n not in done}
    base_total = aggregate(before, kept)
    after_total = aggregate(after, kept)
    oracle_total = sum(oracle.efficiencies.get(n, 0.0) for n in kept)
    gain = after_total / base_total - 1.0 if base_total > 0 else 0.0
    oracle_gain = oracle_total / base_total - 1.0 if base_total > 0 else 0.0
    harmful = sum(1 for a in actions if a["harmful"])
    collateral = sorted(
        n for n in kept if after.get(n, 0.0) < before.get(n, 0.0) * (1.0 - HARM_TOLERANCE)
    )
    ratio = ratio_of(gain, oracle_gain)
    shortfall = [
        {
            "job": n,
            "efficiency_after": round(after.get(n, 0.0) / v, 4),
            "efficiency_oracle": round(oracle.efficiencies.get(n, 0.0), 4),
        }
        for n, v in sorted(kept.items())
        if oracle.efficiencies.get(n, 0.0) - after.get(n, 0.0) / v > 0.01
    ]
    return {
        "name": name,
        "gain": round(gain, 4),
        "oracle_gain": round(oracle_gain, 4),
        "ratio": round(ratio, 4),
        "harmful_actions": harmful,
        "met": ratio >= TARGET_RATIO and harmful <= TARGET_HARMFUL,
        "jobs_counted": len(kept),
        "jobs_finished_during_loop": len(set(ideal) & done),
        "aggregate_before": round(base_total, 4),
        "aggregate_after": round(after_total, 4),
        "aggregate_oracle": round(oracle_total, 4),
        "oracle_exact": oracle.exact,
        "oracle_upper_bound": oracle.upper_bound,
        "oracle_seconds": round(oracle.seconds, 2),
        "jobs_lower_at_end": collateral,
        "jobs_below_oracle": shortfall,
        "rounds": rounds,
        "actions": actions,
    }


def print_table(result: dict[str, Any]) -> None:
    """Human-readable figures."""
    print(f"closed loop, window {result['window_seconds']}s, Prometheus {result['prometheus']}")
    print(f"{'scenario':18} {'gain':>8} {'oracle':>8} {'ratio':>7} {'harmful':>8}  target")
    for s in result["scenarios"]:
        if "skipped" in s:
            print(f"{s['name']:18} skipped: {s['skipped']}")
            continue
        verdict = "met" if s["met"] else "MISSED"
        print(
            f"{s['name']:18} {s['gain']:8.1%} {s['oracle_gain']:8.1%} {s['ratio']:7.3f} "
            f"{s['harmful_actions']:8d}  {verdict}"
        )
    for s in result["scenarios"]:
        for a in s.get("actions", []):
            actual = "n/a" if a["actual_gain"] is None else f"{a['actual_gain']:.1%}"
            print(
                f"  {s['name']:16} r{a['round']} {a['kind']:15} {a['target']:40} "
                f"est {a['estimated_gain']:7.1%} actual {actual:>7}"
                + ("  HARMFUL" if a["harmful"] else "")
            )


def main() -> int:
    """Parse options, run every scenario, print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--scenario", action="append", default=[], help="only these (repeatable)")
    parser.add_argument("--window", type=int, default=15, help="advisor window, seconds (15)")
    parser.add_argument("--rounds", type=int, default=6, help="most advisor rounds (6)")
    parser.add_argument("--max-actions", type=int, default=50)
    parser.add_argument("--max-actions-per-node", type=int, default=8)
    parser.add_argument("--prometheus-binary", default=shutil.which("prometheus") or "prometheus")
    parser.add_argument("--keep-reports", metavar="DIR", help="write each round's report here")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    names = args.scenario or builtin_scenarios()
    scenarios: list[dict[str, Any]] = []
    for name in names:
        if name in EXCLUDED:
            scenarios.append({"name": name, "skipped": EXCLUDED[name]})
            continue
        with tempfile.TemporaryDirectory(prefix=f"toposcope-loop-{name}-") as work:
            scenarios.append(run_scenario(name, args, Path(work)))
    measured = [s for s in scenarios if "skipped" not in s]
    result = {
        "scenarios": scenarios,
        "window_seconds": args.window,
        "prometheus": args.prometheus_binary,
        "targets": {"ratio": TARGET_RATIO, "harmful_actions": TARGET_HARMFUL},
        "all_met": all(s["met"] for s in measured),
        "min_ratio": min((s["ratio"] for s in measured), default=math.nan),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
        if not result["all_met"]:
            print("MISSED: ratio >= 0.9 with 0 harmful actions on every scenario")
    return 0


if __name__ == "__main__":
    sys.exit(main())
