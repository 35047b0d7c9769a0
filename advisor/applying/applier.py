"""The one place that acts (descheduler's PodEvictor): limits, dry run, idempotency, audit.

Policies only decide. :class:`Applier` takes a report's recommendations and carries out
their actions through a :class:`~toposcope.rm.ResourceManager`:

* dry run: the calls are handed to the dry-run backend (printed), nothing is recorded;
* limits: at most ``max_per_run`` recommendations per run and ``max_per_node`` per node;
* idempotency: a recommendation whose actions all succeeded before (audit log, by id) is
  skipped, and the resource manager itself ignores repeated request ids;
* in progress: a recommendation with an action the resource manager is still running (or
  whose outcome is unknown) is not applied again; its outcome is ``in_progress``;
* audit: intent before each call, result after; :meth:`recover` settles intents a crash
  left without a result, and actions still running, by asking the resource manager
  (``GET /actions/{request_id}``);
* all or nothing per recommendation: when an action fails, the ones of the same
  recommendation already applied are reverted;
* retry later: an action the resource manager refuses only for now (429, a disruption
  budget) is recorded ``retry-later`` and its recommendation's outcome is ``retry-later``
  (handled like a failure, earlier actions reverted); the next round applies it again;
* :meth:`revert` undoes a recommendation (or one action) from the recorded before-state;
* a fabric placement of a pending multi-node job (no action: it names several nodes) is
  carried out whole by a backend that steers such jobs (:mod:`.fabric`), audited the same.

Recording answers and settling open rows is the ledger's
(:mod:`~toposcope.advisor.applying.ledger`); reverting, newest action first and waiting
(bounded) for running ones, is the reverter's (:mod:`~toposcope.advisor.applying.revert`).

An action counter by kind and result (:attr:`Applier.counts`) feeds the advisor's
``toposcope_advisor_actions_total``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from toposcope.advisor.applying.fabric import FabricSteerer, skip_reason, steer, steers
from toposcope.advisor.applying.ledger import (
    DEFAULT_POLL_SECONDS,
    DEFAULT_WAIT_SECONDS,
    ActionLedger,
    status_result,
)
from toposcope.advisor.applying.revert import REVERT_DONE, Reverter, inverse_request
from toposcope.advisor.audit import (
    FAILED,
    IN_PROGRESS,
    PARTIAL,
    RETRY_LATER,
    REVERTED,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    UNSETTLED,
    AuditEntry,
    AuditLog,
    recommendation_state,
)
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.rmclients.dry_run import DryRunResourceManager
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import Outcome
from toposcope.report.recommendation import Recommendation
from toposcope.rm import (
    ActionState,
    Allocation,
    ResourceManager,
    ResourceManagerError,
    is_retry_later,
)

__all__ = [
    "DEFAULT_POLL_SECONDS",
    "DEFAULT_WAIT_SECONDS",
    "REVERT_DONE",
    "Applier",
    "Outcome",
    "inverse_request",
]

LOG = logging.getLogger("toposcope.advisor.applier")


@dataclass
class _RunState:
    applied: int = 0
    per_node: Counter[str] = field(default_factory=Counter)
    unreachable: str = ""


class Applier:
    """Carries out recommendations through ``manager`` within limits, logging to ``audit``.

    ``dry_run`` defaults to "the manager is the dry-run backend". ``actor`` is who is
    recorded as having acted (``user@host``), ``backend`` the resource manager's name.
    ``wait_seconds`` bounds how long a revert waits for running actions, asking the resource
    manager every ``poll_seconds`` (see the module docstring).
    """

    def __init__(
        self,
        manager: ResourceManager,
        audit: AuditLog | None,
        *,
        actor: str,
        backend: str,
        dry_run: bool | None = None,
        max_per_run: int = 10,
        max_per_node: int = 2,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
    ) -> None:
        if max_per_run < 0 or max_per_node < 0:
            raise ConfigError("action limits must be >= 0")
        if wait_seconds < 0 or poll_seconds <= 0:
            raise ConfigError("the revert wait must be >= 0 and its poll interval > 0")
        self.manager = manager
        self.dry_run = isinstance(manager, DryRunResourceManager) if dry_run is None else dry_run
        if audit is None and not self.dry_run:
            raise ConfigError("applying for real needs an audit log (--audit-db)")
        self.audit = audit
        self.actor = actor
        self.backend = backend
        self.max_per_run = max_per_run
        self.max_per_node = max_per_node
        self.wait_seconds = wait_seconds
        self.poll_seconds = poll_seconds
        self.counts: Counter[tuple[str, str]] = Counter()
        self._ledger: ActionLedger | None = None
        self._reverter: Reverter | None = None
        if audit is not None and not self.dry_run:
            self._ledger = ActionLedger(manager, audit, poll_seconds=poll_seconds)
            self._reverter = Reverter(
                self._ledger,
                actor=actor,
                backend=backend,
                counts=self.counts,
                wait_seconds=wait_seconds,
            )

    # crash recovery -----------------------------------------------------------------------
    def recover(self) -> list[AuditEntry]:
        """Settle intents without a final result by asking the resource manager (see
        :meth:`ActionLedger.recover`); the rows looked at, as they are now.
        """
        if self._ledger is None:
            return []
        return self._ledger.recover()

    # applying -----------------------------------------------------------------------------
    def apply(self, recommendations: Sequence[Recommendation]) -> list[Outcome]:
        """Apply recommendations in order of gain; one :class:`Outcome` each."""
        self.recover()
        before = self._allocations() if not self.dry_run else {}
        run = _RunState()
        outcomes = []
        for rec in sorted(recommendations, key=lambda r: (-r.estimated_gain, r.id)):
            outcome = self._apply_one(rec, before, run)
            outcomes.append(outcome)
            LOG.debug("recommendation %s: %s %s", rec.id, outcome.result, outcome.detail)
        return outcomes

    def _allocations(self) -> dict[tuple[str, str], Allocation]:
        result: dict[tuple[str, str], Allocation] = {}
        for workload in self.manager.workloads():
            if workload.allocation is not None:
                result[(workload.allocation.node, workload.name)] = workload.allocation
        return result

    def _in_progress(self, rec: Recommendation) -> str:
        """Why ``rec`` must wait (an unsettled audit row of it), or ``""``."""
        if self.audit is None:
            return ""
        busy = [e for e in self.audit.entries(rec.id) if e.state in UNSETTLED]
        if not busy:
            return ""
        listed = ", ".join(f"{e.request_id} ({e.state})" for e in busy)
        return (
            f"{rec.id} is in progress: {listed}; nothing was sent, try again once the "
            "resource manager has finished"
        )

    def _skip_reason(self, rec: Recommendation, run: _RunState) -> str:
        if run.unreachable:
            return f"resource manager unreachable: {run.unreachable}"
        if not rec.actions:
            return "no actions (a change for a person to make)"
        if self.audit is not None:
            rows = self.audit.entries(rec.id)
            state = recommendation_state(rows)
            if state == PARTIAL:
                left = ", ".join(e.request_id for e in rows if e.state == SUCCEEDED)
                return f"partly reverted ({left} still applied); revert it to finish"
            if state == REVERTED:
                return "reverted earlier; not applied again"
            entries = {e.request_id: e for e in rows}
            mine = [entries.get(a.request_id) for a in rec.actions]
            if all(e is not None and e.state == SUCCEEDED for e in mine):
                return "already applied"
            failed = [e for e in mine if e is not None and e.state == FAILED]
            if failed:
                return f"failed before ({failed[0].request_id}: {failed[0].error})"
        if run.applied >= self.max_per_run:
            return f"per-run limit of {self.max_per_run} reached"
        if run.per_node[rec.target.node] >= self.max_per_node:
            return f"per-node limit of {self.max_per_node} reached on {rec.target.node}"
        return ""

    def _apply_one(
        self,
        rec: Recommendation,
        allocations: dict[tuple[str, str], Allocation],
        run: _RunState,
    ) -> Outcome:
        node = rec.target.node
        busy = self._in_progress(rec)
        if busy:
            return Outcome(rec.id, node, IN_PROGRESS, busy)
        if not self.dry_run and steers(self.manager, rec):
            return self._steer(rec, run)
        reason = self._skip_reason(rec, run)
        if reason:
            return Outcome(rec.id, node, "skipped", reason)
        run.applied += 1
        run.per_node[node] += 1
        if self.dry_run:
            states = tuple(self.manager.apply(a) for a in rec.actions)
            self.counts[(str(rec.kind), "dry-run")] += 1
            return Outcome(rec.id, node, "dry-run", f"{len(states)} call(s) printed", states)
        assert self.audit is not None and self._ledger is not None
        done: list[ActionState] = []
        for action in rec.actions:
            entry = self.audit.entry(action.request_id)
            if entry is not None and entry.state == SUCCEEDED:
                continue  # applied in an earlier, interrupted run
            before = allocations.get((action.node or node, action.workload))
            self.audit.record_intent(
                rec.id, action, actor=self.actor, backend=self.backend, before=before
            )
            try:
                state = self.manager.apply(action)
            except ResourceManagerError as exc:
                later = is_retry_later(exc)
                self.audit.record_result(
                    action.request_id, RETRY_LATER if later else FAILED, error=str(exc)
                )
                result = RETRY_LATER if later else "failed"
                return self._fail(rec, done, f"{action.request_id}: {exc}", result)
            except AdvisorConnectionError as exc:
                self.audit.record_result(action.request_id, UNKNOWN, error=str(exc))
                run.unreachable = str(exc)
                self.counts[(str(rec.kind), "unknown")] += 1
                return Outcome(rec.id, node, "unknown", str(exc), tuple(done))
            if self._ledger.record(action.request_id, state) == FAILED:
                return self._fail(rec, done, f"{action.request_id}: {state.error or 'failed'}")
            done.append(state)
        self.counts[(str(rec.kind), "applied")] += 1
        running = [s.request.request_id for s in done if status_result(s.status) == RUNNING]
        detail = f"{len(done)} action(s)"
        if running:
            detail += f"; still running: {', '.join(running)}"
        for state in done:
            if state.note:
                detail += f"; {state.request.request_id}: {state.note}"
        return Outcome(rec.id, node, "applied", detail, tuple(done))

    def _steer(self, rec: Recommendation, run: _RunState) -> Outcome:
        """A fabric placement carried out whole by the backend (:mod:`.fabric`), under the
        same skip rules and limits as actions.
        """
        assert self.audit is not None and self._ledger is not None
        assert isinstance(self.manager, FabricSteerer)
        node = rec.target.node
        reason = skip_reason(self.audit, f"{rec.id}-0")
        if run.unreachable:
            reason = f"resource manager unreachable: {run.unreachable}"
        elif run.applied >= self.max_per_run:
            reason = reason or f"per-run limit of {self.max_per_run} reached"
        if reason:
            return Outcome(rec.id, node, "skipped", reason)
        run.applied += 1
        run.per_node[node] += 1
        return steer(
            self.manager,
            rec,
            self.audit,
            self._ledger,
            actor=self.actor,
            backend=self.backend,
            counts=self.counts,
        )

    def _fail(
        self, rec: Recommendation, done: list[ActionState], detail: str, result: str = FAILED
    ) -> Outcome:
        assert self.audit is not None and self._reverter is not None
        self.counts[(str(rec.kind), result)] += 1
        rows = (self.audit.entry(s.request.request_id) for s in reversed(done))
        entries = [e for e in rows if e is not None]
        undone = []
        for entry, outcome in zip(entries, self._reverter.undo(entries), strict=True):
            if outcome.result == "reverted":
                undone.append(entry.request_id)
            else:
                detail += f"; {entry.request_id} not reverted ({outcome.result}: {outcome.detail})"
        if undone:
            detail += f"; reverted {', '.join(undone)}"
        return Outcome(rec.id, rec.target.node, result, detail, tuple(done))

    # reverting ----------------------------------------------------------------------------
    def revert(self, ident: str) -> list[Outcome]:
        """Undo the not yet reverted actions of a recommendation (newest first), or one
        action when ``ident`` is a request id; one :class:`Outcome` per action.

        Actions still running are waited for, up to ``wait_seconds`` in all (see
        :mod:`~toposcope.advisor.applying.revert`); :class:`ConfigError` when there is
        nothing to undo.
        """
        if self._reverter is None:
            raise ConfigError("revert needs a real resource manager and its audit log")
        return self._reverter.revert(ident)
