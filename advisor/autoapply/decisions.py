"""The automatic loop's decisions, kept in the audit log's SQLite file.

Every decision the loop takes about a recommendation is one row: when, which
recommendation (kind, node, workload, the namespace or account it counts against), what
it decided (:data:`APPLIED`, :data:`DRY_RUN`, :data:`WOULD_APPLY`, :data:`SKIPPED`,
:data:`FAILED`...) and why. The rate limits count the rows that reached the resource
manager (:data:`ACTED`), so that a restart neither forgets the last hour nor starts a
fresh cool-down; the API and ``/metrics`` read the same rows. Rows older than the loop's
retention (30 days, or the cool-down when longer) are pruned at each tick. A stop through the API is
kept there too (``auto_switch``): a restarted service stays stopped until resumed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from toposcope.advisor.sqlite import SqliteStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS auto_decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    recommendation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    node TEXT NOT NULL,
    workload TEXT NOT NULL,
    grp TEXT NOT NULL,
    decision TEXT NOT NULL,
    reason TEXT NOT NULL,
    code TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS auto_decisions_at ON auto_decisions (at);
CREATE TABLE IF NOT EXISTS auto_switch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    by TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL
);
"""

#: decisions: applied through the resource manager, rehearsed through the dry-run backend,
#: recorded only (``dry_run_only``), left alone (the reason says why), failed (the applier's
#: outcome was neither applied nor skipped), stopped (the kill switch between two actions)
APPLIED = "applied"
DRY_RUN = "dry-run"
WOULD_APPLY = "would-apply"
SKIPPED = "skipped"
FAILED = "failed"
#: every decision the metrics export, even at zero
DECISIONS = (APPLIED, DRY_RUN, WOULD_APPLY, SKIPPED, FAILED)
#: decisions that reached the resource manager: what the rate limits and cool-down count
ACTED = frozenset({APPLIED, FAILED})


@dataclass(frozen=True)
class Decision:
    """One decision of the loop (see the module docstring); ``at`` is Unix seconds and
    ``group`` the namespace or Slurm account the workload counts against (may be empty),
    ``code`` the refusal's code of a skipped one (:data:`~.limits.CODES`, or ``applier``,
    ``dry-run``, ``stopped``).
    """

    at: float
    recommendation_id: str
    kind: str
    node: str
    workload: str
    group: str
    decision: str
    reason: str
    code: str = ""

    def to_dict(self) -> dict[str, object]:
        """The decision as the API answers it."""
        return asdict(self)


class DecisionLog(SqliteStore):
    """The ``auto_decisions`` table of the audit database ``path``."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, SCHEMA, "auto-apply decision log")

    def record(self, decision: Decision) -> None:
        """Add ``decision``."""
        with self._connect() as db:
            db.execute(
                "INSERT INTO auto_decisions (at, recommendation_id, kind, node, workload, grp, "
                "decision, reason, code) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    decision.at,
                    decision.recommendation_id,
                    decision.kind,
                    decision.node,
                    decision.workload,
                    decision.group,
                    decision.decision,
                    decision.reason,
                    decision.code,
                ),
            )

    def _select(self, where: str, args: tuple[object, ...]) -> list[Decision]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT at, recommendation_id, kind, node, workload, grp, decision, reason, code "
                f"FROM auto_decisions {where}",
                args,
            ).fetchall()
        return [Decision(*tuple(row)) for row in rows]

    def since(self, at: float) -> list[Decision]:
        """The decisions taken at ``at`` or later, oldest first."""
        return self._select("WHERE at >= ? ORDER BY seq", (at,))

    def acted_since(self, at: float) -> list[Decision]:
        """The decisions since ``at`` that reached the resource manager, oldest first."""
        marks = ", ".join("?" for _ in ACTED)
        return self._select(
            f"WHERE at >= ? AND decision IN ({marks}) ORDER BY seq", (at, *sorted(ACTED))
        )

    def last_acted(self, node: str, workload: str) -> float | None:
        """When the loop last acted on ``workload`` of ``node`` (``None``: never)."""
        marks = ", ".join("?" for _ in ACTED)
        found = self._select(
            f"WHERE node = ? AND workload = ? AND decision IN ({marks}) ORDER BY seq DESC LIMIT 1",
            (node, workload, *sorted(ACTED)),
        )
        return found[0].at if found else None

    def rehearsed(self, recommendation_id: str) -> bool:
        """Whether ``recommendation_id`` went through a dry run of the loop before."""
        return bool(
            self._select(
                "WHERE recommendation_id = ? AND decision = ? LIMIT 1",
                (recommendation_id, DRY_RUN),
            )
        )

    def recent(self, limit: int = 100) -> list[Decision]:
        """The latest ``limit`` decisions, newest first."""
        return self._select("ORDER BY seq DESC LIMIT ?", (limit,))

    def prune(self, before: float) -> int:
        """Forget the decisions taken before ``before``; how many were forgotten."""
        with self._connect() as db:
            return int(db.execute("DELETE FROM auto_decisions WHERE at < ?", (before,)).rowcount)

    def stop(self, by: str, at: float, reason: str) -> None:
        """Record that ``by`` stopped the loop at ``at`` (kept until :meth:`resume`)."""
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO auto_switch (id, by, at, reason) VALUES (1, ?, ?, ?)",
                (by, at, reason),
            )

    def resume(self) -> None:
        """Forget the stop recorded by :meth:`stop`."""
        with self._connect() as db:
            db.execute("DELETE FROM auto_switch")

    def stopped(self) -> tuple[str, float, str] | None:
        """Who stopped the loop, when and why; ``None`` when it is not stopped."""
        with self._connect() as db:
            row = db.execute("SELECT by, at, reason FROM auto_switch WHERE id = 1").fetchone()
        return None if row is None else (str(row[0]), float(row[1]), str(row[2]))
