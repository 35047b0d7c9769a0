"""Closed loop through real Slurm: ``bench/closed_loop.py --rm slurm``.

The simulator is the hardware and a real local Slurm cluster (built from the scenario's
nodes: :mod:`toposcope.slurm.standalone`) the scheduler: the simulator submits the
scenario's jobs to slurmctld (arrivals within ``--announce`` seconds at once, with
``--begin`` at their arrival, so that they wait in the queue), mirrors the allocations Slurm
makes, and serves the nodes' metrics to a real Prometheus. Each round runs the real
``toposcope advise --apply --resource-manager slurm`` (pending jobs steered with
``ReqNodeList``, opted-in jobs requeued onto other nodes), waits until Slurm runs every moved
job again and the moved jobs' checkpoint-restore is over, then one ``--window``.

Figures, as the simulator path reports them (:mod:`toposcope.sim.judge`), from the
simulator's truth: ``gain`` (aggregate ``throughput / ideal`` over the jobs counted at the
baseline, after the loop against before), ``ratio`` against the oracle solved at the
baseline (:func:`oracle_ratio`: its efficiencies without move costs, so the ratio is a lower
bound of the simulator path's), and harm (counted jobs whose true throughput fell in a
round: ``harmful`` when the round targeted them, ``collateral`` otherwise). Slurm's own view:
which jobs moved (nodes in order), their restart counts (``scontrol``'s ``Restarts``), and the
seconds from each apply to the job running where it was sent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from judge_loop import aggregate, counted_jobs, prometheus, serve, truth

from toposcope.sim.clock import SimClock
from toposcope.sim.judge import fallen, ratios
from toposcope.sim.oracle import solve
from toposcope.sim.scenarios import Scenario, load_scenario
from toposcope.sim.slurm_cluster import SlurmMirroredCluster
from toposcope.sim.slurm_description import describe_cluster
from toposcope.sim.slurm_mirror import SlurmMirror, SlurmRunner
from toposcope.sim.slurm_mode import build_mirrored
from toposcope.slurm.clusterfiles import ClusterLayout
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.standalone import spec_from_description
from toposcope.waiting import NotReadyError, wait_until

#: Seconds a round waits at most for Slurm to run its moved and steered jobs.
SETTLE_S = 150.0


def prefixed(scenario: Scenario, prefix: str) -> Scenario:
    """The scenario with its node names prefixed (Slurm's cgroup directories are per name)."""
    return replace(scenario, nodes=tuple(replace(n, name=prefix + n.name) for n in scenario.nodes))


def oracle_ratio(
    baseline: float, advisor: float, efficiencies: Mapping[str, float], kept: Mapping[str, float]
) -> dict[str, float]:
    """Gain and ratio as :func:`~toposcope.sim.judge.ratios` computes them, the oracle's total
    being its efficiencies over ``kept`` without move costs (what should be merged with the
    simulator path's horizon scoring once the mirrored cluster records applied costs).
    """
    oracle_total = sum(efficiencies.get(name, 0.0) for name in kept)
    scored = ratios(baseline, advisor, oracle_total, float(len(kept)))
    return {
        "gain": round(scored.gain, 4),
        "oracle_gain": round(scored.oracle_gain, 4),
        "ratio": round(scored.ratio, 4),
        "ratio_to_bound": round(scored.ratio_to_bound, 4),
    }


def advise(
    prom_url: str, info: Mapping[str, str], audit_db: Path, window_s: int
) -> dict[tuple[str, str], str]:
    """One ``toposcope advise --apply --resource-manager slurm``: the applied actions."""
    argv = [
        sys.executable, "-m", "toposcope.cli", "advise", "--prometheus", prom_url,
        "--window", f"{window_s}s", "--format", "json", "--apply",
        "--policy", "gpu-placement", "--policy", "job-migration",
        "--resource-manager", "slurm", "--slurm-conf", info["slurm_conf"],
        "--audit-db", str(audit_db),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"toposcope advise exited {done.returncode}: {done.stderr[-2000:]}")
    outcomes: dict[str, str] = {}
    for line in done.stderr.splitlines():
        if line.startswith("apply "):
            rec_id, _, rest = line[len("apply ") :].partition(": ")
            outcomes[rec_id] = rest
    report = json.loads(done.stdout)
    return {
        (str(a["workload"]), str(a["kind"])): str(a["node"])
        for r in report["recommendations"]
        if outcomes.get(r["id"], "").startswith("applied")
        for a in r["actions"]
    }


def settle(
    mirror: SlurmMirror, cluster: SlurmMirroredCluster, sent: Mapping[tuple[str, str], str]
) -> dict[str, float]:
    """Wait until every job ``sent`` runs on its node and makes progress again; the seconds
    from the apply to Slurm running it there, per job (jobs that never got there are left out).
    """
    started = time.monotonic()
    arrived: dict[str, float] = {}

    def there() -> bool:
        jobs = {j.workload: j for j in mirror.jobs()}
        rates = truth(cluster)
        for (workload, _), node in sent.items():
            job = jobs.get(workload)
            if workload not in arrived and job and job.state == "RUNNING" and job.nodes[-1] == node:
                arrived[workload] = round(time.monotonic() - started, 1)
        return all(w in arrived and rates.get(w, 0.0) > 0 for (w, _) in sent)

    # a job Slurm did not run in time is left out of ``arrived``: reported, not fatal
    with contextlib.suppress(NotReadyError):
        wait_until(there, SETTLE_S, interval_s=1.0, what="moved jobs running", errors=())
    return arrived


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The loop on one scenario (see the module docstring)."""
    scenario = prefixed(load_scenario(args.scenario), f"b{int(time.time()) % 100000}-")
    cluster = build_mirrored(scenario, SimClock(seed=scenario.seed, speed=1.0))
    layout = ClusterLayout(workdir / "slurm")
    slurm = LocalCluster(layout.root, spec_from_description(describe_cluster(cluster), layout))
    slurm.start()
    stop = threading.Event()
    try:
        mirror = SlurmMirror(
            cluster, [j.spec for j in scenario.jobs], SlurmRunner(layout.slurm_conf),
            announce_s=args.announce,
        )  # fmt: skip
        thread = threading.Thread(target=mirror.run, args=(stop, 1.0), daemon=True)
        thread.start()
        server, _, _, _ = serve(cluster, workdir)
        try:
            with prometheus(
                args.prometheus_binary, workdir, workdir / "targets.json", len(scenario.nodes)
            ) as prom_url:
                return loop(args, workdir, cluster, mirror, slurm, prom_url)
        finally:
            server.shutdown()
    finally:
        stop.set()
        slurm.stop()


def loop(
    args: argparse.Namespace,
    workdir: Path,
    cluster: SlurmMirroredCluster,
    mirror: SlurmMirror,
    slurm: LocalCluster,
    prom_url: str,
) -> dict[str, Any]:
    """Baseline, rounds of the advisor, then the figures."""
    wait_until(lambda: any(j.state == "RUNNING" for j in mirror.jobs()), 60, what="jobs running")
    time.sleep(args.window)  # the window must hold history before the first round
    kept = counted_jobs(cluster)
    before_all = truth(cluster)
    oracle = solve(cluster, names=kept, budget_s=args.oracle_budget)
    info = {"slurm_conf": str(slurm.layout.slurm_conf)}
    rounds: list[dict[str, Any]] = []
    for number in range(1, args.rounds + 1):
        before = truth(cluster)
        sent = advise(prom_url, info, workdir / "audit.sqlite", args.window)
        if not sent:
            break
        arrived = settle(mirror, cluster, sent)
        time.sleep(args.window)
        after = truth(cluster)
        down = fallen(before, after, kept)
        targets = {w for (w, _) in sent}
        rounds.append(
            {
                "round": number,
                "applied": [f"{k} {w} -> {n}" for (w, k), n in sorted(sent.items())],
                "seconds_to_running": arrived,
                "harmful": [n for n in down if n in targets],
                "collateral": [n for n in down if n not in targets],
            }
        )
    done = {j.workload for j in mirror.jobs() if j.state == "DONE"}
    still = {n: v for n, v in kept.items() if n not in done}
    final = truth(cluster)
    figures = oracle_ratio(
        aggregate(before_all, still), aggregate(final, still), oracle.efficiencies, still
    )
    return {
        "scenario": args.scenario,
        **figures,
        "harmful": sum(len(r["harmful"]) for r in rounds),
        "collateral": sum(len(r["collateral"]) for r in rounds),
        "jobs_counted": len(still),
        "rounds": rounds,
        "slurm_view": [
            {"job": j.job_id, "name": j.scenario_name, "nodes": j.nodes, "restarts": j.restarts}
            for j in mirror.jobs()
            if len(j.nodes) > 1 or j.restarts
        ],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the Slurm loop (``--scenario`` defaults to the Slurm scenario)."""
    parser.add_argument("--announce", type=float, default=60.0, help="queue lead, seconds")


def main(args: argparse.Namespace) -> int:
    """Run the loop, print the figures (JSON with ``--json``); 2 without Slurm."""
    if shutil.which("slurmctld") is None:
        print("closed_loop --rm slurm: Slurm is not installed", file=sys.stderr)
        return 2
    args.scenario = (args.scenario or ["builtin:slurm-steering"])[0]
    workdir = Path(tempfile.mkdtemp(prefix="toposcope-closed-loop-slurm-"))
    workdir.chmod(0o755)  # slurmrestd runs as nobody and reads the cluster's files
    try:
        result = run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=None if args.json else 1))
    return 0
