"""The closed loop's rounds: a simulated cluster served on loopback, scraped by a real
Prometheus, advised and changed by the real ``toposcope advise --apply`` in a subprocess.

``bench/closed_loop.py`` builds the cluster and the oracle, calls :func:`run_rounds`, and
judges the readings with :mod:`toposcope.sim.judge`. The advisor sees only what a real
deployment shows it (metrics and the resource-manager API); the truth is read in-process.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from collections.abc import Collection, Container, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loop_learning import CALIBRATED, LoopLearning, carry_outcomes, step_counter_metric

from toposcope.advisor.outcomes import start_gain
from toposcope.advisor.recommendations import HORIZON_S, cost_seconds
from toposcope.devtools.procs import Prometheus, instant_query
from toposcope.report.decoder import decode_recommendation
from toposcope.report.recommendation import RecommendationKind
from toposcope.rm import ActionKind, ActionStatus, ResourceManagerError
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import DONE, SimCluster
from toposcope.sim.fabric import SimFabric
from toposcope.sim.gang_api import make_sim_api_app
from toposcope.sim.gang_price import cabled_nics
from toposcope.sim.judge import HARM_TOLERANCE, fallen, useless
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenario_fabric import ScenarioFabric
from toposcope.sim.server import SimServer, file_sd_targets, make_sim_app, write_file_sd
from toposcope.sim.slurm_gangs import GangParts
from toposcope.waiting import NotReadyError, wait_until

#: how long a round waits for every target's last scrape to have succeeded
ROUND_READY_S = 30.0
#: simulated nodes scraped every second at most (more: a longer scrape interval)
NODES_PER_SECOND = 16


@dataclass(frozen=True)
class LoopOptions:
    """How the rounds run: the advisor's window (seconds), the most rounds, the advisor's
    action limits, the Prometheus binary, where to keep each round's report (if at all),
    and whether each round calibrates from the verified outcomes of the rounds before it
    (:mod:`loop_learning`), and what those verdicts measure a job's progress by:
    ``counter`` (each job's step counter, the simulator's ``/jobs/metrics``, as a
    ``--progress-metric``) or ``proxies`` (SM active, link bytes, GPU utilization, cores).
    ``fabric``, for a scenario with gang jobs: the simulator serves its fabric families on
    ``/metrics`` (scraped too) and the advisor's fabric policies read its fabric file.
    ``p2p``: node -> the peer bandwidth file measured on it (:mod:`toposcope.sim.p2p_measure`),
    given to the advisor as ``--p2p-bandwidth``; empty: none measured. ``memory``: node ->
    the memory bandwidth file measured on it (:mod:`toposcope.sim.memory_measure`), given as
    ``--memory-bandwidth``; empty: none measured.
    ``outcome_store``: an outcome log kept across runs (``--learn-across-seeds``): its
    settled outcomes are copied into the run's audit log before round 1 and the run's own
    added to it after the last (:func:`loop_learning.carry_outcomes`); ``rounds_before``:
    the rounds those outcomes came from, so that each round and action also carries its
    ``learning_round`` (its number counted over every run it learned from).
    """

    window: int = 15
    rounds: int = 6
    max_actions: int = 50
    max_actions_per_node: int = 8
    prometheus_binary: str = "prometheus"
    keep_reports: Path | None = None
    learn: bool = True
    progress: str = "counter"
    fabric: ScenarioFabric | None = None
    p2p: Mapping[str, Path] = field(default_factory=dict)
    memory: Mapping[str, Path] = field(default_factory=dict)
    outcome_store: Path | None = None
    rounds_before: int = 0


@contextmanager
def prometheus(
    binary: str,
    workdir: Path,
    targets: Path,
    nodes: int,
    jobs_address: str | None = None,
    fabric_address: str | None = None,
) -> Iterator[str]:
    """A real Prometheus scraping the file_sd ``targets`` every :func:`scrape_interval_s`
    seconds, and the jobs' step counters at ``jobs_address`` (``/jobs/metrics``) and the
    cluster page at ``fabric_address`` when given, each as a scrape job of its own; yields
    its URL once every target (every simulated node, and those pages) has been scraped, so
    that a loaded machine's first round never runs on a Prometheus that has not read the
    fabric yet.
    """
    scrape_configs: list[dict[str, Any]] = [
        {
            "job_name": "toposcope-sim",
            "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
        }
    ]
    if jobs_address is not None:
        scrape_configs.append(
            {
                "job_name": "toposcope-sim-jobs",
                "metrics_path": "/jobs/metrics",
                "static_configs": [{"targets": [jobs_address]}],
            }
        )
    if fabric_address is not None:  # the fabric and its multi-node jobs' spread
        scrape_configs.append(
            {
                "job_name": "toposcope-sim-fabric",
                "static_configs": [{"targets": [fabric_address]}],
            }
        )
    server = Prometheus(
        workdir, scrape_configs, interval=f"{scrape_interval_s(nodes)}s", binary=binary
    )
    with server.run():
        expected = scraped_targets(nodes, jobs_address, fabric_address)
        wait_until(
            lambda: every_target_up(server.url, expected),
            60,
            what="every simulated node and cluster page scraped",
        )
        yield server.url


def scrape_interval_s(nodes: int) -> int:
    """Seconds between two scrapes of a node: 1 for up to :data:`NODES_PER_SECOND` nodes,
    then one more second per as many nodes again. Every simulated node's exporter runs in the
    loop's one process; forty of them every second (``large``'s sample) outran two cores,
    scrapes timed out and rounds read nodes as gone.
    """
    return max(1, math.ceil(nodes / NODES_PER_SECOND))


def every_target_up(url: str, expected: int) -> bool:
    """Whether the last scrape of each of the ``expected`` simulated targets (the nodes and
    the loop's own pages) succeeded. A failed scrape marks the target's series stale, so an
    advisor run right after one reads that node as gone ("no series" for everything when
    every scrape failed, as a loaded machine's one-second scrapes can).
    """
    result = instant_query(url, 'count(up{job=~"toposcope-sim.*"} == 1)')
    return bool(result) and int(float(result[0]["value"][1])) == expected


def scraped_targets(nodes: int, *pages: str | None) -> int:
    """How many targets the loop's Prometheus scrapes: the nodes and each page given."""
    return nodes + sum(1 for page in pages if page is not None)


def await_fresh_scrapes(url: str, expected: int, deadline_s: float = ROUND_READY_S) -> None:
    """Wait until every target's last scrape succeeded before a round reads the metrics
    (:func:`every_target_up`); past ``deadline_s`` the round runs on what there is and the
    loop says so on stderr, as a daemon logs and goes on.
    """
    try:
        wait_until(lambda: every_target_up(url, expected), deadline_s, what="fresh scrapes")
    except NotReadyError as exc:
        print(f"closed loop: a round runs on stale targets: {exc}", file=sys.stderr)


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


def run_advisor(
    prom_url: str,
    sim_url: str,
    token_file: Path,
    audit_db: Path,
    window_s: int,
    options: LoopOptions,
    calibrate_from: Path | None = None,
) -> tuple[dict[str, Any], dict[str, str], float]:
    """One ``toposcope advise --apply`` run (its estimates calibrated from the outcome log
    ``calibrate_from`` when given): (JSON report, outcome by id, seconds).
    """
    argv = [
        sys.executable, "-m", "toposcope.cli", "advise",
        "--prometheus", prom_url, "--window", f"{window_s}s", "--format", "json",
        "--apply", "--resource-manager", "sim", "--rm-url", sim_url,
        "--rm-token-file", str(token_file), "--audit-db", str(audit_db),
        "--max-actions", str(options.max_actions),
        "--max-actions-per-node", str(options.max_actions_per_node),
    ]  # fmt: skip
    if calibrate_from is not None:
        argv += ["--calibrate-from", str(calibrate_from)]
    argv += fabric_settings(options.fabric)
    for node, path in sorted(options.p2p.items()):
        argv += ["--p2p-bandwidth", f"{node}={path}"]
    for node, path in sorted(options.memory.items()):
        argv += ["--memory-bandwidth", f"{node}={path}"]
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
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"toposcope advise printed no JSON report: {done.stderr[-2000:]}"
        ) from None
    return report, outcomes, seconds


def fabric_settings(fabric: ScenarioFabric | None) -> list[str]:
    """The advisor's fabric settings for a scenario with a fabric file: fabric-placement and
    nic-affinity read it (the documented ``fabric_file`` way), and a gang without a time
    limit is priced over the advisor's own horizon by both (the simulated jobs run until
    stopped).
    """
    if fabric is None or fabric.file is None:
        return []
    file = str(fabric.file)
    return [
        "--set", f"fabric-placement.fabric_file={file}",
        "--set", "fabric-placement.fabric_format=file",
        "--set", f"fabric-placement.unknown_time_left_s={HORIZON_S:g}",
        "--set", f"nic-affinity.fabric_file={file}",
        "--set", f"nic-affinity.unknown_time_left_s={HORIZON_S:g}",
    ]  # fmt: skip


def gang_parts(cluster: SimCluster) -> dict[str, tuple[str, ...]]:
    """Each gang job's parts (a move of a gang names the gang, the truth its parts)."""
    book = cluster.gangs
    return {name: gang.parts for name, gang in book.gangs.items()} if book is not None else {}


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


def applied_costs(cluster: SimCluster) -> dict[str, float]:
    """Seconds each workload stood still for the moves carried out so far (a migrate's
    checkpoint-restore, for every part of a gang job when one part moves; pins and page
    migrations let the job run on).
    """
    paused: dict[str, float] = {}
    book = cluster.gangs
    for state in cluster.recorded():
        if state.status is ActionStatus.SUCCEEDED and state.request.kind is ActionKind.MIGRATE:
            name = state.request.workload
            # a gang's part that moves stops every rank of its gang for as long
            for stopped in (name, *(book.siblings(name) if book is not None else ())):
                paused[stopped] = paused.get(stopped, 0.0) + state.cost_seconds
    return paused


def gross_estimate(rec: Mapping[str, Any]) -> float:
    """A report recommendation's estimate before its checkpoint-restores are paid (a job
    move's true gain is measured once it runs again, so it is compared with this), without
    the start of a pending job its move makes possible (``proposed.starts``: the move's
    targets' true change does not hold it).
    """
    estimate = float(rec["estimated_gain"])
    if rec.get("kind") != str(RecommendationKind.MIGRATE_JOB):
        return estimate
    decoded = decode_recommendation(rec)
    cost = cost_seconds(decoded.kind, decoded.proposed, decoded.actions) / HORIZON_S
    return estimate + cost - start_gain(decoded)


def round_actions(
    number: int,
    recs: Mapping[str, Any],
    applied: set[str],
    current: Mapping[str, float],
    after: Mapping[str, float],
    gangs: Mapping[str, tuple[str, ...]] | None = None,
) -> list[dict[str, Any]]:
    """One round's applied recommendations with their targets' true change. A target that
    finished within the round (absent from ``after``) says nothing of the action: its
    change is ``None``, neither harmful nor useless, and it is marked ``finished``. A gang
    target (a key of ``gangs``) is the sum of its parts, and its parts are its ``parts``; a
    joint move of several jobs (``proposed["joint"]``) is the sum of every part it moves.
    """
    actions = []
    for rec_id in sorted(applied, key=lambda i: -recs[i]["estimated_gain"]):
        rec = recs[rec_id]
        target = rec["target"].get("workload") or ""
        parts = joint_parts(rec) or (gangs or {}).get(target, (target,))
        finished = any(p not in after for p in parts)
        was = sum(current.get(p, 0.0) for p in parts)
        now = sum(after.get(p, 0.0) for p in parts)
        actual: float | None = now / was - 1.0 if was > 0 and not finished else None
        actions.append(
            {
                "round": number,
                "id": rec_id,
                "kind": rec["kind"],
                "policy": rec["policy"],
                "severity": rec.get("severity"),
                "workload": target,
                "parts": list(parts),
                "target": f"{rec['target'].get('node')}/{target}",
                "estimated_gain": round(rec["estimated_gain"], 4),
                "estimated_gross_gain": round(gross_estimate(rec), 4),
                "actual_gain": None if actual is None else round(actual, 4),
                "throughput_before": round(was, 3),
                "throughput_after": round(now, 3),
                "harmful": not finished and now < was * (1.0 - HARM_TOLERANCE),
                "useless": useless(actual),
                "finished": finished,
            }
        )
    return actions


def joint_parts(rec: Mapping[str, Any]) -> tuple[str, ...]:
    """Every part a joint move of several jobs names (empty for any other recommendation)."""
    proposed = rec.get("proposed") or {}
    if proposed.get("joint") is not True:
        return ()
    return tuple(p["part"] for job in proposed.get("jobs") or () for p in job.get("parts") or ())


def serve(
    cluster: SimCluster,
    workdir: Path,
    fabric: ScenarioFabric | None = None,
    network: Container[str] = frozenset(),
    cabled: Mapping[str, Collection[str]] | None = None,
) -> tuple[SimServer, SimExporters, Path, str]:
    """Serve the cluster on loopback (with ``fabric``'s families on ``/metrics``; the NICs
    carry the traffic of the workloads in ``network`` through those ``fabric``, else
    ``cabled``, cables to a switch): (server, exporters, token file, address).
    """
    served = SimFabric(fabric) if fabric is not None else None
    if fabric is not None:
        cabled = cabled_nics(fabric.fabric)
    exporters = SimExporters(
        cluster, workdir / "state", background=False, network=network, cabled=cabled
    )
    token = secrets.token_hex(16)
    token_file = workdir / "token"
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)
    server = SimServer(
        make_sim_app(cluster, exporters, make_sim_api_app(cluster, token), fabric=served),
        "127.0.0.1:0",
    )
    address = server.address
    api = make_sim_api_app(cluster, token)
    server.set_app(make_sim_app(cluster, exporters, api, address, fabric=served))
    server.start()
    write_file_sd(workdir / "targets.json", file_sd_targets(cluster.node_names(), address))
    return server, exporters, token_file, address


def run_rounds(
    cluster: SimCluster,
    clock: SimClock,
    ideal: Mapping[str, float],
    options: LoopOptions,
    workdir: Path,
    label: str,
) -> tuple[dict[str, float], dict[str, float], list[dict[str, Any]], list[dict[str, Any]]]:
    """The advisor's rounds against the served cluster: (truth before, truth after,
    rounds, actions); every counted job whose truth fell in a round is recorded. When
    ``options.learn``, each round's advisor calibrates from the verified outcomes of the
    rounds before it, each round records the calibration it ran with, and each action
    its verdict and measured gain (:mod:`loop_learning`).
    """
    # the gangs' parts send through their nodes' NICs, where the advisor measures their load
    server, exporters, token_file, address = serve(
        cluster, workdir, options.fabric, network=GangParts(cluster)
    )
    gangs = gang_parts(cluster)
    audit_db = workdir / "audit.sqlite"
    store = options.outcome_store if options.learn else None
    if store is not None:  # what earlier runs learned, as a kept audit log holds it
        carry_outcomes(store, audit_db)
    window = options.window
    rounds: list[dict[str, Any]] = []
    actions: list[dict[str, Any]] = []
    try:
        for node in cluster.node_names():  # write every tree before the clock runs
            exporters.scrape(node)
        clock.set_speed(1.0)
        targets = workdir / "targets.json"
        nodes = len(cluster.node_names())
        counter = options.progress == "counter"
        jobs_address = address if counter else None
        fabric_address = address if options.fabric is not None else None
        with prometheus(
            options.prometheus_binary, workdir, targets, nodes, jobs_address, fabric_address
        ) as url:
            time.sleep(window + 2)
            before = truth(cluster)
            current = dict(before)
            metrics = step_counter_metric(window) if counter else ()
            learning = LoopLearning(audit_db, url, window, metrics) if options.learn else None
            applied: set[str] = set()
            expected = scraped_targets(nodes, jobs_address, fabric_address)
            for number in range(1, options.rounds + 1):
                await_fresh_scrapes(url, expected)
                model = learning.observe(time.time()) if learning is not None else None
                in_effect = learning.factors() if learning is not None else {}
                cells = learning.cells() if learning is not None else []
                report, outcomes, seconds = run_advisor(
                    url,
                    f"http://{address}",
                    token_file,
                    audit_db,
                    window,
                    options,
                    calibrate_from=audit_db if learning is not None else None,
                )
                if options.keep_reports is not None:
                    keep = options.keep_reports
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / f"{label}-round{number}.json").write_text(json.dumps(report, indent=1))
                applied = {i for i, text in outcomes.items() if text.startswith("applied")}
                recs = {r["id"]: r for r in report["recommendations"]}
                if learning is not None and model is not None:
                    learning.record(report["recommendations"], applied, model, time.time())
                cluster.advance(action_costs(audit_db, applied, cluster) + 1.0)
                after_round = truth(cluster)
                done = round_actions(number, recs, applied, current, after_round, gangs)
                for action in done:
                    action["learning_round"] = options.rounds_before + number
                actions.extend(done)
                targets_hit = {p for a in done for p in a["parts"]}
                fell = fallen(current, after_round, ideal)
                severities = sorted({str(r.get("severity")) for r in recs.values()})
                rounds.append(
                    {
                        "round": number,
                        "learning_round": options.rounds_before + number,
                        "recommendations": len(recs),
                        "severities": severities,
                        "applied": len(applied),
                        "advise_seconds": round(seconds, 2),
                        "calibration_in_effect": in_effect,
                        "cells_in_effect": cells,
                        "calibrated_recommendations": sum(
                            1 for r in recs.values() if CALIBRATED in r.get("gain_model", "")
                        ),
                        "aggregate": round(aggregate(after_round, ideal), 4),
                        "targets_fallen": [n for n in fell if n in targets_hit],
                        "collateral": [n for n in fell if n not in targets_hit],
                    }
                )
                current = after_round
                if not applied:
                    break
                time.sleep(window + 2)
            after = truth(cluster)
            if learning is not None:
                if applied:  # the last round's changes, one window on
                    learning.observe(time.time())
                found = learning.verdicts(a["id"] for a in actions)
                for action in actions:
                    action.update(found.get(action["id"], {}))
                if store is not None:
                    carry_outcomes(audit_db, store, f"{label}:")
    finally:
        server.shutdown()
        exporters.close()
    return before, after, rounds, actions
