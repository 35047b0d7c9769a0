"""Undoing applied actions from their recorded before-state, newest first.

:func:`inverse_request` turns an audit row into the request that undoes it (a ``place`` is
undone by an ``unplace``; a ``release`` cannot be undone; an action whose resource manager
said how it undoes it, ``irreversible`` true or false, is undone by an ``unplace`` on its
node, which takes back what that backend recorded, such as its steering or a scale-down).
:class:`Reverter` sends those requests for a recommendation (or one action), newest action
first. An action still running is waited for (polling the resource manager, up to
``wait_seconds`` per call; the resource-manager API has no way to cancel one) and so is the
revert action itself; what is still running when the time is up is reported as ``running``
and left as it is, and older actions are then left alone too (``not-reverted``), since
undoing them under a newer change would restore the wrong state. A later revert picks up
where this one stopped. The audit log's state machine (:mod:`toposcope.advisor.audit`) marks
an action ``reverted`` only once its revert finished.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from toposcope.advisor.applying.ledger import DEFAULT_WAIT_SECONDS, ActionLedger
from toposcope.advisor.audit import (
    FAILED,
    NO_EFFECT,
    NOT_APPLIED,
    REVERTED,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    AuditEntry,
)
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import Outcome
from toposcope.rm import ActionKind, ActionRequest, ActionState, ResourceManagerError

#: per-action revert results after which nothing of that action is left to undo
REVERT_DONE = frozenset({"reverted", "skipped"})


def inverse_request(entry: AuditEntry) -> ActionRequest:
    """The request that undoes a recorded action (:class:`ConfigError` when impossible)."""
    kind = ActionKind(entry.kind)
    before = entry.before
    request_id = f"revert-{entry.request_id}"
    reason = f"revert {entry.request_id}"
    if kind == ActionKind.PLACE or entry.irreversible is not None:
        node = entry.node or (before.node if before is not None else None)
        gpus = entry.after.gpus if entry.after else list(entry.request.get("gpus", []))
        return ActionRequest(
            request_id, ActionKind.UNPLACE, entry.workload, node, gpus=gpus, reason=reason
        )
    if kind == ActionKind.RELEASE:
        raise ConfigError(
            f"{entry.request_id}: a release cannot be reverted (the GPUs went back to the pool)"
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


class Reverter:
    """Undoes recorded actions through the ledger's resource manager (module docstring).

    ``actor`` and ``backend`` are recorded with each revert action; ``counts`` (kind,
    result) counts the actions reverted.
    """

    def __init__(
        self,
        ledger: ActionLedger,
        *,
        actor: str,
        backend: str,
        counts: Counter[tuple[str, str]],
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> None:
        self.ledger = ledger
        self.actor = actor
        self.backend = backend
        self.counts = counts
        self.wait_seconds = wait_seconds

    def revert(self, ident: str) -> list[Outcome]:
        """Undo the not yet reverted actions of a recommendation (newest first), or one
        action when ``ident`` is a request id; one :class:`Outcome` per action.

        Actions still running are waited for, up to ``wait_seconds`` in all (see the module
        docstring); :class:`ConfigError` when there is nothing to undo.
        """
        audit = self.ledger.audit
        self.ledger.recover()
        single = audit.entry(ident)
        entries = [single] if single is not None else audit.entries(ident)[::-1]
        chosen = [
            e
            for e in entries
            if e.reverts is None and e.state != REVERTED and e.state not in NO_EFFECT
        ]
        if not chosen:
            raise ConfigError(f"nothing applied and not yet reverted under {ident!r}")
        return self.undo(chosen)

    def undo(self, entries: Sequence[AuditEntry]) -> list[Outcome]:
        """Revert ``entries`` in the order given (newest first), one outcome each."""
        deadline = time.monotonic() + self.wait_seconds
        self.ledger.wait([e.request_id for e in entries if e.state == RUNNING], deadline)
        outcomes = []
        blocker = ""
        for given in entries:
            entry = self.ledger.fresh(given)
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
        audit = self.ledger.audit
        rid = entry.request_id
        if entry.state in NO_EFFECT:
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
        existing = audit.entry(revert_id)
        if existing is None or existing.state in (NOT_APPLIED, FAILED):
            audit.record_intent(
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
                state = self.ledger.manager.apply(request)
            except ResourceManagerError as exc:
                audit.record_result(revert_id, FAILED, error=str(exc))
                return _outcome(entry, "failed", f"revert {revert_id}: {exc}")
            except AdvisorConnectionError as exc:
                audit.record_result(revert_id, UNKNOWN, error=str(exc))
                return _outcome(entry, "unknown", f"revert {revert_id}: {exc}")
            if self.ledger.record(revert_id, state) == RUNNING:
                self.ledger.wait([revert_id], deadline)
        result = self.ledger.state(revert_id)
        if result == FAILED:
            row = audit.entry(revert_id)
            error = row.error if row is not None and row.error else "failed"
            return _outcome(entry, "failed", f"revert {revert_id} failed: {error}")
        if result != SUCCEEDED:
            return _outcome(
                entry,
                "running",
                f"{rid}: its revert {revert_id} is still {result} after "
                f"{self.wait_seconds:g}s (revert again to confirm it)",
            )
        audit.mark_reverted(entry.request_id, revert_id)
        self.counts[(entry.kind, "reverted")] += 1
        # the revert as it finished, not as the first answer left it (``running``)
        states = (self.ledger.latest.get(revert_id, state),) if state is not None else ()
        return _outcome(entry, "reverted", f"{rid} by {revert_id}", states)


def _outcome(
    entry: AuditEntry, result: str, detail: str, states: tuple[ActionState, ...] = ()
) -> Outcome:
    return Outcome(entry.recommendation_id, entry.node or "", result, detail, states)
