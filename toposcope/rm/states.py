"""The life of an action: the states it passes through and the moves it may make.

An action starts in any state (a dry run answers ``pending``, a pin on a host answers
``succeeded`` at once, a simulated migration answers ``running``) and then only moves forward::

    pending -> running -> succeeded
       |          '-----> failed
       '--> succeeded | failed

``succeeded`` and ``failed`` are final. :func:`check_transition` is the one place that says
so; :meth:`toposcope.rm.models.ActionState.advance` and
:meth:`toposcope.rm.idempotency.ActionBook.update` both go through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from toposcope.rm.errors import ResourceManagerError


class ActionStatus(StrEnum):
    """Where an action stands: accepted and running, done, or failed with a reason."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


#: the statuses an action in each status may move to
TRANSITIONS: Mapping[ActionStatus, frozenset[ActionStatus]] = MappingProxyType(
    {
        ActionStatus.PENDING: frozenset(
            {ActionStatus.RUNNING, ActionStatus.SUCCEEDED, ActionStatus.FAILED}
        ),
        ActionStatus.RUNNING: frozenset({ActionStatus.SUCCEEDED, ActionStatus.FAILED}),
        ActionStatus.SUCCEEDED: frozenset(),
        ActionStatus.FAILED: frozenset(),
    }
)

#: the statuses an action never leaves
FINAL_STATUSES = frozenset(status for status, moves in TRANSITIONS.items() if not moves)


class IllegalTransitionError(ResourceManagerError):
    """An action asked to move where :data:`TRANSITIONS` does not let it (409)."""


def can_move(current: ActionStatus, new: ActionStatus) -> bool:
    """Whether an action in ``current`` may move to ``new``."""
    return new in TRANSITIONS[current]


def check_transition(current: ActionStatus, new: ActionStatus) -> None:
    """Refuse a move :data:`TRANSITIONS` does not allow, naming both ends and the allowed ones."""
    if can_move(current, new):
        return
    allowed = ", ".join(sorted(TRANSITIONS[current])) or "nothing: it is final"
    raise IllegalTransitionError(
        f"an action cannot go from {current.value} to {new.value} "
        f"(from {current.value} it may go to {allowed})",
        409,
        "status",
    )
