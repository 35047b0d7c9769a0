"""A joint move in the simulated cluster: several jobs (multi-node gangs, and the single-node
jobs they make room with) onto new nodes and GPUs as one action, the simulator's side of a
fabric re-placement that swaps or rotates gangs between leaves.

One gang moved alone (:mod:`toposcope.sim.gang_moves`) needs a free cell to go to. When every
tighter cell is held by another spread gang, the way out is to move them together: gang A
takes the node gang B leaves while B takes A's, possibly with a small job moved aside. Done
one job at a time, the first move would find the other's GPUs taken. :func:`move_jobs`
checks the whole request first and then carries it out at once:

* each listed job is a gang (every one of its parts listed, once) or a single-node workload
  outside every gang (one part: itself); every part must be running and no part is listed
  twice;
* each part names its node and its GPU indices (as many as it holds now, on the node). GPUs
  held by any part of the request count as free; GPUs held by any other workload, or given
  to two parts of the request, refuse the whole request (409) before anything changes;
* a part that keeps its GPU indices keeps its CPUs and memory nodes (a pinned rank stays
  pinned on an identical node); one on other indices runs unpinned, unless the request names
  its CPUs and memory nodes there (a job swapping GPUs with another on one node, pinned next
  to its new GPUs); a part given its own node and GPUs stays where it is;
* every job with a part that moves pays its checkpoint-restore (a gang its slowest part's,
  :func:`~toposcope.sim.cluster_state.checkpoint_restore_seconds`), the cost the judge
  charges it.

Each moved job is one recorded :class:`~toposcope.rm.models.ActionState` (kind ``migrate``
for its first moved part, so the judge charges every job its own restart): the one with the
longest restart under the request id (the answer: the move is done when it is), the others
under ``<request id>#<n>``. A repeat of the request id with the same request answers the
first action and does nothing; the same id with another request is a 409.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from pydantic import ConfigDict, Field

from toposcope.rm import ActionState, Allocation
from toposcope.rm.errors import ResourceManagerError
from toposcope.rm.fields import IndexList, NodeName, RequestId, Text, WorkloadName
from toposcope.sim.cluster_state import RUNNING, SimWorkload, checkpoint_restore_seconds
from toposcope.sim.gang_moves import MAX_PARTS
from toposcope.sim.move_commit import MovedPart, answered, commit_moves

if TYPE_CHECKING:
    from toposcope.sim.cluster import SimCluster

#: the most jobs one joint move may name
MAX_JOBS = 256


@dataclass(frozen=True)
class PartPlace:
    """Where one part goes: its workload name, node and GPU indices there."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    part: Annotated[WorkloadName, Field(description="the part's workload name")]
    node: Annotated[NodeName, Field(description="the node it runs on after the move")]
    gpus: Annotated[IndexList, Field(description="its GPU indices on that node")] = field(
        default_factory=list
    )
    cpus: Annotated[
        IndexList, Field(description="CPUs to pin it to there (empty: as the module says)")
    ] = field(default_factory=list)
    mems: Annotated[IndexList, Field(description="its memory nodes there, with cpus")] = field(
        default_factory=list
    )


@dataclass(frozen=True)
class JobPlace:
    """One job of a joint move: a gang with every part, or a single-node workload."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    job: Annotated[WorkloadName, Field(description="the gang's name, or the workload's")]
    parts: Annotated[
        list[PartPlace],
        Field(min_length=1, max_length=MAX_PARTS, description="every part's new place"),
    ] = field(default_factory=list)


@dataclass(frozen=True)
class JointMove:
    """Several jobs moved at once: the multi-job body of ``POST /api/v1/gang-moves``."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    request_id: Annotated[RequestId, Field(description="idempotency key, as for an action")]
    jobs: Annotated[
        list[JobPlace],
        Field(min_length=1, max_length=MAX_JOBS, description="the jobs and their parts"),
    ] = field(default_factory=list)
    reason: Annotated[Text, Field(description="why, for the logs")] = ""


@dataclass(frozen=True)
class _Placed:
    """One part of the request, checked: the workload, its job, its new allocation and
    whether it runs pinned there (``None``: as it ran, when it keeps its CPUs).
    """

    workload: SimWorkload
    job: str
    allocation: Allocation
    pinned: bool | None = None

    @property
    def moves(self) -> bool:
        now = self.workload.allocation
        return (
            now is None
            or now.node != self.allocation.node
            or sorted(now.gpus) != sorted(self.allocation.gpus)
        )


def move_jobs(cluster: SimCluster, move: JointMove) -> ActionState:
    """Carry out ``move`` on ``cluster`` at once, or refuse it with nothing changed (see the
    module docstring); a repeated request id answers the first action.
    """
    with cluster._action_lock:
        known = answered(cluster, move.request_id, _reason(move))
        if known is not None:
            return known
        cluster.sync()
        placed = _check(cluster, move)
        moving_jobs = list(dict.fromkeys(p.job for p in placed if p.moves))
        if not moving_jobs:
            raise ResourceManagerError("every part already runs where the move puts it", 409)
        cost = {
            job: max(checkpoint_restore_seconds(p.workload.spec) for p in placed if p.job == job)
            for job in moving_jobs
        }
        moved = [
            MovedPart(
                p.workload,
                p.job,
                p.allocation,
                p.pinned
                if p.pinned is not None
                else p.workload.pinned
                and p.workload.allocation is not None
                and p.workload.allocation.cpus == p.allocation.cpus,
            )
            for p in placed
            if p.moves
        ]
        return commit_moves(cluster, move.request_id, _reason(move), moved, cost)


def _reason(move: JointMove) -> str:
    """The recorded reason: what was asked, so a repeat can be told from a new request."""
    text = "joint move: " + "; ".join(
        f"{j.job} -> " + ",".join(f"{p.part}@{p.node}{sorted(p.gpus)}" for p in j.parts)
        for j in move.jobs
    )
    return f"{text}: {move.reason}" if move.reason else text


def _check(cluster: SimCluster, move: JointMove) -> list[_Placed]:
    """Every part of the request with its checked allocation; refusals raised first."""
    parts: list[tuple[SimWorkload, str, PartPlace]] = []
    seen: set[str] = set()
    for entry in move.jobs:
        for workload, place in _job_parts(cluster, entry):
            name = workload.spec.name
            if name in seen:
                raise ResourceManagerError(f"part {name} is listed twice", 400)
            seen.add(name)
            if workload.state != RUNNING or workload.allocation is None:
                raise ResourceManagerError(
                    f"{name} is not running; a joint move moves running jobs only", 409
                )
            parts.append((workload, entry.job, place))
    claimed: dict[str, dict[int, str]] = {}
    result: list[_Placed] = []
    for workload, job, place in parts:
        node = cluster._nodes.get(place.node)
        if node is None:
            raise ResourceManagerError(f"unknown node {place.node!r}", 404)
        name = workload.spec.name
        others = {g: o for g, o in cluster._held_gpus(node).items() if o not in seen}
        taken = claimed.setdefault(place.node, {})
        clash = sorted({g for g in place.gpus if g in others or g in taken})
        if clash:
            owners = sorted({others.get(g) or taken[g] for g in clash})
            raise ResourceManagerError(
                f"GPUs {clash} on {place.node} for {name} are held by {', '.join(owners)}", 409
            )
        for gpu in place.gpus:
            taken[gpu] = name
        current = workload.allocation
        assert current is not None  # checked above
        pinned: bool | None = None
        if place.cpus:
            wanted = Allocation(place.node, list(place.cpus), list(place.mems), list(place.gpus))
        elif sorted(place.gpus) == sorted(current.gpus):
            wanted = Allocation(place.node, list(current.cpus), list(current.mems), place.gpus)
        else:
            wanted = Allocation(place.node, [], [], list(place.gpus))
        checked = cluster._check_placement(workload, wanted, allow_shared=True)
        if place.cpus:
            pinned = cluster._is_pinned(checked)
        result.append(_Placed(workload, job, checked, pinned))
    return result


def _job_parts(cluster: SimCluster, entry: JobPlace) -> list[tuple[SimWorkload, PartPlace]]:
    """The workloads of one listed job, each with its place; a gang must list every part,
    a single-node workload itself alone (400 / 404 otherwise).
    """
    book = cluster.gangs
    listed = [(cluster._find(p.part), p) for p in entry.parts]
    gang = book.gangs.get(entry.job) if book is not None else None
    if gang is not None:
        names = sorted(w.spec.name for w, _ in listed)
        if names != sorted(gang.parts):
            raise ResourceManagerError(
                f"multi-node job {entry.job} has parts {sorted(gang.parts)}; the move lists "
                f"{names}: a gang moves with every part",
                400,
            )
        return listed
    workload = cluster._find(entry.job)
    if book is not None and workload.spec.name in book.part_of:
        raise ResourceManagerError(
            f"{entry.job} is a part of multi-node job {book.part_of[workload.spec.name]}: "
            "name the gang and list every part",
            400,
        )
    if len(listed) != 1 or listed[0][0] is not workload:
        raise ResourceManagerError(
            f"single-node job {entry.job} is listed with parts other than itself", 400
        )
    return listed


__all__ = ["MAX_JOBS", "JobPlace", "JointMove", "PartPlace", "move_jobs"]
