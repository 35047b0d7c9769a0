"""What became of the advisor service's recommendations: when each was first seen and, for
the ones it applied, whether the change helped.

Both are kept in the audit log's SQLite file, beside its ``actions`` table, so that a
restarted service carries on: ages keep counting from the first sighting, and applied
changes still waiting for a verdict are still checked.

Verification rule (also in docs/policies.md, "Verifying applied recommendations"). It covers
``pin`` and ``migrate-memory`` recommendations, whose effect shows in the workload's own
series; other kinds are not verified. At apply time the service records a *baseline*:

* the remote share the recommendation was made from (its ``current`` shares on the target
  NUMA node: ``1 - c*m`` for a pin, ``1 - m`` for a memory migration);
* the CPU cores the workload kept busy and the mean utilization of its GPUs, from the
  analysis the recommendation came from (throughput proxies: toposcope sees no job's
  progress, but a CPU-starved or input-starved job uses fewer cores or less GPU).

From ``verify_after`` seconds after applying (default: the analysis window, so that the
window holds only samples taken after the change), every analysis measures the same figures
and decides, with ``h`` the harm threshold (0.10) and ``e`` the effective share (0.5):

* **harmful** when the cores used fell below ``(1 - h)`` of the baseline (baseline at least
  ``min_cores``), or the GPU utilization fell below ``(1 - h)`` of it (baseline at least
  0.05), or the remote share rose by more than ``h``. The service reverts the change.
* **effective** when the remote share fell to ``(1 - e)`` of the baseline or less;
* **ineffective** otherwise (the change stays; the policy's model was too optimistic);
* **pending** while the workload has no series yet; **unverifiable** when it still has none
  ``give_up`` seconds after applying (the workload ended, or is no longer exported);
* **reverted** when a person reverted the change before a verdict.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toposcope.advisor.locality import remote_share
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.sqlite import SqliteStore
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import Measurement, Verdict, Verification
from toposcope.report.recommendation import Recommendation, RecommendationKind

SCHEMA = """
CREATE TABLE IF NOT EXISTS recommendation_seen (
    recommendation_id TEXT PRIMARY KEY,
    first_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS verifications (
    recommendation_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    node TEXT NOT NULL,
    workload TEXT NOT NULL,
    target_numa INTEGER NOT NULL,
    applied_at REAL NOT NULL,
    baseline_json TEXT NOT NULL,
    verdict TEXT NOT NULL,
    measured_json TEXT,
    verified_at REAL,
    detail TEXT NOT NULL DEFAULT '',
    estimated_gain REAL
);
"""
#: columns added after the first release, with their type (added to older files on open)
ADDED_COLUMNS = {"estimated_gain": "REAL"}

#: recommendation kinds whose effect the service measures after applying them
VERIFIED_KINDS = frozenset({RecommendationKind.PIN, RecommendationKind.MIGRATE_MEMORY})

#: GPU utilization below which a fall says nothing about a slow-down
MIN_GPU_UTILIZATION = 0.05


@dataclass(frozen=True)
class VerificationRule:
    """The thresholds of the verification rule (see the module docstring)."""

    verify_after_seconds: float
    harm_threshold: float = 0.10
    effective_share: float = 0.5
    min_cores: float = 0.05
    give_up_seconds: float = 86400.0

    def __post_init__(self) -> None:
        problems = []
        if self.verify_after_seconds < 0:
            problems.append("verify-after must be >= 0")
        if not 0 < self.harm_threshold < 1:
            problems.append("harm threshold must be between 0 and 1")
        if not 0 < self.effective_share <= 1:
            problems.append("effective share must be in (0, 1]")
        if self.min_cores < 0:
            problems.append("min cores must be >= 0")
        if self.give_up_seconds < self.verify_after_seconds:
            problems.append("give-up time must not be shorter than verify-after")
        if problems:
            raise ConfigError("; ".join(problems))


def target_numa(rec: Recommendation) -> int | None:
    """The NUMA node a pin or memory migration moves the workload to (``proposed.mems``)."""
    mems = rec.proposed.get("mems")
    if isinstance(mems, list | tuple) and mems:
        return int(mems[0])
    numa = rec.proposed.get("numa_node")
    return int(numa) if numa is not None else None


def _shares(data: Any) -> dict[int, float]:
    if not isinstance(data, Mapping):
        return {}
    return {int(k): float(v) for k, v in data.items()}


def _remote(
    kind: str, cpu: Mapping[int, float], memory: Mapping[int, float], numa: int
) -> float | None:
    if kind == RecommendationKind.MIGRATE_MEMORY:
        return 1.0 - memory.get(numa, 0.0) if memory else None
    if not cpu and not memory:
        return None
    return remote_share(cpu, memory, numa)


def find_workload(model: ClusterModel, node: str, name: str) -> WorkloadModel | None:
    """The workload ``name`` on ``node`` in ``model``, or ``None``."""
    return next((w for w in model.workloads if w.node == node and w.name == name), None)


def measure(model: ClusterModel, kind: str, workload: WorkloadModel, numa: int) -> Measurement:
    """The workload's figures in ``model`` (see :class:`Measurement`)."""
    node = model.node(workload.node)
    utilizations = []
    if node is not None:
        for index in workload.gpus:
            gpu = node.gpu(index)
            if gpu is not None and gpu.utilization is not None:
                utilizations.append(gpu.utilization)
    return Measurement(
        remote_share=_remote(kind, workload.cpu_shares(), workload.memory_shares(), numa),
        cores=workload.cores_used(),
        gpu_utilization=sum(utilizations) / len(utilizations) if utilizations else None,
    )


def baseline(rec: Recommendation, model: ClusterModel | None) -> Measurement:
    """The figures before applying ``rec``: its own shares, and the model's cores and GPUs."""
    numa = target_numa(rec)
    cpu = _shares(rec.current.get("cpu_share_by_numa"))
    memory = _shares(rec.current.get("memory_share_by_numa"))
    remote = _remote(str(rec.kind), cpu, memory, numa) if numa is not None else None
    workload = (
        find_workload(model, rec.target.node, rec.target.workload)
        if model is not None and rec.target.workload
        else None
    )
    if workload is None or model is None or numa is None:
        return Measurement(remote_share=remote)
    now = measure(model, str(rec.kind), workload, numa)
    return Measurement(remote, now.cores, now.gpu_utilization)


def judge(rule: VerificationRule, before: Measurement, after: Measurement) -> tuple[Verdict, str]:
    """The verdict on a change from its baseline and a later measurement, with the reason."""
    h = rule.harm_threshold
    harms = []
    if (
        before.cores is not None
        and before.cores >= rule.min_cores
        and after.cores is not None
        and after.cores < before.cores * (1 - h)
    ):
        harms.append(f"CPU cores used fell from {before.cores:.2f} to {after.cores:.2f}")
    if (
        before.gpu_utilization is not None
        and before.gpu_utilization >= MIN_GPU_UTILIZATION
        and after.gpu_utilization is not None
        and after.gpu_utilization < before.gpu_utilization * (1 - h)
    ):
        harms.append(
            f"GPU utilization fell from {before.gpu_utilization:.0%} to {after.gpu_utilization:.0%}"
        )
    if (
        before.remote_share is not None
        and after.remote_share is not None
        and after.remote_share > before.remote_share + h
    ):
        harms.append(
            f"remote share rose from {before.remote_share:.0%} to {after.remote_share:.0%}"
        )
    if harms:
        return Verdict.HARMFUL, "; ".join(harms)
    if before.remote_share is None or after.remote_share is None:
        return Verdict.PENDING, "no locality figure to compare yet"
    change = f"remote share {before.remote_share:.0%} -> {after.remote_share:.0%}"
    if after.remote_share <= before.remote_share * (1 - rule.effective_share):
        return Verdict.EFFECTIVE, change
    return Verdict.INEFFECTIVE, f"{change}: less than {rule.effective_share:.0%} of it removed"


class OutcomeLog(SqliteStore):
    """The ``recommendation_seen`` and ``verifications`` tables in the SQLite file ``path``."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, SCHEMA, "the outcome tables in")
        with self._connect() as db:
            have = {row["name"] for row in db.execute("PRAGMA table_info(verifications)")}
            for column, kind in ADDED_COLUMNS.items():
                if column not in have:
                    db.execute(f"ALTER TABLE verifications ADD COLUMN {column} {kind}")

    def first_seen(self, ids: Iterable[str], now: float) -> dict[str, float]:
        """Since when each of ``ids`` (the open recommendations) has been open.

        New ids are stored with ``now``; ids no longer open are forgotten, so a
        recommendation that goes away and comes back counts its age afresh.
        """
        wanted = sorted(set(ids))
        with self._connect() as db:
            marks = ",".join("?" for _ in wanted)
            db.execute(
                f"DELETE FROM recommendation_seen WHERE recommendation_id NOT IN ({marks})",
                wanted,
            )
            db.executemany(
                "INSERT OR IGNORE INTO recommendation_seen (recommendation_id, first_seen)"
                " VALUES (?, ?)",
                [(rec_id, now) for rec_id in wanted],
            )
            seen: dict[str, float] = {}
            for rec_id in wanted:
                row = db.execute(
                    "SELECT first_seen FROM recommendation_seen WHERE recommendation_id = ?",
                    (rec_id,),
                ).fetchone()
                seen[rec_id] = float(row["first_seen"])
        return seen

    def start(self, rec: Recommendation, before: Measurement, applied_at: float) -> None:
        """Record that ``rec`` was applied, with its baseline (a verification restarts)."""
        numa = target_numa(rec)
        if numa is None or not rec.target.workload:
            raise ConfigError(f"{rec.id}: no target NUMA node or workload to verify")
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO verifications (recommendation_id, kind, node, workload,"
                " target_numa, applied_at, baseline_json, verdict, measured_json, verified_at,"
                " detail, estimated_gain) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, '', ?)",
                (
                    rec.id,
                    str(rec.kind),
                    rec.target.node,
                    rec.target.workload,
                    numa,
                    applied_at,
                    json.dumps(before.to_dict(), sort_keys=True),
                    str(Verdict.PENDING),
                    rec.estimated_gain,
                ),
            )

    def settle(
        self,
        rec_id: str,
        verdict: Verdict,
        measured: Measurement | None,
        detail: str,
        now: float,
    ) -> None:
        """Write a verdict (``pending`` too: the latest measurement and why it is pending)."""
        with self._connect() as db:
            db.execute(
                "UPDATE verifications SET verdict = ?, measured_json = ?, verified_at = ?,"
                " detail = ? WHERE recommendation_id = ?",
                (
                    str(verdict),
                    json.dumps(measured.to_dict(), sort_keys=True) if measured else None,
                    now,
                    detail,
                    rec_id,
                ),
            )

    def get(self, rec_id: str) -> Verification | None:
        """The verification of ``rec_id`` or ``None``."""
        with self._connect() as db:
            row = db.execute(
                "SELECT * FROM verifications WHERE recommendation_id = ?", (rec_id,)
            ).fetchone()
        return _verification(row) if row is not None else None

    def all(self) -> list[Verification]:
        """Every verification, oldest application first."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM verifications ORDER BY applied_at").fetchall()
        return [_verification(r) for r in rows]

    def pending(self) -> list[Verification]:
        """Verifications without a final verdict."""
        return [v for v in self.all() if v.verdict == Verdict.PENDING]


def _verification(row: sqlite3.Row) -> Verification:
    measured = row["measured_json"]
    return Verification(
        recommendation_id=str(row["recommendation_id"]),
        kind=str(row["kind"]),
        node=str(row["node"]),
        workload=str(row["workload"]),
        target_numa=int(row["target_numa"]),
        applied_at=float(row["applied_at"]),
        baseline=Measurement.from_dict(json.loads(row["baseline_json"])) or Measurement(),
        verdict=Verdict(row["verdict"]),
        measured=Measurement.from_dict(json.loads(measured)) if measured else None,
        verified_at=float(row["verified_at"]) if row["verified_at"] is not None else None,
        detail=str(row["detail"] or ""),
        estimated_gain=(
            float(row["estimated_gain"]) if row["estimated_gain"] is not None else None
        ),
    )
