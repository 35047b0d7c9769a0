"""The applier's audit log: one SQLite row per action, written before and after each call.

Each row says what (recommendation, action kind, request), who (the actor), when (intent
and result times, UTC), the workload's allocation before, and the result. The intent row is
committed *before* the resource manager is called and the result is written after, so a
crash in between leaves a row without a result; the next run finds it
(:meth:`AuditLog.unresolved`) and asks the resource manager what became of it. Reverts are
rows too, linked both ways (``reverts`` / ``reverted_by``).

**States of a row** (:attr:`AuditEntry.state`; kept in the ``result`` column, with
``pending`` stored as no result yet and ``reverted`` as a ``reverted_by`` link on a
``succeeded`` row, so that readers of the columns see what they always saw):

* ``pending``: the intent is committed, the resource manager's answer is not;
* ``running``: the resource manager accepted the action and is still carrying it out;
* ``unknown``: the call's outcome could not be learnt (unreachable); the next run asks again;
* ``succeeded`` / ``failed``: the resource manager finished it / refused or failed it;
* ``not-applied``: the resource manager never saw it (the intent may be tried again);
* ``retry-later``: the resource manager refused it for now (a disruption budget, a busy
  controller: :func:`toposcope.rm.errors.is_retry_later`); nothing was done and a later
  round tries it again;
* ``reverted``: it succeeded and a revert row that undid it succeeded too.

:data:`TRANSITIONS` is the one place that says which moves are legal; every writer
(:meth:`AuditLog.record_intent`, :meth:`AuditLog.record_result`,
:meth:`AuditLog.mark_reverted`) checks its move there inside its transaction, and an illegal
move raises :class:`AuditStateError` and changes nothing::

    from          to
    (no row)      pending
    pending       running, succeeded, failed, unknown, not-applied, retry-later
    unknown       running, succeeded, failed, unknown, not-applied, retry-later
    running       running, succeeded, failed, unknown
    not-applied   pending           (the intent is tried again)
    retry-later   pending           (the intent is tried again)
    succeeded     reverted          (an action; a revert row cannot be reverted)
    failed        pending           (a revert row only: a failed revert is tried again)
    reverted      -

**State of a recommendation** (:func:`recommendation_state`, from all its rows):
``in_progress`` while any row is pending, running or unknown; otherwise ``partial`` when
some of its actions were reverted and others are still applied, ``failed`` when one of its
actions failed, ``reverted`` when everything it applied was undone, ``applied`` when it has
applied actions, and ``none`` when nothing of it took effect.

The ``irreversible`` column keeps the resource manager's word on undoing each action
(:attr:`toposcope.rm.models.ActionState.irreversible`; NULL when it said nothing). Files
written before the column existed get it on first open.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from toposcope.advisor.sqlite import SqliteStore
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import AuditRecord
from toposcope.rm import ActionRequest, Allocation, parse_answer

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
    reverted_by TEXT,
    irreversible INTEGER
);
CREATE INDEX IF NOT EXISTS actions_recommendation ON actions (recommendation_id);
"""

# row states (see the module docstring)
PENDING = "pending"
RUNNING = "running"
UNKNOWN = "unknown"
SUCCEEDED = "succeeded"
FAILED = "failed"
NOT_APPLIED = "not-applied"
RETRY_LATER = "retry-later"
REVERTED = "reverted"

#: row state -> the states it may move to (``None``: the row does not exist yet)
TRANSITIONS: Mapping[str | None, frozenset[str]] = {
    None: frozenset({PENDING}),
    PENDING: frozenset({RUNNING, SUCCEEDED, FAILED, UNKNOWN, NOT_APPLIED, RETRY_LATER}),
    UNKNOWN: frozenset({RUNNING, SUCCEEDED, FAILED, UNKNOWN, NOT_APPLIED, RETRY_LATER}),
    RUNNING: frozenset({RUNNING, SUCCEEDED, FAILED, UNKNOWN}),
    NOT_APPLIED: frozenset({PENDING}),
    RETRY_LATER: frozenset({PENDING}),
    SUCCEEDED: frozenset({REVERTED}),
    FAILED: frozenset({PENDING}),
    REVERTED: frozenset(),
}
#: moves only a revert row may make, and moves only an action (not a revert) may make
REVERT_ONLY = frozenset({(FAILED, PENDING)})
ACTION_ONLY = frozenset({(SUCCEEDED, REVERTED)})

#: results a resource manager's answer can be recorded as
RESULTS = frozenset({RUNNING, UNKNOWN, SUCCEEDED, FAILED, NOT_APPLIED, RETRY_LATER})
#: row states of actions that took no effect (nothing to undo)
NO_EFFECT = frozenset({FAILED, NOT_APPLIED, RETRY_LATER})
#: row states whose outcome is not settled yet
UNSETTLED = frozenset({PENDING, RUNNING, UNKNOWN})

# recommendation states (see :func:`recommendation_state`)
IN_PROGRESS = "in_progress"
PARTIAL = "partial"
APPLIED = "applied"
NONE = "none"


class AuditStateError(ConfigError):
    """A write the audit log's state machine forbids (:data:`TRANSITIONS`); nothing changed.

    Raised, for example, when an action is applied again while an earlier call of it is
    still running, or a revert is recorded for an action that did not succeed.
    """


def check_transition(request_id: str, current: str | None, new: str, *, revert: bool) -> None:
    """Raise :class:`AuditStateError` unless a row may move from ``current`` to ``new``.

    ``current`` is ``None`` for a row not written yet; ``revert`` says whether the row
    undoes another one (see :data:`REVERT_ONLY` and :data:`ACTION_ONLY`).
    """
    allowed = new in TRANSITIONS.get(current, frozenset())
    if (current, new) in REVERT_ONLY:
        allowed = allowed and revert
    if (current, new) in ACTION_ONLY:
        allowed = allowed and not revert
    if not allowed:
        what = "revert" if revert else "action"
        was = "not recorded" if current is None else current
        raise AuditStateError(f"audit log: {what} {request_id} is {was}; it cannot become {new}")


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
    return parse_answer(Allocation, json.loads(text), "audit log allocation")


@dataclass(frozen=True)
class AuditEntry(AuditRecord):
    """One row of the log: its columns (the advisor API's
    :class:`~toposcope.report.advisor_api.AuditRecord`) and the state they put it in.
    """

    @property
    def state(self) -> str:
        """The row's state in the log's state machine (see the module docstring)."""
        return _state(self.result, self.reverted_by)


def recommendation_state(entries: Iterable[AuditEntry]) -> str:
    """The state of a recommendation from its rows (see the module docstring)."""
    rows = list(entries)
    if any(e.state in UNSETTLED for e in rows):
        return IN_PROGRESS
    actions = [e for e in rows if e.reverts is None]
    applied = any(e.state == SUCCEEDED for e in actions)
    reverted = any(e.state == REVERTED for e in actions)
    if applied and reverted:
        return PARTIAL
    if any(e.state == FAILED for e in actions):
        return FAILED
    if reverted:
        return REVERTED
    return APPLIED if applied else NONE


def _state(result: str | None, reverted_by: str | None) -> str:
    if result is None:
        return PENDING
    if result == SUCCEEDED and reverted_by:
        return REVERTED
    return result


def _row_state(row: sqlite3.Row | None) -> str | None:
    return None if row is None else _state(row["result"], row["reverted_by"])


class AuditLog(SqliteStore):
    """The SQLite audit log at ``path`` (created with its schema on first use).

    Every write goes through :func:`check_transition` (see the module docstring).
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, SCHEMA, "the audit log")
        with self._connect() as db:
            columns = {row["name"] for row in db.execute("PRAGMA table_info(actions)")}
            if "irreversible" not in columns:
                db.execute("ALTER TABLE actions ADD COLUMN irreversible INTEGER")

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

        A row left ``not-applied`` (or a revert row left ``failed``) is reused; any other
        existing row for the request id is an :class:`AuditStateError`.
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
            row = self._row(db, request.request_id)
            is_revert = reverts is not None if row is None else row["reverts"] is not None
            check_transition(request.request_id, _row_state(row), PENDING, revert=is_revert)
            if row is None:
                db.execute(
                    "INSERT INTO actions (recommendation_id, kind, workload, node, request_json,"
                    " actor, backend, intent_at, before_json, reverts, request_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*values, request.request_id),
                )
            else:
                db.execute(
                    "UPDATE actions SET recommendation_id = ?, kind = ?, workload = ?, node = ?,"
                    " request_json = ?, actor = ?, backend = ?, intent_at = ?, before_json = ?,"
                    " reverts = ?, result = NULL, result_at = NULL, action_id = NULL,"
                    " after_json = NULL, error = '' WHERE request_id = ?",
                    (*values, request.request_id),
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
        irreversible: bool | None = None,
    ) -> None:
        """Write the outcome of an intent (``before`` replaces the recorded one if given;
        ``irreversible`` is the resource manager's word on undoing it).

        ``result`` is one of :data:`RESULTS`; the move must be legal (:data:`TRANSITIONS`).
        """
        if result not in RESULTS:
            raise AuditStateError(f"audit log: {result!r} is not a result ({sorted(RESULTS)})")
        with self._connect() as db:
            row = self._row(db, request_id)
            revert = row is not None and row["reverts"] is not None
            check_transition(request_id, _row_state(row), result, revert=revert)
            db.execute(
                "UPDATE actions SET result = ?, result_at = ?, action_id = ?, after_json = ?,"
                " error = ?, before_json = COALESCE(?, before_json), irreversible = ?"
                " WHERE request_id = ?",
                (
                    result,
                    now_utc(),
                    action_id,
                    allocation_json(after),
                    error,
                    allocation_json(before),
                    None if irreversible is None else int(irreversible),
                    request_id,
                ),
            )

    def mark_reverted(self, request_id: str, by: str) -> None:
        """Link an action to the succeeded revert row ``by`` that undid it."""
        with self._connect() as db:
            row = self._row(db, request_id)
            revert = row is not None and row["reverts"] is not None
            check_transition(request_id, _row_state(row), REVERTED, revert=revert)
            undoing = self._row(db, by)
            if undoing is None or undoing["reverts"] != request_id:
                raise AuditStateError(f"audit log: {by} is not a revert of {request_id}")
            if _row_state(undoing) != SUCCEEDED:
                raise AuditStateError(
                    f"audit log: {request_id} is not reverted while its revert {by} is "
                    f"{_row_state(undoing)}"
                )
            db.execute("UPDATE actions SET reverted_by = ? WHERE request_id = ?", (by, request_id))

    @staticmethod
    def _row(db: sqlite3.Connection, request_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM actions WHERE request_id = ?", (request_id,)
        ).fetchone()
        return row

    def entry(self, request_id: str) -> AuditEntry | None:
        """The row of ``request_id`` or ``None``."""
        with self._connect() as db:
            row = self._row(db, request_id)
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
        irreversible=None if row["irreversible"] is None else bool(row["irreversible"]),
    )
