"""A whole-gang move in the simulated cluster: every part of a multi-node job onto its node
and GPUs as one action, the simulator's side of a fabric placement.

The contract's :class:`~toposcope.rm.models.ActionRequest` names one node, so a gang cannot
be moved by its parts one at a time without the first part's move stopping every rank (and
two parts swapping nodes would each find the other's GPUs taken). :func:`move_gang` checks
the whole move first and then carries it out at once:

* the job is a gang's name or one of its parts' names; every part must be running;
* ``nodes`` are as many distinct known nodes as the gang has parts; a part already on one
  of them stays where it is, the others take the remaining nodes in the order given;
* on its new node a part keeps its GPU indices, CPUs and memory nodes when those GPUs are
  free (a pinned rank stays pinned on an identical node), else it takes the lowest free GPUs
  unpinned; GPUs held by the gang's own parts count as free, GPUs held by any other job
  refuse the move (409) before anything changes;
* ``places``, when given (one per node, in the order of ``nodes``), names the GPUs, CPUs and
  memory nodes the part on that node takes instead: a part may then keep its node and move
  to other GPUs of it (onto the GPUs nearest a cabled NIC, say). The named GPUs must be free
  or held by the gang's own parts, as above (409 otherwise); the part is pinned when CPUs are
  named, and a part whose place is where it runs now does not move. A ``null`` place leaves
  that node's part to the rules above (a part staying on its node keeps all it has);
* every moved part pays the gang's slowest checkpoint-restore
  (:func:`~toposcope.sim.cluster_state.checkpoint_restore_seconds`), the cost the judge
  charges every rank of a moved gang; the gang stands still until then.

The answer is one :class:`~toposcope.rm.models.ActionState` (kind ``migrate``, for the first
moved part, its reason naming every part's new place), recorded under the request id so a
repeat answers the first action and does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from pydantic import ConfigDict, Field

from toposcope.rm import ActionState, Allocation
from toposcope.rm.errors import ResourceManagerError
from toposcope.rm.fields import IndexList, NodeName, RequestId, Text, WorkloadName
from toposcope.sim.cluster_state import RUNNING, SimWorkload, checkpoint_restore_seconds
from toposcope.sim.move_commit import MovedPart, answered, commit_moves

if TYPE_CHECKING:
    from toposcope.sim.cluster import SimCluster

#: the most parts one gang move may name
MAX_PARTS = 1024


@dataclass(frozen=True)
class PartPlace:
    """Where a gang's part on one node goes on that node: its GPUs, CPUs and memory nodes."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    gpus: Annotated[IndexList, Field(min_length=1, description="GPU indexes")]
    cpus: Annotated[IndexList, Field(description="CPUs to pin to (empty: unpinned)")] = field(
        default_factory=list
    )
    mems: Annotated[IndexList, Field(description="NUMA nodes for memory")] = field(
        default_factory=list
    )


@dataclass(frozen=True)
class GangMove:
    """A whole-gang move: the body of the simulator's ``POST /api/v1/gang-moves``."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    request_id: Annotated[RequestId, Field(description="idempotency key, as for an action")]
    job: Annotated[WorkloadName, Field(description="the gang's name or one of its parts'")]
    nodes: Annotated[
        list[NodeName],
        Field(min_length=1, max_length=MAX_PARTS, description="one node per part"),
    ] = field(default_factory=list)
    reason: Annotated[Text, Field(description="why, for the logs")] = ""
    places: Annotated[
        list[PartPlace | None],
        Field(max_length=MAX_PARTS, description="empty, or one place (or null) per node"),
    ] = field(default_factory=list)


def move_gang(cluster: SimCluster, move: GangMove) -> ActionState:
    """Carry out ``move`` on ``cluster`` whole, or refuse it with nothing changed (see the
    module docstring); a repeated request id answers the first action.
    """
    with cluster._action_lock:
        known = answered(cluster, move.request_id, _reason(move))
        if known is not None:
            return known
        cluster.sync()
        parts = _parts(cluster, move.job)
        targets = _targets(cluster, parts, move.nodes, move.places)
        moved = [
            MovedPart(w, move.job, a, _pinned(cluster, w, a, bool(move.places)))
            for w, a in targets
            if w.allocation != a
        ]
        if not moved:
            raise ResourceManagerError(f"job {move.job} already runs on {move.nodes}", 409)
        cost = max(checkpoint_restore_seconds(w.spec) for w in parts)
        return commit_moves(cluster, move.request_id, _reason(move), moved, {move.job: cost})


def _reason(move: GangMove) -> str:
    """The recorded reason: what was asked, so a repeat can be told from a new request."""
    text = f"gang move of {move.job} onto {','.join(move.nodes)}"
    if move.places:
        text += " GPUs " + ";".join(",".join(map(str, p.gpus)) if p else "-" for p in move.places)
    return f"{text}: {move.reason}" if move.reason else text


def _parts(cluster: SimCluster, job: str) -> list[SimWorkload]:
    """The running parts of ``job`` (a gang or one of its parts); 404 / 409 otherwise."""
    book = cluster.gangs
    if book is None:
        raise ResourceManagerError("this simulated cluster has no multi-node jobs", 404)
    gang = job if job in book.gangs else book.part_of.get(job)
    if gang is None:
        raise ResourceManagerError(f"unknown multi-node job {job!r}", 404)
    parts = [cluster._find(p) for p in book.gangs[gang].parts]
    idle = [w.spec.name for w in parts if w.state != RUNNING or w.allocation is None]
    if idle:
        raise ResourceManagerError(
            f"multi-node job {gang}: parts {idle} are not running; a move needs every part", 409
        )
    return parts


def _pinned(cluster: SimCluster, workload: SimWorkload, to: Allocation, placed: bool) -> bool:
    """Whether the part runs pinned at ``to``: as it was when it keeps its CPUs, and where
    ``places`` named its CPUs, when they pin it (the simulator's rule for a migrate).
    """
    current = workload.allocation
    if placed and (current is None or current.cpus != to.cpus):
        return bool(to.cpus) and cluster._is_pinned(to)
    return workload.pinned and current is not None and current.cpus == to.cpus


def _targets(
    cluster: SimCluster,
    parts: list[SimWorkload],
    nodes: list[str],
    places: list[PartPlace | None],
) -> list[tuple[SimWorkload, Allocation]]:
    """Each part's checked new allocation (see the module docstring); refusals raised."""
    if len(set(nodes)) != len(nodes) or len(nodes) != len(parts):
        raise ResourceManagerError(
            f"a move of {len(parts)} parts needs {len(parts)} distinct nodes, got {nodes}", 400
        )
    if places and len(places) != len(nodes):
        raise ResourceManagerError(
            f"{len(places)} places for {len(nodes)} nodes: give one per node or none", 400
        )
    unknown = [n for n in nodes if n not in cluster._nodes]
    if unknown:
        raise ResourceManagerError(f"unknown node(s) {unknown}", 404)
    names = {w.spec.name for w in parts}
    staying = {w.allocation.node: w for w in parts if w.allocation and w.allocation.node in nodes}
    free_nodes = [n for n in nodes if n not in staying]
    out: list[tuple[SimWorkload, Allocation]] = []
    for workload in parts:
        current = workload.allocation
        assert current is not None  # checked by _parts
        node = current.node if current.node in staying else free_nodes.pop(0)
        place = places[nodes.index(node)] if places else None
        if place is not None:
            out.append((workload, _named(cluster, workload, node, place, names)))
        elif current.node in staying:
            out.append((workload, current))
        else:
            out.append((workload, _allocation(cluster, workload, current, node, names)))
    return out


def _named(
    cluster: SimCluster, workload: SimWorkload, node: str, place: PartPlace, gang: set[str]
) -> Allocation:
    """The part's place on ``node`` as ``place`` names it; 409 when another job holds one of
    its GPUs, 400 for GPUs, CPUs or memory nodes the node lacks or a wrong GPU count.
    """
    owners = cluster._held_gpus(cluster._nodes[node])
    taken = sorted({owners[g] for g in place.gpus if g in owners and owners[g] not in gang})
    if taken:
        raise ResourceManagerError(
            f"GPUs {place.gpus} on {node} are held by {', '.join(taken)}", 409
        )
    wanted = Allocation(node, list(place.cpus), list(place.mems), list(place.gpus))
    return cluster._check_placement(workload, wanted, allow_shared=True)


def _allocation(
    cluster: SimCluster, workload: SimWorkload, current: Allocation, node: str, gang: set[str]
) -> Allocation:
    """The part's place on ``node``: its own GPUs/CPUs/memory if free there, else the lowest
    free GPUs unpinned; 409 when the node lacks the GPUs outside the gang.
    """
    held = {g for g, owner in cluster._held_gpus(cluster._nodes[node]).items() if owner not in gang}
    known = sorted(g.index for g in cluster._nodes[node].template.gpus)
    if not held.intersection(current.gpus) and set(current.gpus) <= set(known):
        wanted = Allocation(node, list(current.cpus), list(current.mems), list(current.gpus))
        return cluster._check_placement(workload, wanted, allow_shared=True)
    free = [g for g in known if g not in held]
    need = workload.spec.gpus
    if len(free) < need:
        raise ResourceManagerError(
            f"node {node} has {len(free)} GPU(s) free outside the gang; "
            f"{workload.spec.name} needs {need}",
            409,
        )
    return cluster._check_placement(workload, Allocation(node, [], [], free[:need]), True)


__all__ = ["MAX_PARTS", "GangMove", "PartPlace", "move_gang"]
