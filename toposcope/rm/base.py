"""What every resource-manager backend inherits: checking, the repeat rule, the action book.

A backend (the simulator, the node agent, the dry run, the test fakes) subclasses
:class:`BaseResourceManager` and writes only what is its own: :meth:`nodes`,
:meth:`workloads` and :meth:`_carry_out` (do one new, checked request and say how it went),
and optionally :meth:`_current` (how a recorded action stands now, for backends whose
actions finish later). :meth:`apply_once` does the rest, under one lock, in this order:

1. :func:`~toposcope.rm.validation.check_request`: 422 for a field that breaks the model,
   400 for a request without what its kind needs;
2. the repeat rule (:mod:`toposcope.rm.idempotency`): a repeat answers the recorded action
   as it stands now, a conflict is 409;
3. :meth:`_carry_out` (for ``unplace``, :meth:`_unplace`), then the new action is recorded.

``unplace`` undoes a placement. A backend that knows how overrides :meth:`_unplace`; the
default carries it out as the ``release`` of the placement's GPUs, which is what undid a
placement before the contract had ``unplace`` (the simulator returns a released training
job to the queue), and answers with the ``unplace`` request.

A refusal raised by :meth:`_carry_out` records nothing. :meth:`apply_once` says whether the
answer was a repeat, which the HTTP API turns into 200 rather than 202.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Protocol

from toposcope.rm.idempotency import ActionBook
from toposcope.rm.models import (
    ActionKind,
    ActionRequest,
    ActionState,
    NodeView,
    ResourceManager,
    WorkloadView,
)
from toposcope.rm.validation import check_request


@dataclass(frozen=True)
class Applied:
    """The answer to a submitted request: the action, and whether the request repeated one."""

    state: ActionState
    repeat: bool


class ActionServer(ResourceManager, Protocol):
    """A resource manager that can say whether an answer was a repeat (what the API serves)."""

    def apply_once(self, request: ActionRequest) -> Applied:
        """Like :meth:`apply`, telling a repeated request from a new one."""
        ...


class BaseResourceManager(ABC):
    """The shared half of every resource-manager backend (see the module docstring).

    ``lock`` serialises state changes; a backend that already has a re-entrant lock for its
    own state passes it, so that one lock covers both.
    """

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self._action_lock = lock if lock is not None else threading.RLock()
        self._book = ActionBook()

    @abstractmethod
    def nodes(self) -> list[NodeView]:
        """Every node with its topology."""

    @abstractmethod
    def workloads(self) -> list[WorkloadView]:
        """Every workload with its allocation."""

    @abstractmethod
    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Do a checked request whose id is new; the new action (its ``request`` is ``request``).

        Raises :class:`~toposcope.rm.errors.ResourceManagerError` to refuse it.
        """

    def _unplace(self, request: ActionRequest) -> ActionState:
        """Undo a placement (see the module docstring; the default releases its GPUs)."""
        state = self._carry_out(replace(request, kind=ActionKind.RELEASE))
        return replace(state, request=request)

    def _current(self, state: ActionState) -> ActionState:
        """How a recorded action stands now (default: as recorded). Use ``state.advance``."""
        return state

    def _now(self, state: ActionState) -> ActionState:
        fresh = self._current(state)
        if fresh != state:
            self._book.update(fresh)
        return fresh

    def apply_once(self, request: ActionRequest) -> Applied:
        """Check, apply the repeat rule, carry out and record (see the module docstring)."""
        checked = check_request(request)
        with self._action_lock:
            known = self._book.repeat_of(checked)
            if known is not None:
                return Applied(self._now(known), repeat=True)
            if checked.kind == ActionKind.UNPLACE:
                state = self._unplace(checked)
            else:
                state = self._carry_out(checked)
            self._book.record(state)
            return Applied(state, repeat=False)

    def apply(self, request: ActionRequest) -> ActionState:
        """Carry out one action, or answer the earlier one for a repeated ``request_id``."""
        return self.apply_once(request).state

    def action(self, action_id: str) -> ActionState:
        """An earlier action, by its id or by its request id, as it stands now (404 unknown)."""
        with self._action_lock:
            return self._now(self._book.find(action_id))

    def recorded(self) -> list[ActionState]:
        """Every action this backend created, oldest first, as last recorded."""
        with self._action_lock:
            return self._book.states()
