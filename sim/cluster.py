"""The simulated cluster: nodes, workloads, their allocations, and the resource-manager API.

:class:`SimCluster` is a resource-manager backend
(:class:`toposcope.rm.base.BaseResourceManager`: ``nodes()``, ``workloads()``, ``apply()``,
``action()``) over simulated state, so that the HTTP API, the advisor's ``sim`` actuator and
the tests drive it exactly like a real backend. It is thread-safe: every public method holds
one re-entrant lock, which is also the one the base holds while it applies an action.

Time is the :class:`~toposcope.sim.clock.SimClock`'s; the engine (events, counters,
placement checks, the scheduler) is :mod:`toposcope.sim.cluster_core`, the state types
:mod:`toposcope.sim.cluster_state`, the read-only views (snapshots, truth)
:mod:`toposcope.sim.cluster_reads`; this module adds the resource-manager API and actions.

Workload life: ``pending`` (submitted, not placed) -> ``running`` (holding an allocation)
-> ``done`` (its ``duration`` of best-placement work completed). A ``first-fit`` scheduler,
on by default, places pending jobs the way a topology-unaware scheduler would: the first
node with enough free GPUs, the lowest-numbered free GPUs, no CPU or memory pinning. That
is what makes the advisor useful.

Actions (:class:`~toposcope.rm.models.ActionRequest`), validated before anything changes
(the checks every backend shares, :func:`toposcope.rm.validation.check_request`, first):

* unknown workload or node: ``ResourceManagerError`` 404; a workload in the wrong state
  (``place`` on a running job, ``pin`` on a pending one): 409; GPUs held by another
  workload: 409; CPUs, NUMA nodes or GPUs that the node does not have, or a GPU count other
  than the job asked for: 400.
* ``pin`` and ``migrate-memory`` take effect at once; moving pages costs simulated time
  (:data:`MIGRATE_PAGES_BYTES_PER_SECOND`), during which the action is ``running``.
* ``migrate`` checkpoints and restores the job (:func:`checkpoint_restore_seconds`): the
  job holds its new allocation and makes no progress until that time has passed.
* ``release`` takes a workload's GPUs away: a notebook or service keeps running without
  them, a GPU training job goes back to ``pending`` (keeping its progress).
* The same ``request_id`` again follows the one repeat rule of every backend
  (:mod:`toposcope.rm.idempotency`): the same request is answered with the first action's
  state, a different one is a 409.
"""

from __future__ import annotations

from dataclasses import replace

from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    NodeView,
    ResourceManagerError,
    WorkloadView,
)
from toposcope.sim.cluster_reads import SimClusterReads
from toposcope.sim.cluster_state import (
    CHECKPOINT_BYTES_PER_SECOND,
    DONE,
    FIRST_PID,
    MEMORY_CHURN_PER_SECOND,
    MIGRATE_PAGES_BYTES_PER_SECOND,
    PAGE,
    PENDING,
    RESTART_SECONDS,
    RUNNING,
    JobState,
    NodeSnapshot,
    SimNode,
    SimWorkload,
    TruthRow,
    WorkloadSnapshot,
    checkpoint_restore_seconds,
    memory_shares,
)
from toposcope.sim.jobs import JobKind

#: What callers import from here (the state types live in :mod:`.cluster_state`).
__all__ = [
    "CHECKPOINT_BYTES_PER_SECOND",
    "DONE",
    "FIRST_PID",
    "MEMORY_CHURN_PER_SECOND",
    "MIGRATE_PAGES_BYTES_PER_SECOND",
    "PAGE",
    "PENDING",
    "RESTART_SECONDS",
    "RUNNING",
    "JobState",
    "NodeSnapshot",
    "SimCluster",
    "SimNode",
    "SimWorkload",
    "TruthRow",
    "WorkloadSnapshot",
    "checkpoint_restore_seconds",
]


class SimCluster(SimClusterReads):
    """Simulated nodes and workloads behind the resource-manager protocol.

    ``scheduler`` is ``"first-fit"`` (place pending jobs automatically) or ``"none"``.
    """

    # -- ResourceManager ------------------------------------------------------------------------

    def nodes(self) -> list[NodeView]:
        """Every node with its topology (``labels`` include ``template``)."""
        with self._lock:
            views = []
            for node in self._nodes.values():
                if node.view is None:
                    node.view = NodeView(
                        node.name,
                        node.template.topology.to_dict(),
                        {"template": node.template.name, **node.labels},
                    )
                views.append(node.view)
            return views

    def workloads(self) -> list[WorkloadView]:
        """Every workload (pending, running and done) with its allocation."""
        with self._lock:
            self.sync()
            return [self._view(w) for w in self._workloads.values()]

    def workload(self, name: str) -> WorkloadView:
        """One workload; ``ResourceManagerError`` 404 when unknown."""
        with self._lock:
            self.sync()
            return self._view(self._find(name))

    def _current(self, state: ActionState) -> ActionState:
        """A ``running`` action succeeds once its simulated cost has elapsed."""
        self.sync()
        if state.status is ActionStatus.RUNNING and self._done_at[state.id] <= self._time:
            return state.advance(ActionStatus.SUCCEEDED)
        return state

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Validate and carry out one new action (see the module docstring)."""
        self.sync()
        workload = self._find(request.workload)
        kind = ActionKind(request.kind)
        before = workload.allocation
        if kind is ActionKind.PLACE:
            after, cost = self._do_place(workload, request)
        elif kind is ActionKind.MIGRATE:
            after, cost = self._do_migrate(workload, request)
        elif kind is ActionKind.RELEASE:
            after, cost = self._do_release(workload)
        else:
            after, cost = self._do_pin(workload, request, kind)
        action_id = f"act-{len(self._done_at) + 1:06d}"
        self._done_at[action_id] = self._time + cost
        key = (kind.value, "applied")
        self._action_counts[key] = self._action_counts.get(key, 0) + 1
        status = ActionStatus.RUNNING if cost > 0 else ActionStatus.SUCCEEDED
        return ActionState(action_id, request, status, before, after, cost_seconds=cost)

    def _running(self, workload: SimWorkload, kind: ActionKind) -> Allocation:
        if workload.state != RUNNING or workload.allocation is None:
            raise ResourceManagerError(
                f"workload {workload.spec.name} is {workload.state}; {kind.value} needs it running",
                409,
            )
        return workload.allocation

    def _do_place(
        self, workload: SimWorkload, request: ActionRequest
    ) -> tuple[Allocation | None, float]:
        if workload.state != PENDING:
            raise ResourceManagerError(
                f"workload {workload.spec.name} is {workload.state}; place needs it pending",
                409,
            )
        assert request.node is not None  # checked: place needs a node
        wanted = Allocation(
            request.node, list(request.cpus), list(request.mems), list(request.gpus)
        )
        allocation = self._check_placement(workload, wanted)
        self._start(workload, allocation, pinned=bool(request.cpus) and self._is_pinned(allocation))
        return workload.allocation, 0.0

    def _do_migrate(
        self, workload: SimWorkload, request: ActionRequest
    ) -> tuple[Allocation | None, float]:
        self._running(workload, ActionKind.MIGRATE)
        assert request.node is not None  # checked: migrate needs a node
        wanted = Allocation(
            request.node, list(request.cpus), list(request.mems), list(request.gpus)
        )
        allocation = self._check_placement(workload, wanted)
        cost = checkpoint_restore_seconds(workload.spec)
        old = self._remove(workload)
        if old is not None:
            self._refresh(old)
        workload.paused_until = self._time + cost
        self._start(workload, allocation, pinned=bool(request.cpus) and self._is_pinned(allocation))
        return workload.allocation, cost

    def _do_release(self, workload: SimWorkload) -> tuple[Allocation | None, float]:
        current = self._running(workload, ActionKind.RELEASE)
        if workload.spec.kind is JobKind.GPU_TRAIN and workload.spec.gpus:
            node = self._remove(workload)
            workload.state = PENDING
            if node is not None:
                self._refresh(node)
            return None, 0.0
        node = self._nodes[current.node]
        self._integrate(node, self._time)
        workload.allocation = replace(current, gpus=[])
        workload.spec = replace(workload.spec, gpus=0, gpu_demand=0.0, gpu_memory_bytes=0)
        self._refresh(node)
        return workload.allocation, 0.0

    def _do_pin(
        self, workload: SimWorkload, request: ActionRequest, kind: ActionKind
    ) -> tuple[Allocation | None, float]:
        current = self._running(workload, kind)
        if request.node and request.node != current.node:
            raise ResourceManagerError(
                f"{kind.value} acts on the workload's node {current.node}, not {request.node}",
                400,
            )
        wanted = Allocation(
            current.node,
            list(request.cpus) if kind is ActionKind.PIN else list(current.cpus),
            list(request.mems) if request.mems else list(current.mems),
            list(current.gpus),
        )
        allocation = self._check_placement(workload, wanted, allow_shared=True)
        node = self._nodes[current.node]
        self._integrate(node, self._time)
        template = node.template
        threads = workload.spec.threads
        before = memory_shares(current, template, threads)
        after = memory_shares(allocation, template, threads)
        moved = sum(abs(after.get(n, 0.0) - before.get(n, 0.0)) for n in set(before) | set(after))
        cost = moved / 2 * workload.spec.memory_bytes / MIGRATE_PAGES_BYTES_PER_SECOND
        workload.allocation = allocation
        if kind is ActionKind.PIN:
            workload.pinned = self._is_pinned(allocation)
        self._refresh(node)
        return allocation, cost
