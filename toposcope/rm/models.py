"""The resource-manager model: nodes, workloads, allocations, action requests and actions.

One API applies recommendations everywhere: the simulator serves it for simulated nodes,
the node agent serves it on real hosts, and the advisor's clients call it. These types are
its one definition: the servers (:mod:`toposcope.rm.api`), the backends
(:class:`toposcope.rm.base.BaseResourceManager`), the clients and the test fakes all build
and read them, and the HTTP API's OpenAPI document is generated from them.

They are frozen standard-library dataclasses (cheap to build in a simulator's inner loop;
``dataclasses.replace``/``asdict`` work), whose field types carry the validation rules of
:mod:`toposcope.rm.fields`. Code that builds them is trusted; what arrives from outside is
checked once, at the boundary, by :mod:`toposcope.rm.validation`, and every backend checks
each request it is asked to carry out the same way.

Actions (all idempotent by ``request_id``, see :mod:`toposcope.rm.idempotency`):

* ``pin``: restrict a workload's threads to ``cpus`` and its memory to ``mems`` (NUMA nodes).
* ``migrate-memory``: move a workload's pages to ``mems``.
* ``place``: start a pending job on ``node`` with ``gpus`` (and optionally ``cpus``/``mems``).
* ``migrate``: move a running job to another ``node``/``gpus`` (checkpoint-restore cost).
* ``release``: give back a workload's GPUs (idle allocations).
* ``unplace``: undo what an earlier action left on ``node`` for the workload: a placement
  (the job waits again), or the steering and scale-down a backend recorded (the advisor's
  revert sends it; see :attr:`ActionState.irreversible`).

An action's answer may say it is **irreversible** (an evicted pod restarted, a job was
requeued): a revert can then only take back what the backend left behind (its steering),
never the disruption itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Annotated, Protocol

from pydantic import ConfigDict, Field

from toposcope.rm.fields import (
    ActionId,
    Count,
    IndexList,
    KindName,
    NodeName,
    RequestId,
    Seconds,
    Text,
    WorkloadName,
)
from toposcope.rm.states import ActionStatus, check_transition


class ActionKind(StrEnum):
    """What an action does to a workload's allocation."""

    PIN = "pin"
    MIGRATE_MEMORY = "migrate-memory"
    PLACE = "place"
    MIGRATE = "migrate"
    RELEASE = "release"
    UNPLACE = "unplace"


class WorkloadState(StrEnum):
    """Where a workload stands: waiting to be placed, holding an allocation, or finished."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


@dataclass(frozen=True)
class Allocation:
    """What a workload holds: its node, CPUs, NUMA nodes for memory and GPU indexes."""

    node: Annotated[NodeName, Field(description="node the workload runs on")]
    cpus: Annotated[IndexList, Field(description="logical CPU numbers")] = field(
        default_factory=list
    )
    mems: Annotated[IndexList, Field(description="NUMA nodes for its memory")] = field(
        default_factory=list
    )
    gpus: Annotated[IndexList, Field(description="GPU indexes on the node")] = field(
        default_factory=list
    )


@dataclass(frozen=True)
class NodeView:
    """A node with its topology (:meth:`toposcope.topology.Topology.to_dict` form) and labels."""

    name: NodeName
    topology: Annotated[dict[str, object], Field(description="the node's topology model")]
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadView:
    """A workload as the resource manager sees it.

    A pending job asking for several nodes (a Slurm job of ``--nodes=N``) says so in
    ``nodes_requested``; its ``gpus_requested`` is then per node, as Slurm counts them.
    """

    name: WorkloadName
    kind: Annotated[KindName, Field(description="kubernetes, slurm, docker, systemd, process...")]
    state: WorkloadState
    allocation: Allocation | None
    gpus_requested: Count = 0
    pinned: bool = False
    nodes_requested: Annotated[
        Count,
        Field(description="nodes a pending job asks for (gpus_requested is then per node)"),
    ] = 1


@dataclass(frozen=True)
class ActionRequest:
    """A request to change one workload's allocation (the body of ``POST /actions``).

    ``request_id`` makes it idempotent (the advisor uses the recommendation id plus the
    action's position; a policy leaves it empty until then). Fields not used by ``kind``
    stay empty. Strict on purpose: a string where a number belongs, a bool for a CPU number
    or an unknown field (a typo such as ``cpu``) is refused rather than guessed at.
    """

    __pydantic_config__ = ConfigDict(extra="forbid")

    request_id: Annotated[
        RequestId,
        Field(description="idempotency key: a repeat does nothing and returns the first action"),
    ]
    kind: ActionKind
    workload: Annotated[WorkloadName, Field(description="the workload to change")]
    node: Annotated[
        NodeName | None, Field(description="target node (place, migrate; unplace: where it was)")
    ] = None
    cpus: Annotated[IndexList, Field(description="CPUs to pin to")] = field(default_factory=list)
    mems: Annotated[IndexList, Field(description="NUMA nodes for memory")] = field(
        default_factory=list
    )
    gpus: Annotated[IndexList, Field(description="GPU indexes (place, migrate, unplace)")] = field(
        default_factory=list
    )
    reason: Annotated[Text, Field(description="why, for the logs")] = ""


@dataclass(frozen=True)
class ActionState:
    """The outcome of an :class:`ActionRequest`, with the allocation before and after.

    ``before`` is what a revert restores. ``status`` only moves the way
    :data:`toposcope.rm.states.TRANSITIONS` allows: use :meth:`advance`.

    ``irreversible`` is the backend's word on undoing it: ``True`` when part of it cannot be
    undone (an eviction), ``False`` when the backend recorded how to undo all of it, and
    ``None`` when it says nothing (the advisor then builds the revert from ``before``). A
    backend that says either undoes the action on an ``unplace`` request for the workload.

    ``note`` is what the backend has to tell the operator about how the action plays out
    where the advisor's request stops (for a placement: who picks the device ids inside the
    node, and the DRA constraint that would pin them).
    """

    id: ActionId
    request: ActionRequest
    status: ActionStatus
    before: Allocation | None = None
    after: Allocation | None = None
    error: str = ""
    cost_seconds: Annotated[Seconds, Field(description="modelled or measured cost, seconds")] = 0.0
    irreversible: Annotated[
        bool | None,
        Field(
            description="true: part of it cannot be undone (an eviction); false: the backend "
            "recorded how to undo it all; null: not said (a revert restores 'before')"
        ),
    ] = None
    note: Annotated[
        str,
        Field(
            max_length=4096,
            description="the backend's word to the operator on how the action plays out "
            "(e.g. who picks the device ids inside the node)",
        ),
    ] = ""

    def advance(self, status: ActionStatus, error: str | None = None) -> ActionState:
        """This action moved on to ``status`` (with ``error`` when given).

        Raises :class:`~toposcope.rm.states.IllegalTransitionError` for a move the state
        machine does not allow (out of a final status, or backwards).
        """
        check_transition(self.status, status)
        return replace(self, status=status, error=self.error if error is None else error)


class ResourceManager(Protocol):
    """The resource-manager API as a Python protocol (servers implement it, clients call it)."""

    def nodes(self) -> list[NodeView]:
        """Every node with its topology."""
        ...

    def workloads(self) -> list[WorkloadView]:
        """Every workload with its allocation."""
        ...

    def apply(self, request: ActionRequest) -> ActionState:
        """Carry out one action, or return the earlier result for a repeated ``request_id``.

        Raises :class:`~toposcope.rm.errors.ResourceManagerError` for requests that cannot
        be carried out (409 for a ``request_id`` reused for a different request).
        """
        ...

    def action(self, action_id: str) -> ActionState:
        """The state of an earlier action, by its id or by the ``request_id`` that created it.

        A client that crashed before reading an answer only knows its request id, so both
        must be accepted. :class:`~toposcope.rm.errors.ResourceManagerError` (404) when
        unknown.
        """
        ...
