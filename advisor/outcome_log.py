"""The outcome log: when each of the advisor service's recommendations was first seen and,
for the ones it applied, their verification (baseline, latest measurement, verdict).

Both are kept in the audit log's SQLite file, beside its ``actions`` table, so that a
restarted service carries on. A file written by an earlier release opens as it is: the
columns added since are added to it (:data:`ADDED_COLUMNS`) and verdicts stored under
earlier names are renamed in place.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

from toposcope.advisor.calibration_cells import Cell, cell_of, gross_prior
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.sqlite import SqliteStore
from toposcope.advisor.verification_rule import (
    NUMA_KINDS,
    destination,
    made_for,
    start_gain,
    target_numa,
)
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import (
    LEGACY_VERDICTS,
    JobOutcome,
    Measurement,
    Verdict,
    Verification,
)
from toposcope.report.recommendation import Recommendation

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
ADDED_COLUMNS = {
    "estimated_gain": "REAL",
    "target_node": "TEXT NOT NULL DEFAULT ''",
    "gpus_json": "TEXT NOT NULL DEFAULT '[]'",
    "measured_gain": "REAL",
    "policy": "TEXT NOT NULL DEFAULT ''",
    "node_type": "TEXT NOT NULL DEFAULT ''",
    "link_tier": "TEXT NOT NULL DEFAULT ''",
    "prior_gain": "REAL",
    "jobs_json": "TEXT NOT NULL DEFAULT '[]'",
    "made_for": "TEXT NOT NULL DEFAULT ''",
}
#: ``target_numa`` of a kind that moves no memory (the column is NOT NULL)
NO_NUMA = -1


class OutcomeLog(SqliteStore):
    """The ``recommendation_seen`` and ``verifications`` tables in the SQLite file ``path``."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, SCHEMA, "the outcome tables in")
        with self._connect() as db:
            have = {row["name"] for row in db.execute("PRAGMA table_info(verifications)")}
            for column, kind in ADDED_COLUMNS.items():
                if column not in have:
                    db.execute(f"ALTER TABLE verifications ADD COLUMN {column} {kind}")
            _rename_legacy_verdicts(db)

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

    def start(
        self,
        rec: Recommendation,
        before: Measurement,
        applied_at: float,
        model: ClusterModel | None = None,
        jobs: Sequence[JobOutcome] = (),
    ) -> None:
        """Record that ``rec`` was applied, with its baseline (a verification restarts), its
        calibration cell (node type and link tier from ``model``, the analysis it came from),
        its prior estimate (:mod:`toposcope.advisor.calibration_cells`), the job a clearing
        made room for (``proposed.for``) and, when it changes several jobs, each with its own
        baseline (:func:`~toposcope.advisor.joint_verification.job_baselines`; a clearing's:
        :func:`~toposcope.advisor.clearing_verification.clearing_jobs`).
        """
        numa = target_numa(rec) if rec.kind in NUMA_KINDS else None
        if (numa is None and rec.kind in NUMA_KINDS) or not rec.target.workload:
            raise ConfigError(f"{rec.id}: no target NUMA node or workload to verify")
        node, gpus = destination(rec)
        _, policy, kind_of_node, tier = cell_of(rec, model, node, gpus)
        verdict, detail, verified_at = Verdict.PENDING, "", None
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO verifications (recommendation_id, kind, node, workload,"
                " target_numa, applied_at, baseline_json, verdict, measured_json, verified_at,"
                " detail, estimated_gain, target_node, gpus_json, measured_gain, policy,"
                " node_type, link_tier, prior_gain, jobs_json, made_for)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)",
                (
                    rec.id,
                    str(rec.kind),
                    rec.target.node,
                    rec.target.workload,
                    NO_NUMA if numa is None else numa,
                    applied_at,
                    json.dumps(before.to_dict(), sort_keys=True),
                    str(verdict),
                    verified_at,
                    detail,
                    rec.estimated_gain - start_gain(rec),
                    node,
                    json.dumps(list(gpus)),
                    policy,
                    kind_of_node,
                    tier,
                    gross_prior(rec) - start_gain(rec),
                    _jobs_json(jobs),
                    made_for(rec) or "",
                ),
            )

    def settle(
        self,
        rec_id: str,
        verdict: Verdict,
        measured: Measurement | None,
        detail: str,
        now: float,
        measured_gain: float | None = None,
        jobs: Sequence[JobOutcome] | None = None,
    ) -> None:
        """Write a verdict (``pending`` too: the latest measurement and why it is pending)
        with the gain it measured, if any, and each changed job's figures (``None``: kept).
        """
        with self._connect() as db:
            db.execute(
                "UPDATE verifications SET verdict = ?, measured_json = ?, verified_at = ?,"
                " detail = ?, measured_gain = ? WHERE recommendation_id = ?",
                (
                    str(verdict),
                    json.dumps(measured.to_dict(), sort_keys=True) if measured else None,
                    now,
                    detail,
                    measured_gain,
                    rec_id,
                ),
            )
            if jobs is not None:
                db.execute(
                    "UPDATE verifications SET jobs_json = ? WHERE recommendation_id = ?",
                    (_jobs_json(jobs), rec_id),
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

    def cells(self) -> dict[str, tuple[Cell, float | None]]:
        """Each verification's calibration cell and prior estimate (``None``: recorded
        before priors were kept), by recommendation id.
        """
        with self._connect() as db:
            rows = db.execute(
                "SELECT recommendation_id, kind, policy, node_type, link_tier, prior_gain"
                " FROM verifications"
            ).fetchall()
        return {
            str(r["recommendation_id"]): (
                (str(r["kind"]), str(r["policy"]), str(r["node_type"]), str(r["link_tier"])),
                float(r["prior_gain"]) if r["prior_gain"] is not None else None,
            )
            for r in rows
        }

    def pending(self) -> list[Verification]:
        """Verifications without a final verdict."""
        return [v for v in self.all() if v.verdict == Verdict.PENDING]


def _rename_legacy_verdicts(db: sqlite3.Connection) -> None:
    """Store the verdicts an earlier release wrote under their current names (written only
    where there is one, so that a log without any opens without a write).
    """
    old = sorted(LEGACY_VERDICTS)
    marks = ",".join("?" for _ in old)
    found = db.execute(f"SELECT 1 FROM verifications WHERE verdict IN ({marks}) LIMIT 1", old)
    if found.fetchone() is not None:
        db.executemany(
            "UPDATE verifications SET verdict = ? WHERE verdict = ?",
            [(str(LEGACY_VERDICTS[name]), name) for name in old],
        )


def _jobs_json(jobs: Sequence[JobOutcome]) -> str:
    return json.dumps([j.to_dict() for j in jobs], sort_keys=True)


def _verification(row: sqlite3.Row) -> Verification:
    measured = row["measured_json"]
    return Verification(
        recommendation_id=str(row["recommendation_id"]),
        kind=str(row["kind"]),
        node=str(row["node"]),
        workload=str(row["workload"]),
        target_numa=None if int(row["target_numa"]) == NO_NUMA else int(row["target_numa"]),
        applied_at=float(row["applied_at"]),
        baseline=Measurement.from_dict(json.loads(row["baseline_json"])) or Measurement(),
        verdict=Verdict(row["verdict"]),
        measured=Measurement.from_dict(json.loads(measured)) if measured else None,
        verified_at=float(row["verified_at"]) if row["verified_at"] is not None else None,
        detail=str(row["detail"] or ""),
        estimated_gain=(
            float(row["estimated_gain"]) if row["estimated_gain"] is not None else None
        ),
        target_node=str(row["target_node"] or row["node"]),
        gpus=tuple(int(g) for g in json.loads(row["gpus_json"] or "[]")),
        measured_gain=(float(row["measured_gain"]) if row["measured_gain"] is not None else None),
        jobs=tuple(JobOutcome.from_json(j) for j in json.loads(row["jobs_json"] or "[]")),
        made_for=str(row["made_for"] or ""),
    )
