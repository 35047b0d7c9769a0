"""The applier's audit log: one SQLite row per action, written before and after each call.

Each row says what (recommendation, action kind, request), who (the actor), when (intent
and result times, UTC), the workload's allocation before, and the result. The intent row is
committed *before* the resource manager is called and the result is written after, so a
crash in between leaves a row without a result; the next run finds it
(:meth:`AuditLog.unresolved`) and asks the resource manager what became of it. Reverts are
rows too, linked both ways (``reverts`` / ``reverted_by``).

Results: ``succeeded``, ``failed``, ``running`` (accepted, not finished), ``unknown`` (the
call's outcome could not be learnt yet), ``not-applied`` (the resource manager never saw it).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toposcope.advisor.sqlite import SqliteStore
from toposcope.errors import ConfigError
from toposcope.resources import ActionRequest, Allocation

SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT NOT NULL UNIQUE,
    recommendation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    workload TEXT NOT NULL,
    node TEXT,
    request_json TEXT NOT NULL,
    actor TEXT NOT NULL,
    backend TEXT NOT NULL,
    intent_at TEXT NOT NULL,
    before_json TEXT,
    result TEXT,
    result_at TEXT,
    action_id TEXT,
    after_json TEXT,
    error TEXT NOT NULL DEFAULT '',
    reverts TEXT,
    reverted_by TEXT
);
CREATE INDEX IF NOT EXISTS actions_recommendation ON actions (recommendation_id);
"""

#: results after which nothing more will happen to an action
FINAL_RESULTS = frozenset({"succeeded", "failed", "not-applied"})


def now_utc() -> str:
    """The current time as ISO 8601 UTC text (seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def allocation_json(allocation: Allocation | None) -> str | None:
    """An allocation as JSON text (``None`` stays ``None``)."""
    return json.dumps(asdict(allocation), sort_keys=True) if allocation is not None else None


def allocation_from_json(text: str | None) -> Allocation | None:
    """The inverse of :func:`allocation_json`."""
    if not text:
        return None
    data = json.loads(text)
    return Allocation(str(data["node"]), list(data["cpus"]), list(data["mems"]), list(data["gpus"]))


@dataclass(frozen=True)
class AuditEntry:
    """One row of the log."""

    seq: int
    request_id: str
    recommendation_id: str
    kind: str
    workload: str
    node: str | None
    request: dict[str, Any]
    actor: str
    backend: str
    intent_at: str
    before: Allocation | None
    result: str | None
    result_at: str | None
    action_id: str | None
    after: Allocation | None
    error: str
    reverts: str | None
    reverted_by: str | None


class AuditLog(SqliteStore):
    """The SQLite audit log at ``path`` (created with its schema on first use)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, SCHEMA, "the audit log")

    def record_intent(
        self,
        recommendation_id: str,
        request: ActionRequest,
        *,
        actor: str,
        backend: str,
        before: Allocation | None,
        reverts: str | None = None,
    ) -> None:
        """Commit the intent to carry out ``request`` (before calling the resource manager).

        A row left ``not-applied`` by an earlier run is reused; any other existing row for
        the request id is an error (the applier checks first).
        """
        body = asdict(request)
        body["kind"] = str(request.kind)
        values = (
            recommendation_id,
            str(request.kind),
            request.workload,
            request.node,
            json.dumps(body, sort_keys=True),
            actor,
            backend,
            now_utc(),
            allocation_json(before),
            reverts,
        )
        with self._connect() as db:
            row = db.execute(
                "SELECT result FROM actions WHERE request_id = ?", (request.request_id,)
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO actions (recommendation_id, kind, workload, node, request_json,"
                    " actor, backend, intent_at, before_json, reverts, request_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*values, request.request_id),
                )
            elif row["result"] == "not-applied":
                db.execute(
                    "UPDATE actions SET recommendation_id = ?, kind = ?, workload = ?, node = ?,"
                    " request_json = ?, actor = ?, backend = ?, intent_at = ?, before_json = ?,"
                    " reverts = ?, result = NULL, result_at = NULL, action_id = NULL,"
                    " after_json = NULL, error = '' WHERE request_id = ?",
                    (*values, request.request_id),
                )
            else:
                raise ConfigError(
                    f"audit log already has action {request.request_id} ({row['result']})"
                )

    def record_result(
        self,
        request_id: str,
        result: str,
        *,
        action_id: str | None = None,
        before: Allocation | None = None,
        after: Allocation | None = None,
        error: str = "",
    ) -> None:
        """Write the outcome of an intent (``before`` replaces the recorded one if given)."""
        with self._connect() as db:
            db.execute(
                "UPDATE actions SET result = ?, result_at = ?, action_id = ?, after_json = ?,"
                " error = ?, before_json = COALESCE(?, before_json) WHERE request_id = ?",
                (
                    result,
                    now_utc(),
                    action_id,
                    allocation_json(after),
                    error,
                    allocation_json(before),
                    request_id,
                ),
            )

    def mark_reverted(self, request_id: str, by: str) -> None:
        """Link an action to the action that reverted it."""
        with self._connect() as db:
            db.execute("UPDATE actions SET reverted_by = ? WHERE request_id = ?", (by, request_id))

    def entry(self, request_id: str) -> AuditEntry | None:
        """The row of ``request_id`` or ``None``."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM actions WHERE request_id = ?", (request_id,)).fetchone()
        return _entry(row) if row is not None else None

    def entries(self, recommendation_id: str | None = None) -> list[AuditEntry]:
        """All rows (of one recommendation when given), oldest first."""
        with self._connect() as db:
            if recommendation_id is None:
                rows = db.execute("SELECT * FROM actions ORDER BY seq").fetchall()
            else:
                rows = db.execute(
                    "SELECT * FROM actions WHERE recommendation_id = ? ORDER BY seq",
                    (recommendation_id,),
                ).fetchall()
        return [_entry(r) for r in rows]

    def unresolved(self) -> list[AuditEntry]:
        """Intents without a final result: crashed mid-call, still running, or unknown."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM actions WHERE result IS NULL OR result IN ('running', 'unknown')"
                " ORDER BY seq"
            ).fetchall()
        return [_entry(r) for r in rows]


def _entry(row: sqlite3.Row) -> AuditEntry:
    return AuditEntry(
        seq=int(row["seq"]),
        request_id=str(row["request_id"]),
        recommendation_id=str(row["recommendation_id"]),
        kind=str(row["kind"]),
        workload=str(row["workload"]),
        node=row["node"],
        request=json.loads(row["request_json"]),
        actor=str(row["actor"]),
        backend=str(row["backend"]),
        intent_at=str(row["intent_at"]),
        before=allocation_from_json(row["before_json"]),
        result=row["result"],
        result_at=row["result_at"],
        action_id=row["action_id"],
        after=allocation_from_json(row["after_json"]),
        error=str(row["error"] or ""),
        reverts=row["reverts"],
        reverted_by=row["reverted_by"],
    )
