"""Closed loop through real Slurm: ``bench/closed_loop.py --rm slurm``.

The simulator is the hardware and a real local Slurm cluster (built from the scenario's
nodes: :mod:`toposcope.slurm.standalone`) the scheduler: the simulator submits the
scenario's jobs to slurmctld (arrivals within ``--announce`` seconds at once, with
``--begin`` at their arrival, so that they wait in the queue), mirrors the allocations Slurm
makes, and serves the nodes' metrics to a real Prometheus. Each round runs the real
``toposcope advise --apply --resource-manager slurm`` (pending jobs steered with
``ReqNodeList``, opted-in jobs requeued onto other nodes), waits until Slurm runs every moved
job again and the moved jobs' checkpoint-restore is over, then one ``--window``.

A scenario with gang jobs on a fabric (``builtin:slurm-fabric``) runs Slurm with
``TopologyPlugin=topology/tree`` and the topology.conf ``toposcope slurm topology-conf``
writes from the scenario's fabric; each gang is one Slurm job of several nodes
(:mod:`toposcope.sim.slurm_gangs`), and the advisor runs ``fabric-placement`` on that
topology.conf too: pending multi-node jobs steered with ``ReqNodeList`` and
``Switches=N@T``, opted-in spread ones requeued onto one leaf
(:mod:`toposcope.slurm.fabric_steer`), at most ``--slurm-max-migrations`` at once
(:mod:`closed_loop_slurm_fabric`).

Figures, as the simulator path reports them (:mod:`toposcope.sim.judge`), from the
simulator's truth: ``gain`` (each counted job's ``throughput / ideal`` over its horizon less
the seconds its moves stood it still, after the loop against before), ``ratio`` against the
oracle solved at the baseline with its move costs (``oracle_basis``; the ratio against the
oracle without them, the earlier basis, is kept as ``ratio_without_move_costs``), and harm
(counted jobs whose true throughput fell in a round: ``harmful`` when the round targeted
them, ``collateral`` otherwise). Slurm's own view: which jobs moved (nodes in order), their
restart counts, the seconds from each apply to the job running where it was sent, and for
multi-node or restarted jobs ``scontrol show job``'s record with the leaves its nodes hang
under (``scontrol show topology``) and whether it confirms where the simulator runs the job.

``--perturb F --seeds N --first-seed K`` mean what they mean on the simulator's path
(:mod:`loop_seeds`): run ``s`` of ``K .. K+N-1`` builds its cluster, a fresh Slurm each,
under truths and job parameters scaled by factors from ``[1 - F, 1 + F]`` seeded by ``s``, the
advisor not told; every run is reported (``scenarios``) with the worst and mean ratio and the
harm over the runs (``summary``), and a line per run goes to standard error as it ends.
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

from closed_loop_slurm_fabric import (
    advisor_paused,
    fabric_advice_arguments,
    job_rows,
    prefixed_fabric,
    scored,
    slurm_records,
    topology_conf,
    useless,
)
from loop_scraping import prometheus, serve
from loop_seeds import perturbed, ratio_targets, seed_numbers, summarize
from round_truth import counted_jobs, truth

from toposcope.errors import ConfigError
from toposcope.fabric.yamlfile import read_fabric_file
from toposcope.sim.clock import SimClock
from toposcope.sim.gang_price import FabricPrices, cabled_nics
from toposcope.sim.judge import fallen, horizons_now
from toposcope.sim.oracle import solve
from toposcope.sim.scenarios import Scenario, builtin_scenarios, load_scenario
from toposcope.sim.slurm_cluster import SlurmMirroredCluster
from toposcope.sim.slurm_description import describe_cluster
from toposcope.sim.slurm_gangs import GangParts
from toposcope.sim.slurm_mirror import SlurmMirror, SlurmRunner
from toposcope.sim.slurm_mode import build_mirrored
from toposcope.slurm.clusterfiles import ClusterLayout
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.standalone import spec_from_description
from toposcope.waiting import NotReadyError, wait_until

#: Seconds a round waits at most for Slurm to run its moved and steered jobs.
SETTLE_S = 150.0
#: The fastest simulated clock the loop accepts (Slurm's own steps take real seconds).
MAX_SPEED = 100.0


def prefixed(scenario: Scenario, prefix: str) -> Scenario:
    """The scenario with its node names prefixed (Slurm's cgroup directories are per name)."""
    return replace(scenario, nodes=tuple(replace(n, name=prefix + n.name) for n in scenario.nodes))


def advise(
    prom_url: str, info: Mapping[str, str], audit_db: Path, window_s: int, extra: list[str]
) -> tuple[dict[tuple[str, str], str], list[str]]:
    """One ``toposcope advise --apply --resource-manager slurm`` (node-level policies, or
    ``extra``'s when given): the applied moves, (workload, kind) -> node (a fabric move: its
    nodes, comma-separated), and what became of every recommendation and note (one line each).
    """
    policies = extra or ["--policy", "gpu-placement", "--policy", "job-migration"]
    argv = [
        sys.executable, "-m", "toposcope.cli", "advise", "--prometheus", prom_url,
        "--window", f"{window_s}s", "--format", "json", "--apply", *policies,
        "--resource-manager", "slurm", "--slurm-conf", info["slurm_conf"],
        "--slurm-max-migrations", str(info.get("max_migrations", "1")),
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
    applied = [
        r for r in report["recommendations"] if outcomes.get(r["id"], "").startswith("applied")
    ]
    moves = {
        (str(a["workload"]), str(a["kind"])): str(a["node"]) for r in applied for a in r["actions"]
    }
    for rec in applied:
        if not rec["actions"] and rec["policy"] == "fabric-placement":
            nodes = rec["proposed"].get("nodes") or []
            moves[(str(rec["target"]["workload"]), str(rec["kind"]))] = ",".join(nodes)
    said = [
        f"{r['policy']} {r['kind']} {r['target'].get('workload') or ''}: "
        f"{outcomes.get(r['id'], 'not applied')}"
        for r in report["recommendations"]
    ]
    said += [
        f"note {n.get('policy', '')} {n.get('target', '')}: {n.get('reason', '')}"
        for n in report.get("notes", [])
    ]
    return moves, said


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
            if (
                workload not in arrived
                and job
                and job.state == "RUNNING"
                and job.nodes
                and set(job.nodes[-1].split(",")) == set(node.split(","))
            ):
                arrived[workload] = round(time.monotonic() - started, 1)
        return all(
            w in arrived and all(rates.get(n, 0.0) > 0 for n in jobs[w].names)
            for (w, _) in sent
            if w in jobs
        )

    # a job Slurm did not run in time is left out of ``arrived``: reported, not fatal
    with contextlib.suppress(NotReadyError):
        wait_until(there, SETTLE_S, interval_s=1.0, what="moved jobs running", errors=())
    return arrived


def run(args: argparse.Namespace, workdir: Path, seed: int = 0) -> dict[str, Any]:
    """The loop on one scenario under run ``seed``'s truth, perturbed by ``args.perturb``
    (:func:`loop_seeds.perturbed`; see the module docstring).
    """
    with perturbed(load_scenario(args.scenario), args.perturb, seed) as original:
        return {"name": original.name, "run": seed, **run_scenario(args, workdir, original)}


def run_scenario(args: argparse.Namespace, workdir: Path, original: Scenario) -> dict[str, Any]:
    """The loop on ``original`` under the truth now in effect."""
    prefix = f"b{int(time.time()) % 100000}-"
    scenario = prefixed(original, prefix)
    cluster = build_mirrored(scenario, SimClock(seed=scenario.seed, speed=args.speed))
    layout = ClusterLayout(workdir / "slurm")
    spec = spec_from_description(describe_cluster(cluster), layout, rest=False)
    declared = original.fabric if original.fabric is not None and original.fabric.gangs else None
    prices = None
    cabled = None
    if declared is not None:
        fabric_file = prefixed_fabric(declared.fabric, prefix, workdir / "fabric.json")
        spec = replace(spec, topology_conf=topology_conf(fabric_file))
        fabric_model = read_fabric_file(fabric_file)
        prices = FabricPrices(fabric_model)
        cabled = cabled_nics(fabric_model)
    slurm = LocalCluster(layout.root, spec)
    slurm.start()
    stop = threading.Event()
    try:
        mirror = SlurmMirror(
            cluster, [j.spec for j in scenario.jobs], SlurmRunner(layout.slurm_conf),
            announce_s=args.announce,
            gangs=declared.gangs if declared is not None else (),
            prices=prices,
            pinned={j.spec.name: prefix + j.placement.node for j in original.jobs if j.placement}
            if declared is not None else None,
        )  # fmt: skip
        thread = threading.Thread(target=mirror.run, args=(stop, 1.0), daemon=True)
        thread.start()
        # the gangs' parts send through their nodes' NICs, as the advisor measures them
        server, _, _, _ = serve(cluster, workdir, network=GangParts(cluster), cabled=cabled)
        try:
            with prometheus(
                args.prometheus_binary, workdir, workdir / "targets.json", len(scenario.nodes)
            ) as prom_url:
                return loop(args, workdir, cluster, mirror, slurm, prom_url)
        finally:
            server.shutdown()
            stop.set()
            thread.join(timeout=30)
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
    # the window must hold history before the first round (and short jobs end first)
    time.sleep(max(args.window, args.settle))
    kept = counted_jobs(cluster)
    before_all = truth(cluster)
    horizons = horizons_now(cluster, kept, args.horizon)
    states = cluster.job_states()
    start = {s.name: s.allocation for s in states}
    specs = {s.name: s.spec for s in states}
    oracle = solve(cluster, names=kept, budget_s=args.oracle_budget)
    info = {
        "slurm_conf": str(slurm.layout.slurm_conf),
        "max_migrations": str(args.slurm_max_migrations),
    }
    extra: list[str] = []
    if slurm.spec.topology_conf:
        extra = fabric_advice_arguments(slurm.layout.topology_conf)
    rounds: list[dict[str, Any]] = []
    moved: dict[str, list[float]] = {}
    for number in range(1, args.rounds + 1):
        before = truth(cluster)
        sent, said = advise(prom_url, info, workdir / "audit.sqlite", args.window, extra)
        if not sent:
            rounds.append(
                {
                    "round": number,
                    "applied": [],
                    "harmful": [],
                    "collateral": [],
                    "useless": [],
                    "advice": said,
                }
            )
            break
        arrived = settle(mirror, cluster, sent)
        for workload, seconds in arrived.items():
            moved.setdefault(workload, []).append(seconds)
        time.sleep(args.window)
        after = truth(cluster)
        down = fallen(before, after, kept)
        parts = {j.workload: j.names for j in mirror.jobs()}
        targets = {n for (w, _) in sent for n in parts.get(w, ())}
        rounds.append(
            {
                "round": number,
                "applied": [f"{k} {w} -> {n}" for (w, k), n in sorted(sent.items())],
                "seconds_to_running": arrived,
                "advice": said,
                "harmful": [n for n in down if n in targets],
                "collateral": [n for n in down if n not in targets],
                "useless": sorted(useless(sent, parts, before, after)),
            }
        )
    jobs = mirror.jobs()
    done = {n for j in jobs if j.state == "DONE" for n in j.names}
    still = {n: v for n, v in kept.items() if n not in done}
    # Slurm's requeue-to-running seconds are real ones: in simulated seconds, times the speed
    simulated = {w: [t * args.speed for t in times] for w, times in moved.items()}
    paused = advisor_paused(cluster, jobs, simulated)
    figures = scored(
        before_all, truth(cluster), still, horizons, paused, oracle, start, specs, cluster
    )
    return {
        "scenario": args.scenario,
        **figures,
        "harmful_actions": sum(len(r["harmful"]) for r in rounds),
        "collateral_harm": sum(len(r["collateral"]) for r in rounds),
        "useless_actions": sum(len(r["useless"]) for r in rounds),
        "applied_actions": sum(len(r["applied"]) for r in rounds),
        "jobs_counted": len(still),
        "horizon_seconds": args.horizon,
        "topology_plugin": "topology/tree" if slurm.spec.topology_conf else None,
        "rounds": rounds,
        "slurm_view": [
            {"job": j.job_id, "name": j.scenario_name, "nodes": j.nodes, "restarts": j.restarts}
            for j in jobs
            if len(j.nodes) > 1 or j.restarts
        ],
        "slurm_records": slurm_records(slurm, jobs, cluster),
        "jobs": job_rows(cluster, still, before_all, start, oracle),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the Slurm loop (``--scenario`` defaults to the Slurm scenario)."""
    parser.add_argument("--announce", type=float, default=60.0, help="queue lead, seconds")
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="simulated seconds per real second (--rm slurm; 1): Slurm runs in real time, "
        "the simulated jobs' checkpoint-restore and durations in simulated time",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds from the first job running to the baseline, at least --window (--rm "
        "slurm; 0: the window)",
    )
    parser.add_argument(
        "--slurm-max-migrations",
        type=int,
        default=1,
        metavar="N",
        help="migrations under way at once in one advisor round (--rm slurm; 1)",
    )


def main(args: argparse.Namespace) -> int:
    """Run the loop, print the figures (JSON with ``--json``); 2 without Slurm."""
    if shutil.which("slurmctld") is None:
        print("closed_loop --rm slurm: Slurm is not installed", file=sys.stderr)
        return 2
    if not 0 < args.speed <= MAX_SPEED or not 0 <= args.settle <= SETTLE_S:
        print(
            f"closed_loop --rm slurm: --speed must be above 0 and at most {MAX_SPEED:g}, "
            f"--settle 0 to {SETTLE_S:g} seconds",
            file=sys.stderr,
        )
        return 2
    name = (args.scenario or ["slurm-steering"])[0]
    args.scenario = f"builtin:{name}" if name in builtin_scenarios() else name
    try:
        load_scenario(args.scenario)
    except ConfigError as exc:
        print(f"closed_loop --rm slurm: {exc}", file=sys.stderr)
        return 2
    runs = []
    for seed in seed_numbers(args.first_seed, args.seeds):
        runs.append(run_seed(args, seed))
        done = runs[-1]
        print(
            f"closed_loop --rm slurm: run {seed}: ratio {done['ratio']}, harmful "
            f"{done['harmful_actions']}, collateral {done['collateral_harm']}",
            file=sys.stderr,
        )
    print(json.dumps(report(args, runs), indent=None if args.json else 1))
    return 0


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One run of the loop in a directory of its own, removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="toposcope-closed-loop-slurm-"))
    workdir.chmod(0o755)  # slurmrestd runs as nobody and reads the cluster's files
    try:
        return run(args, workdir, seed)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def report(args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one scenario with their summary (worst and mean ratio, harm: as the
    simulator's loop reports them, :func:`loop_seeds.summarize`) and the targets.
    """
    summary = summarize(runs[0]["name"], runs)
    return {
        "summary": [summary],
        "perturb": args.perturb,
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "speed": args.speed,
        "targets": ratio_targets(len(runs)),
        "all_met": summary["met"],
        "min_ratio": summary["worst_ratio"],
        "scenarios": runs,
    }
