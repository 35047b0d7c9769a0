"""The one place that acts (descheduler's PodEvictor): limits, dry run, idempotency, audit.

Policies only decide. :class:`Applier` takes a report's recommendations and carries out
their actions through a :class:`~toposcope.resources.ResourceManager`:

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
* :meth:`revert` undoes a recommendation (or one action) from the recorded before-state.

Reverting goes newest action first. An action still running is waited for (polling the
resource manager, up to ``wait_seconds`` per call; the resource-manager API has no way to
cancel one) and so is the revert action itself; what is still running when the time is up
is reported as ``running`` and left as it is, and older actions are then left alone too
(``not-reverted``), since undoing them under a newer change would restore the wrong state.
A later revert picks up where this one stopped. The audit log's state machine
(:mod:`toposcope.advisor.audit`) marks an action ``reverted`` only once its revert finished.

An action counter by kind and result (:attr:`Applier.counts`) feeds the advisor's
``toposcope_advisor_actions_total``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from toposcope.advisor.actuators.dry_run import DryRunResourceManager
from toposcope.advisor.audit import (
    FAILED,
    IN_PROGRESS,
    NOT_APPLIED,
    PARTIAL,
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
from toposcope.advisor.recommendations import Recommendation
from toposcope.errors import ConfigError
from toposcope.resources import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    ResourceManager,
    ResourceManagerError,
)

LOG = logging.getLogger("toposcope.advisor.applier")

#: how long one revert waits for running actions (the action, then its revert) to finish
DEFAULT_WAIT_SECONDS = 5.0
#: how often the resource manager is asked about a running action meanwhile
DEFAULT_POLL_SECONDS = 0.2

#: per-action revert results after which nothing of that action is left to undo
REVERT_DONE = frozenset({"reverted", "skipped"})


@dataclass(frozen=True)
class Outcome:
    """What happened to one recommendation (or to one action in a revert).

    Applying: ``applied``, ``dry-run``, ``skipped``, ``failed``, ``unknown`` (the outcome
    of a call could not be learnt; the next run settles it) or ``in_progress`` (an earlier
    call of it is still running; nothing was sent). Reverting, per action: ``reverted``,
    ``skipped`` (nothing to undo: it failed or never reached the resource manager),
    ``running`` (it, or its revert, was still running when the wait was over), ``unknown``,
    ``failed`` or ``not-reverted`` (left as it is because a newer action could not be undone
    first).
    """

    recommendation_id: str
    node: str
    result: str
    detail: str = ""
    states: tuple[ActionState, ...] = ()


@dataclass
class _RunState:
    applied: int = 0
    per_node: Counter[str] = field(default_factory=Counter)
    unreachable: str = ""


def _status_result(status: ActionStatus) -> str:
    if status == ActionStatus.SUCCEEDED:
        return SUCCEEDED
    if status == ActionStatus.FAILED:
        return FAILED
    return RUNNING


def inverse_request(entry: AuditEntry) -> ActionRequest:
    """The request that undoes a recorded action (:class:`ConfigError` when impossible)."""
    kind = ActionKind(entry.kind)
    before = entry.before
    request_id = f"revert-{entry.request_id}"
    reason = f"revert {entry.request_id}"
    if kind == ActionKind.RELEASE:
        raise ConfigError(
            f"{entry.request_id}: a release cannot be reverted (the GPUs went back to the pool)"
        )
    if kind == ActionKind.PLACE:
        gpus = entry.after.gpus if entry.after else list(entry.request.get("gpus", []))
        return ActionRequest(
            request_id, ActionKind.RELEASE, entry.workload, entry.node, gpus=gpus, reason=reason
        )
    if before is None:
        raise ConfigError(f"{entry.request_id}: no before-state was recorded, cannot revert")
    if kind == ActionKind.PIN:
        return ActionRequest(
            request_id, kind, entry.workload, before.node, before.cpus, before.mems, reason=reason
        )
    if kind == ActionKind.MIGRATE_MEMORY:
        return ActionRequest(
            request_id, kind, entry.workload, before.node, mems=before.mems, reason=reason
        )
    return ActionRequest(
        request_id, ActionKind.MIGRATE, entry.workload, before.node, gpus=before.gpus, reason=reason
    )


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

    # crash recovery -----------------------------------------------------------------------
    def recover(self) -> list[AuditEntry]:
        """Settle intents without a final result by asking the resource manager.

        Found: its status is recorded. Unknown to it (404): ``not-applied``, except that an
        action it had accepted (``running``) becomes ``unknown`` first (asked again next time).
        Unreachable: ``unknown`` (an accepted action stays ``running``) for the next run.
        Returns the rows looked at, as they are now.
        """
        if self.audit is None or self.dry_run:
            return []
        settled = []
        for entry in self.audit.unresolved():
            self._refresh(entry)
            LOG.info("recovered intent %s", entry.request_id)
            now = self.audit.entry(entry.request_id)
            if now is not None:
                settled.append(now)
        return settled

    def _refresh(self, entry: AuditEntry) -> str:
        """Ask the resource manager about an unsettled row and record it; the row's state."""
        assert self.audit is not None
        accepted = entry.result == RUNNING
        try:
            state = self.manager.action(entry.request_id)
        except ResourceManagerError as exc:
            if exc.status == 404:
                result = UNKNOWN if accepted else NOT_APPLIED
                self.audit.record_result(
                    entry.request_id,
                    result,
                    action_id=entry.action_id,
                    after=entry.after,
                    error=str(exc),
                )
                return result
            if accepted:
                return RUNNING
            self.audit.record_result(entry.request_id, UNKNOWN, error=str(exc))
            return UNKNOWN
        except AdvisorConnectionError as exc:
            if accepted:
                LOG.warning("cannot learn how %s is doing: %s", entry.request_id, exc)
                return RUNNING
            self.audit.record_result(entry.request_id, UNKNOWN, error=str(exc))
            return UNKNOWN
        return self._record(entry.request_id, state)

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
            LOG.info("recommendation %s: %s %s", rec.id, outcome.result, outcome.detail)
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
        reason = self._skip_reason(rec, run)
        if reason:
            return Outcome(rec.id, node, "skipped", reason)
        run.applied += 1
        run.per_node[node] += 1
        if self.dry_run:
            states = tuple(self.manager.apply(a) for a in rec.actions)
            self.counts[(str(rec.kind), "dry-run")] += 1
            return Outcome(rec.id, node, "dry-run", f"{len(states)} call(s) printed", states)
        assert self.audit is not None
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
                self.audit.record_result(action.request_id, FAILED, error=str(exc))
                return self._fail(rec, done, f"{action.request_id}: {exc}")
            except AdvisorConnectionError as exc:
                self.audit.record_result(action.request_id, UNKNOWN, error=str(exc))
                run.unreachable = str(exc)
                self.counts[(str(rec.kind), "unknown")] += 1
                return Outcome(rec.id, node, "unknown", str(exc), tuple(done))
            if self._record(action.request_id, state) == FAILED:
                return self._fail(rec, done, f"{action.request_id}: {state.error or 'failed'}")
            done.append(state)
        self.counts[(str(rec.kind), "applied")] += 1
        running = [s.request.request_id for s in done if _status_result(s.status) == RUNNING]
        detail = f"{len(done)} action(s)"
        if running:
            detail += f"; still running: {', '.join(running)}"
        return Outcome(rec.id, node, "applied", detail, tuple(done))

    def _record(self, request_id: str, state: ActionState) -> str:
        """Log the resource manager's answer for ``request_id``; its result (``failed``...)."""
        assert self.audit is not None
        result = _status_result(state.status)
        self.audit.record_result(
            request_id,
            result,
            action_id=state.id,
            before=state.before,
            after=state.after,
            error=state.error,
        )
        return result

    def _fail(self, rec: Recommendation, done: list[ActionState], detail: str) -> Outcome:
        assert self.audit is not None
        self.counts[(str(rec.kind), "failed")] += 1
        rows = (self.audit.entry(s.request.request_id) for s in reversed(done))
        entries = [e for e in rows if e is not None]
        undone = []
        for entry, outcome in zip(entries, self._undo(entries), strict=True):
            if outcome.result == "reverted":
                undone.append(entry.request_id)
            else:
                detail += f"; {entry.request_id} not reverted ({outcome.result}: {outcome.detail})"
        if undone:
            detail += f"; reverted {', '.join(undone)}"
        return Outcome(rec.id, rec.target.node, "failed", detail, tuple(done))

    # reverting ----------------------------------------------------------------------------
    def revert(self, ident: str) -> list[Outcome]:
        """Undo the not yet reverted actions of a recommendation (newest first), or one
        action when ``ident`` is a request id; one :class:`Outcome` per action.

        Actions still running are waited for, up to ``wait_seconds`` in all (see the module
        docstring); :class:`ConfigError` when there is nothing to undo.
        """
        if self.audit is None or self.dry_run:
            raise ConfigError("revert needs a real resource manager and its audit log")
        self.recover()
        single = self.audit.entry(ident)
        entries = [single] if single is not None else self.audit.entries(ident)[::-1]
        chosen = [
            e
            for e in entries
            if e.reverts is None and e.state not in (REVERTED, FAILED, NOT_APPLIED)
        ]
        if not chosen:
            raise ConfigError(f"nothing applied and not yet reverted under {ident!r}")
        return self._undo(chosen)

    def _undo(self, entries: Sequence[AuditEntry]) -> list[Outcome]:
        """Revert ``entries`` in the order given (newest first), one outcome each."""
        deadline = time.monotonic() + self.wait_seconds
        self._wait([e.request_id for e in entries if e.state == RUNNING], deadline)
        outcomes = []
        blocker = ""
        for given in entries:
            entry = self._fresh(given)
            if blocker:
                detail = f"{entry.request_id} left as it is: {blocker} must be undone first"
                outcomes.append(_outcome(entry, "not-reverted", detail))
                continue
            outcome = self._undo_one(entry, deadline)
            if outcome.result not in REVERT_DONE:
                blocker = entry.request_id
            outcomes.append(outcome)
        return outcomes

    def _undo_one(self, entry: AuditEntry, deadline: float) -> Outcome:
        assert self.audit is not None
        rid = entry.request_id
        if entry.state in (FAILED, NOT_APPLIED):
            return _outcome(entry, "skipped", f"{rid} {entry.state}; nothing to undo")
        if entry.state == RUNNING:
            return _outcome(
                entry,
                "running",
                f"{rid} is still running after {self.wait_seconds:g}s; not reverted (revert "
                "again once it has finished)",
            )
        if entry.state != SUCCEEDED:
            why = f": {entry.error}" if entry.error else ""
            return _outcome(entry, "unknown", f"{rid}: its outcome is not known yet{why}")
        try:
            request = inverse_request(entry)
        except ConfigError as exc:
            return _outcome(entry, "failed", str(exc))
        revert_id = request.request_id
        existing = self.audit.entry(revert_id)
        if existing is None or existing.state in (NOT_APPLIED, FAILED):
            self.audit.record_intent(
                entry.recommendation_id,
                request,
                actor=self.actor,
                backend=self.backend,
                before=entry.after,
                reverts=entry.request_id,
            )
        state: ActionState | None = None
        if existing is None or existing.state != SUCCEEDED:
            try:
                state = self.manager.apply(request)
            except ResourceManagerError as exc:
                self.audit.record_result(revert_id, FAILED, error=str(exc))
                return _outcome(entry, "failed", f"revert {revert_id}: {exc}")
            except AdvisorConnectionError as exc:
                self.audit.record_result(revert_id, UNKNOWN, error=str(exc))
                return _outcome(entry, "unknown", f"revert {revert_id}: {exc}")
            if self._record(revert_id, state) == RUNNING:
                self._wait([revert_id], deadline)
        result = self._fresh_state(revert_id)
        if result == FAILED:
            row = self.audit.entry(revert_id)
            error = row.error if row is not None and row.error else "failed"
            return _outcome(entry, "failed", f"revert {revert_id} failed: {error}")
        if result != SUCCEEDED:
            return _outcome(
                entry,
                "running",
                f"{rid}: its revert {revert_id} is still {result} after "
                f"{self.wait_seconds:g}s (revert again to confirm it)",
            )
        self.audit.mark_reverted(entry.request_id, revert_id)
        self.counts[(entry.kind, "reverted")] += 1
        states = (state,) if state is not None else ()
        return _outcome(entry, "reverted", f"{rid} by {revert_id}", states)

    def _wait(self, request_ids: Sequence[str], deadline: float) -> None:
        """Ask the resource manager about running actions until none is or ``deadline``."""
        assert self.audit is not None
        waiting = list(request_ids)
        while waiting:
            still = []
            for request_id in waiting:
                entry = self.audit.entry(request_id)
                if entry is not None and entry.state == RUNNING and self._refresh(entry) == RUNNING:
                    still.append(request_id)
            waiting = still
            left = deadline - time.monotonic()
            if not waiting or left <= 0:
                return
            time.sleep(min(self.poll_seconds, left))

    def _fresh(self, entry: AuditEntry) -> AuditEntry:
        assert self.audit is not None
        return self.audit.entry(entry.request_id) or entry

    def _fresh_state(self, request_id: str) -> str:
        assert self.audit is not None
        entry = self.audit.entry(request_id)
        return entry.state if entry is not None else NOT_APPLIED


def _outcome(
    entry: AuditEntry, result: str, detail: str, states: tuple[ActionState, ...] = ()
) -> Outcome:
    return Outcome(entry.recommendation_id, entry.node or "", result, detail, states)
