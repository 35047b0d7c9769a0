"""The resource-manager API's data model and protocol, shared by its servers and clients.

One API applies recommendations everywhere: the simulator serves it for simulated nodes, the
node agent serves it on real hosts (backed by the ``local`` actuator), and the advisor's
actuators are its clients. Keeping the model in the core lets all three agree without
importing each other.

Actions (all idempotent by ``request_id``; applying the same request twice does nothing the
second time and returns the first action):

* ``pin``: restrict a workload's threads to ``cpus`` and its memory to ``mems`` (NUMA nodes).
* ``migrate-memory``: move a workload's pages to ``mems``.
* ``place``: start a pending job on ``node`` with ``gpus`` (and optionally ``cpus``/``mems``).
* ``migrate``: move a running job to another ``node``/``gpus`` (checkpoint-restore cost).
* ``release``: give back a workload's GPUs (idle allocations).

Every field is a plain JSON type so that the models serialise with ``dataclasses.asdict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class ActionKind(StrEnum):
    """What an action does to a workload's allocation."""

    PIN = "pin"
    MIGRATE_MEMORY = "migrate-memory"
    PLACE = "place"
    MIGRATE = "migrate"
    RELEASE = "release"


class ActionStatus(StrEnum):
    """Where an action stands: accepted and running, done, or failed with a reason."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class Allocation:
    """What a workload holds: its node, CPUs, NUMA nodes for memory, and GPU indexes."""

    node: str
    cpus: list[int] = field(default_factory=list)
    mems: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class NodeView:
    """A node with its topology in :meth:`toposcope.topology.Topology.to_dict` form."""

    name: str
    topology: dict[str, object]
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadView:
    """A workload as the resource manager sees it (``state`` is pending, running or done)."""

    name: str
    kind: str
    state: str
    allocation: Allocation | None
    gpus_requested: int = 0
    pinned: bool = False


@dataclass(frozen=True)
class ActionRequest:
    """A request to change one workload's allocation.

    ``request_id`` makes it idempotent (the advisor uses the recommendation id plus the
    action's position). Fields not used by ``kind`` stay empty.
    """

    request_id: str
    kind: ActionKind
    workload: str
    node: str | None = None
    cpus: list[int] = field(default_factory=list)
    mems: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    reason: str = ""


@dataclass(frozen=True)
class ActionState:
    """The outcome of an :class:`ActionRequest`, with the allocation before and after.

    ``before`` is what a revert restores.
    """

    id: str
    request: ActionRequest
    status: ActionStatus
    before: Allocation | None = None
    after: Allocation | None = None
    error: str = ""
    cost_seconds: float = 0.0


class ResourceManagerError(Exception):
    """A request the resource manager refused (unknown workload, GPUs taken, bad CPUs...).

    ``status`` is the HTTP status a server answers with (400, 404, 409...).
    """

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


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

        Raises :class:`ResourceManagerError` for requests that cannot be carried out.
        """
        ...

    def action(self, action_id: str) -> ActionState:
        """The state of an earlier action, by its id or by the ``request_id`` that created it.

        A client that crashed before reading an answer only knows its request id, so both
        must be accepted. :class:`ResourceManagerError` (404) when unknown.
        """
        ...
