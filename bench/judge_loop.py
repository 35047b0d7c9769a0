"""The closed loop's rounds: a simulated cluster served on loopback, scraped by a real
Prometheus, advised and changed by the real ``toposcope advise --apply`` in a subprocess.

``bench/closed_loop.py`` builds the cluster and the oracle, calls :func:`run_rounds`, and
judges the readings with :mod:`toposcope.sim.judge`. The advisor sees only what a real
deployment shows it (metrics and the resource-manager API); the truth is read in-process.

The pieces live beside it: the options (:mod:`loop_options`), the served cluster and its
Prometheus (:mod:`loop_scraping`), one advisor run (:mod:`loop_advisor`) and what the truth says
of each round (:mod:`round_truth`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loop_advisor import run_advisor
from loop_learning import CALIBRATED, LoopLearning, carry_outcomes, step_counter_metric
from loop_options import LoopOptions
from loop_scraping import await_fresh_scrapes, prometheus, scraped_targets, serve
from round_truth import action_costs, aggregate, gang_parts, round_actions, truth

from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.judge import fallen
from toposcope.sim.slurm_gangs import GangParts


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
