"""Carrying out a checked move of several parts at once: the common end of a gang move
(:mod:`toposcope.sim.gang_moves`) and a joint move (:mod:`toposcope.sim.gang_swaps`).

Both check a whole request first and then call :func:`commit_moves`: every moved part leaves
its GPUs before any takes its new ones (so two parts may swap places), each moved job stands
still for its own checkpoint-restore, and each moved job is one recorded ``migrate``
:class:`~toposcope.rm.models.ActionState`, the one with the longest restart under the request
id (the answer), the others under ``<request id>#<n>``. :func:`answered` is the idempotency
both share: a repeated request id with the same request answers the first action, the same id
with another request is a 409.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toposcope.rm import ActionKind, ActionRequest, ActionState, ActionStatus, Allocation
from toposcope.rm.errors import ResourceManagerError
from toposcope.sim.cluster_state import SimWorkload

if TYPE_CHECKING:
    from toposcope.sim.cluster import SimCluster


@dataclass(frozen=True)
class MovedPart:
    """One part that moves: the workload, the job it belongs to, where it goes and whether it
    runs pinned there.
    """

    workload: SimWorkload
    job: str
    allocation: Allocation
    pinned: bool


def answered(cluster: SimCluster, request_id: str, reason: str) -> ActionState | None:
    """The first answer to ``request_id`` when it was seen before with the same ``reason``
    (``None``: a new request); the same id with another request is a 409.
    """
    try:
        known = cluster._book.find(request_id)
    except ResourceManagerError:
        return None
    if known.request.reason != reason:
        raise ResourceManagerError(
            f"request_id {request_id!r} was used for a different request", 409
        )
    return cluster._now(known)


def commit_moves(
    cluster: SimCluster,
    request_id: str,
    reason: str,
    moved: Sequence[MovedPart],
    cost: Mapping[str, float],
) -> ActionState:
    """Move every part of ``moved`` at once, each job standing still for ``cost[job]``
    seconds, and record one ``migrate`` per job (see the module docstring); the answer is
    the action of the job with the longest restart.
    """
    before = {p.workload.spec.name: p.workload.allocation for p in moved}
    for part in moved:
        old = cluster._remove(part.workload)
        if old is not None:
            cluster._refresh(old)
    for part in moved:
        part.workload.paused_until = cluster._time + cost[part.job]
        cluster._start(part.workload, part.allocation, pinned=part.pinned)
    jobs = list(dict.fromkeys(p.job for p in moved))
    answers: list[ActionState] = []
    for number, job in enumerate(sorted(jobs, key=lambda j: -cost[j])):
        first = next(p for p in moved if p.job == job)
        name = first.workload.spec.name
        request = ActionRequest(
            request_id if number == 0 else f"{request_id}#{number}",
            ActionKind.MIGRATE,
            name,
            first.allocation.node,
            gpus=list(first.allocation.gpus),
            reason=reason if number == 0 else f"part of {request_id}",
        )
        action_id = f"act-{len(cluster._done_at) + 1:06d}"
        cluster._done_at[action_id] = cluster._time + cost[job]
        key = (ActionKind.MIGRATE.value, "applied")
        cluster._action_counts[key] = cluster._action_counts.get(key, 0) + 1
        state = ActionState(
            action_id,
            request,
            ActionStatus.RUNNING if cost[job] > 0 else ActionStatus.SUCCEEDED,
            before[name],
            first.workload.allocation,
            cost_seconds=cost[job],
        )
        cluster._book.record(state)
        answers.append(state)
    return answers[0]
