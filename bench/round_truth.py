"""What the simulator's truth says of the closed loop's rounds: the throughput of every
workload (:func:`truth`), the jobs counted and their ideals, and each round's applied
recommendations with their targets' true change (:func:`round_actions`), the costs their
actions paid and the estimate each is compared with (:func:`gross_estimate`). The advisor
never reads any of it; it is read in-process to judge the loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toposcope.advisor.outcomes import start_gain
from toposcope.advisor.recommendations import HORIZON_S, cost_seconds
from toposcope.report.decoder import decode_recommendation
from toposcope.report.recommendation import RecommendationKind
from toposcope.rm import ActionKind, ActionStatus, ResourceManagerError
from toposcope.sim.cluster import DONE, SimCluster
from toposcope.sim.judge import HARM_TOLERANCE, useless


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
