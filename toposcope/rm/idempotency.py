"""The repeat rule: what the same ``request_id`` means, written once for every backend.

A client that lost an answer (a timeout, a crash between sending and reading) sends its
request again with the same ``request_id``, and must not have it carried out twice. So:

- the **same request id with the same request** is a *repeat*: nothing is done again and
  the answer is the action the first one created, as it stands now. Two requests are the
  same when :func:`request_key` is: the same kind, workload and node, and the same *sets*
  of CPUs, NUMA nodes and GPUs (``[1, 0]`` repeats ``[0, 1]``); the ``reason`` is for the
  logs and does not count;
- the **same request id with a different request** is a conflict:
  :class:`~toposcope.rm.errors.ResourceManagerError` 409 naming ``request_id``, and
  nothing is done;
- a request that was **refused** created no action, so its id may be used again.

:class:`ActionBook` keeps a backend's actions and applies the rule;
:class:`toposcope.rm.base.BaseResourceManager` holds one and is what every backend builds on.
"""

from __future__ import annotations

from toposcope.rm.errors import ResourceManagerError
from toposcope.rm.models import ActionKind, ActionRequest, ActionState
from toposcope.rm.states import check_transition


def request_key(request: ActionRequest) -> tuple[object, ...]:
    """What makes two requests the same request (see the module docstring)."""
    return (
        ActionKind(request.kind),
        request.workload,
        request.node,
        tuple(sorted(set(request.cpus))),
        tuple(sorted(set(request.mems))),
        tuple(sorted(set(request.gpus))),
    )


def same_request(first: ActionRequest, second: ActionRequest) -> bool:
    """Whether ``second`` asks for what ``first`` asked (so that one repeats the other)."""
    return request_key(first) == request_key(second)


class ActionBook:
    """The actions a backend created, by action id and by request id, in creation order.

    Not locked by itself: its owner (:class:`~toposcope.rm.base.BaseResourceManager`) holds
    one lock around looking up, carrying out and recording.
    """

    def __init__(self) -> None:
        self._states: dict[str, ActionState] = {}
        self._by_request: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._states)

    def states(self) -> list[ActionState]:
        """Every recorded action as it was last recorded, oldest first."""
        return list(self._states.values())

    def repeat_of(self, request: ActionRequest) -> ActionState | None:
        """The action ``request`` repeats, ``None`` for a new request id, 409 for a conflict."""
        action_id = self._by_request.get(request.request_id)
        if action_id is None:
            return None
        known = self._states[action_id]
        if not same_request(known.request, request):
            raise ResourceManagerError(
                f"request_id {request.request_id!r} was used for a different request "
                f"(action {known.id}: {known.request.kind} {known.request.workload}); "
                "a new request needs a new request_id",
                409,
                "request_id",
            )
        return known

    def record(self, state: ActionState) -> None:
        """Keep a new action (its id and its request id must both be new)."""
        if state.id in self._states or state.request.request_id in self._by_request:
            raise ValueError(f"action {state.id} ({state.request.request_id}) recorded twice")
        self._states[state.id] = state
        self._by_request[state.request.request_id] = state.id

    def find(self, action_id: str) -> ActionState:
        """An action by its id, else by its request id; 404 when neither is known."""
        key = action_id if action_id in self._states else self._by_request.get(action_id)
        if key is None:
            raise ResourceManagerError(f"unknown action {action_id!r}", 404)
        return self._states[key]

    def update(self, state: ActionState) -> None:
        """Record a known action's new state; its status must move as the state machine allows."""
        known = self._states.get(state.id)
        if known is None or known.request != state.request:
            raise ValueError(f"action {state.id} is not recorded with this request")
        if state.status != known.status:
            check_transition(known.status, state.status)
        self._states[state.id] = state
