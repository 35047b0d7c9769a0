"""The audit log's side of acting: what the resource manager answered, and what it is doing.

Applying and reverting both call a :class:`~toposcope.rm.ResourceManager` and record
every call in the :class:`~toposcope.advisor.audit.AuditLog` (intent before, result after).
:class:`ActionLedger` holds what they share: recording an answer (:meth:`ActionLedger.record`),
settling a row whose outcome is not known yet by asking the resource manager
(``GET /actions/{request_id}``: :meth:`ActionLedger.refresh`, :meth:`ActionLedger.recover`),
and waiting, bounded, for running actions (:meth:`ActionLedger.wait`). An
:class:`~toposcope.report.advisor_api.Outcome` (the advisor API's contract) is what applying
or reverting reports per recommendation or action.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from toposcope.advisor.audit import (
    FAILED,
    NOT_APPLIED,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    AuditEntry,
    AuditLog,
)
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.rm import (
    ActionState,
    ActionStatus,
    ResourceManager,
    ResourceManagerError,
)

LOG = logging.getLogger("toposcope.advisor.applier")

#: how long one revert waits for running actions (the action, then its revert) to finish
DEFAULT_WAIT_SECONDS = 5.0
#: how often the resource manager is asked about a running action meanwhile
DEFAULT_POLL_SECONDS = 0.2


def status_result(status: ActionStatus) -> str:
    """The audit result for a resource manager's action status (``running`` until final)."""
    if status == ActionStatus.SUCCEEDED:
        return SUCCEEDED
    if status == ActionStatus.FAILED:
        return FAILED
    return RUNNING


class ActionLedger:
    """Records ``manager``'s answers in ``audit`` and settles the rows it left open.

    ``poll_seconds``: how often :meth:`wait` asks about a running action. ``latest`` keeps
    the newest answer recorded per request id (what an outcome reports once a wait is over).
    """

    def __init__(
        self,
        manager: ResourceManager,
        audit: AuditLog,
        *,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
    ) -> None:
        self.manager = manager
        self.audit = audit
        self.poll_seconds = poll_seconds
        self.latest: dict[str, ActionState] = {}

    def recover(self) -> list[AuditEntry]:
        """Settle intents without a final result by asking the resource manager.

        Found: its status is recorded. Unknown to it (404): ``not-applied``, except that an
        action it had accepted (``running``) becomes ``unknown`` first (asked again next time).
        Unreachable: ``unknown`` (an accepted action stays ``running``) for the next run.
        Returns the rows looked at, as they are now.
        """
        settled = []
        for entry in self.audit.unresolved():
            self.refresh(entry)
            LOG.info("recovered intent %s", entry.request_id)
            now = self.audit.entry(entry.request_id)
            if now is not None:
                settled.append(now)
        return settled

    def refresh(self, entry: AuditEntry) -> str:
        """Ask the resource manager about an unsettled row and record it; the row's state."""
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
        return self.record(entry.request_id, state)

    def record(self, request_id: str, state: ActionState) -> str:
        """Log the resource manager's answer for ``request_id``; its result (``failed``...)."""
        result = status_result(state.status)
        self.latest[request_id] = state
        self.audit.record_result(
            request_id,
            result,
            action_id=state.id,
            before=state.before,
            after=state.after,
            error=state.error,
            irreversible=state.irreversible,
        )
        return result

    def wait(self, request_ids: Sequence[str], deadline: float) -> None:
        """Ask the resource manager about running actions until none is or ``deadline``
        (a :func:`time.monotonic` time) has passed.
        """
        waiting = list(request_ids)
        while waiting:
            still = []
            for request_id in waiting:
                entry = self.audit.entry(request_id)
                if entry is not None and entry.state == RUNNING and self.refresh(entry) == RUNNING:
                    still.append(request_id)
            waiting = still
            left = deadline - time.monotonic()
            if not waiting or left <= 0:
                return
            time.sleep(min(self.poll_seconds, left))

    def fresh(self, entry: AuditEntry) -> AuditEntry:
        """The row of ``entry`` as the audit log holds it now."""
        return self.audit.entry(entry.request_id) or entry

    def state(self, request_id: str) -> str:
        """The state of ``request_id``'s row now (``not-applied`` when there is none)."""
        entry = self.audit.entry(request_id)
        return entry.state if entry is not None else NOT_APPLIED
