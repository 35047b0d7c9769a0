"""The simulated cluster: nodes, workloads, their allocations, and the resource-manager API.

:class:`SimCluster` is a resource-manager backend
(:class:`toposcope.rm.base.BaseResourceManager`: ``nodes()``, ``workloads()``, ``apply()``,
``action()``) over simulated state, so that the HTTP API, the advisor's ``sim`` actuator and
the tests drive it exactly like a real backend. It is thread-safe: every public method holds
one re-entrant lock, which is also the one the base holds while it applies an action.

Time is the :class:`~toposcope.sim.clock.SimClock`'s. State is advanced lazily and exactly:
jobs arrive, finish and resume (after a checkpoint-restore) at events kept in a heap; each
public call first processes the events due, and each node's counters (job progress, CPU
seconds per CPU, numastat pages) are integrated only when that node is read or changes.
Between events every job runs at the constant speed the performance model
(:func:`toposcope.sim.model.evaluate`) gives for its allocation and its co-runners.

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

import heapq
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from toposcope.names import (
    OBJECT_NAME_RULE,
    InvalidNameError,
    check_node_name,
    check_object_name,
)
from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    BaseResourceManager,
    NodeView,
    ResourceManagerError,
    WorkloadState,
    WorkloadView,
)
from toposcope.sim.clock import SimClock
from toposcope.sim.jobs import GIB, JobKind, JobSpec, is_unit_name
from toposcope.sim.model import (
    CoRunner,
    Performance,
    best_allocation,
    evaluate,
    memory_flows,
    placement,
    thread_shares,
)
from toposcope.sim.placement import Footprint, memory_layout
from toposcope.sim.templates import NodeTemplate

PENDING = WorkloadState.PENDING
RUNNING = WorkloadState.RUNNING
DONE = WorkloadState.DONE

#: Page-migration speed of ``migrate_pages`` / cpuset memory migration (bytes per second).
MIGRATE_PAGES_BYTES_PER_SECOND = 4 * GIB
#: Checkpoint write plus restore read speed (bytes per second) and a fixed restart cost.
CHECKPOINT_BYTES_PER_SECOND = 2 * GIB
RESTART_SECONDS = 20.0
#: Share of a job's memory it allocates (touches anew) per second: drives numastat counters.
MEMORY_CHURN_PER_SECOND = 0.01
PAGE = 4096
#: The first process id given to a workload on each node.
FIRST_PID = 1000


def checkpoint_restore_seconds(job: JobSpec) -> float:
    """Simulated seconds a ``migrate`` costs: a restart plus writing and reading back the
    job's host memory and GPU memory at :data:`CHECKPOINT_BYTES_PER_SECOND`.
    """
    state = job.memory_bytes + job.gpus * job.gpu_memory_bytes
    return RESTART_SECONDS + state / CHECKPOINT_BYTES_PER_SECOND


@dataclass
class SimNode:
    """A node: its template and the counters integrated up to ``last_time``."""

    name: str
    template: NodeTemplate
    labels: dict[str, str] = field(default_factory=dict)
    workloads: set[str] = field(default_factory=set)
    last_time: float = 0.0
    cpu_busy: dict[int, float] = field(default_factory=dict)
    numastat: dict[int, dict[str, float]] = field(default_factory=dict)
    next_pid: int = FIRST_PID
    version: int = 0
    view: NodeView | None = None


@dataclass
class SimWorkload:
    """A workload's mutable state (its :class:`JobSpec` is fixed)."""

    spec: JobSpec
    state: WorkloadState = PENDING
    allocation: Allocation | None = None
    pinned: bool = False
    progress: float = 0.0
    cpu_seconds: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    paused_until: float = 0.0
    perf: Performance | None = None
    pid: int = 0
    version: int = 0
    initial: Allocation | None = None


@dataclass(frozen=True)
class WorkloadSnapshot:
    """What a node's metrics need of one workload at one instant."""

    name: str
    spec: JobSpec
    allocation: Allocation
    pid: int
    thread_cpus: tuple[int, ...]
    cpu_seconds: float
    memory_by_node: dict[int, int]
    perf: Performance
    paused: bool


@dataclass(frozen=True)
class NodeSnapshot:
    """A node's state at simulated time ``now`` (for its metrics tree and fake NVML).

    ``cpu_busy``, ``numastat`` and the workloads' ``cpu_seconds`` are counters in the
    clock's counter time, ``counter_time`` (:meth:`~toposcope.sim.clock.SimClock.counter_time`:
    wall-clock seconds when the simulation runs at a speed), which the uptime they are
    compared with must follow too.
    """

    name: str
    template: NodeTemplate
    now: float
    version: int
    workloads: tuple[WorkloadSnapshot, ...]
    cpu_busy: dict[int, float]
    numastat: dict[int, dict[str, float]]
    counter_time: float = 0.0


@dataclass(frozen=True)
class TruthRow:
    """Ground truth of one workload: its throughput now and the best it could have."""

    name: str
    kind: str
    state: str
    node: str
    throughput: float
    best_throughput: float
    slowdown: float
    factors: dict[str, float]
    link_class: str
    progress_ratio: float | None


@dataclass(frozen=True)
class JobState:
    """One workload as the oracle sees it: its spec (as changed by actions, e.g. a released
    notebook has no GPUs), its state and its allocation (``None`` unless running).
    """

    name: str
    spec: JobSpec
    state: str
    allocation: Allocation | None


class SimCluster(BaseResourceManager):
    """Simulated nodes and workloads behind the resource-manager protocol.

    ``scheduler`` is ``"first-fit"`` (place pending jobs automatically) or ``"none"``.
    """

    def __init__(self, clock: SimClock | None = None, scheduler: str = "first-fit") -> None:
        if scheduler not in ("first-fit", "none"):
            raise ValueError(f"scheduler must be first-fit or none, not {scheduler!r}")
        self.clock = clock if clock is not None else SimClock()
        self.scheduler = scheduler
        self._lock = threading.RLock()
        super().__init__(lock=self._lock)
        self._nodes: dict[str, SimNode] = {}
        self._workloads: dict[str, SimWorkload] = {}
        self._events: list[tuple[float, int, str, str, int]] = []
        self._seq = 0
        self._done_at: dict[str, float] = {}
        self._time = self.clock.now()
        self._best_cache: dict[tuple[object, ...], float] = {}
        self._action_counts: dict[tuple[str, str], int] = {}
        self._finished: list[str] = []

    # -- building ---------------------------------------------------------------------------

    def add_node(
        self, name: str, template: NodeTemplate, labels: dict[str, str] | None = None
    ) -> None:
        """Add a node (names are unique, host names that are also safe as one path
        component: :func:`toposcope.names.check_node_name`, ``check_object_name``).
        """
        check_node_name(name)
        check_object_name(name, "node name")
        with self._lock:
            if name in self._nodes:
                raise ValueError(f"node {name!r} added twice")
            node = SimNode(name, template, dict(labels or {}), last_time=self._time)
            node.numastat = {
                n: {"hit": 0.0, "miss": 0.0, "foreign": 0.0, "local": 0.0, "other": 0.0,
                    "interleave_hit": 0.0}
                for n in template.numa_ids
            }  # fmt: skip
            self._nodes[name] = node

    def submit(self, job: JobSpec, placement: Allocation | None = None) -> None:
        """Add a job; it arrives at ``job.submit_time`` and starts on ``placement`` when given
        (then validated like a ``place``, GPUs shared with other workloads allowed), else
        waits for the scheduler or a ``place`` action. A name that is not a unit name
        (:func:`~toposcope.sim.jobs.unit_name`) is an ``InvalidNameError``.
        """
        if not is_unit_name(job.name):
            raise InvalidNameError(f"workload name {job.name!r} is not {OBJECT_NAME_RULE}")
        with self._lock:
            if job.name in self._workloads:
                raise ValueError(f"workload {job.name!r} submitted twice")
            workload = SimWorkload(job, initial=placement)
            if placement is not None:
                self._check_placement(workload, placement, allow_shared=True)
            self._workloads[job.name] = workload
            if job.submit_time <= self._time:
                self._arrive(workload, self._time)
            else:
                self._push(job.submit_time, "arrive", job.name, 0)

    # -- time ---------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """Simulated time the state was last advanced to."""
        return self._time

    def sync(self) -> float:
        """Process every event due by the clock's time; returns that time."""
        with self._lock:
            target = self.clock.now()
            while self._events and self._events[0][0] <= target:
                when, _, kind, name, version = heapq.heappop(self._events)
                self._time = max(self._time, when)
                self._handle(kind, name, version)
            self._time = max(self._time, target)
            return self._time

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` ahead and process what happened meanwhile."""
        self.clock.advance(seconds)
        return self.sync()

    def next_event_time(self) -> float | None:
        """When the next arrival, finish or resume is due (``None`` when none is), so that a
        replay can jump the clock from event to event (some may turn out stale).
        """
        with self._lock:
            return self._events[0][0] if self._events else None

    def finished(self, since: int = 0) -> list[str]:
        """Names of the workloads that finished, in order, from the ``since``-th on (a replay
        passes how many it has seen, to learn of new ones without reading every workload).
        """
        with self._lock:
            return self._finished[since:]

    def _push(self, when: float, kind: str, name: str, version: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, name, version))

    def _handle(self, kind: str, name: str, version: int) -> None:
        workload = self._workloads[name]
        if kind == "arrive":
            self._arrive(workload, self._time)
        elif kind == "finish" and version == workload.version and workload.state == RUNNING:
            node = self._nodes[workload.allocation.node] if workload.allocation else None
            if node is not None:
                self._integrate(node, self._time)
            self._finish(workload)
        elif kind == "resume" and version == workload.version and workload.allocation:
            node = self._nodes[workload.allocation.node]
            self._integrate(node, self._time)
            self._refresh(node)

    def _arrive(self, workload: SimWorkload, when: float) -> None:
        if workload.initial is not None:
            try:
                self._check_placement(workload, workload.initial, allow_shared=True)
            except ResourceManagerError:
                workload.initial = None
            else:
                self._start(workload, workload.initial, pinned=self._is_pinned(workload.initial))
                return
        self._schedule()

    # -- integration ----------------------------------------------------------------------------

    def _integrate(self, node: SimNode, until: float) -> None:
        """Advance one node's counters from ``node.last_time`` to ``until``."""
        start = node.last_time
        if until <= start:
            return
        template = node.template
        layout = self._memory_layout(node)
        scale = self.clock.counter_scale()
        for name in node.workloads:
            workload = self._workloads[name]
            perf = workload.perf
            if perf is None or workload.allocation is None:
                continue
            active = until - max(start, workload.paused_until)
            if active <= 0:
                continue
            if not perf.stalled:
                workload.progress += active / perf.slowdown
            spec = workload.spec
            seconds = perf.cpu_rate * active * scale
            workload.cpu_seconds += seconds
            cpus = placement(workload.allocation, template, spec.threads)[2]
            per_thread = seconds / len(cpus)
            for cpu in cpus:
                node.cpu_busy[cpu] = node.cpu_busy.get(cpu, 0.0) + per_thread
            if spec.memory_bytes and not perf.stalled:
                pages = spec.memory_bytes / PAGE * MEMORY_CHURN_PER_SECOND * active * scale
                for (source, target), weight in layout[name].items():
                    amount = pages * weight
                    stat = node.numastat[target]
                    if source == target:
                        stat["hit"] += amount
                        stat["local"] += amount
                    else:
                        stat["miss"] += amount
                        stat["other"] += amount
                        node.numastat[source]["foreign"] += amount
        node.last_time = until

    def _memory_layout(self, node: SimNode) -> dict[str, dict[tuple[int, int], float]]:
        """Each placed workload's (thread node, memory node) page shares on ``node``, after
        full NUMA nodes spilled (:func:`~toposcope.sim.placement.memory_layout`).
        """
        names: list[str] = []
        jobs: list[Footprint] = []
        for name in sorted(node.workloads):
            workload = self._workloads[name]
            if workload.allocation is not None:
                names.append(name)
                jobs.append(
                    (workload.spec.memory_bytes, workload.allocation, workload.spec.threads)
                )
        return dict(zip(names, memory_layout(jobs, node.template), strict=True))

    def _co_runners(self, node: SimNode, exclude: str) -> list[CoRunner]:
        result: list[CoRunner] = []
        for name in sorted(node.workloads):
            allocation = self._workloads[name].allocation
            if name != exclude and allocation is not None:
                result.append((self._workloads[name].spec, allocation))
        return result

    def _refresh(self, node: SimNode) -> None:
        """Recompute the speed of every job on a node (its set or allocations changed) and
        re-plan their completion events. The node must be integrated to now.
        """
        node.version += 1
        for name in sorted(node.workloads):
            workload = self._workloads[name]
            assert workload.allocation is not None
            workload.perf = evaluate(
                workload.spec, workload.allocation, node.template, self._co_runners(node, name)
            )
            workload.version += 1
            if workload.paused_until > self._time:
                self._push(workload.paused_until, "resume", name, workload.version)
            duration = workload.spec.duration
            if duration is None or workload.perf.stalled:
                continue
            remaining = max(duration - workload.progress, 0.0)
            begin = max(self._time, workload.paused_until)
            self._push(begin + remaining * workload.perf.slowdown, "finish", name, workload.version)

    # -- placement ------------------------------------------------------------------------------

    def _is_pinned(self, allocation: Allocation) -> bool:
        node = self._nodes[allocation.node]
        return bool(allocation.cpus) and set(allocation.cpus) != set(node.template.cpus)

    def _held_gpus(self, node: SimNode, exclude: str = "") -> dict[int, str]:
        held: dict[int, str] = {}
        for name in node.workloads:
            if name == exclude:
                continue
            allocation = self._workloads[name].allocation
            if allocation is not None:
                for gpu in allocation.gpus:
                    held.setdefault(gpu, name)
        return held

    def _check_placement(
        self, workload: SimWorkload, allocation: Allocation, allow_shared: bool = False
    ) -> Allocation:
        """Validate an allocation for a workload; returns it completed (all CPUs / all memory
        nodes when none are given). Raises :class:`ResourceManagerError`.
        """
        node = self._nodes.get(allocation.node)
        if node is None:
            raise ResourceManagerError(f"unknown node {allocation.node!r}", 404)
        template = node.template
        cpus = sorted(set(allocation.cpus))
        bad_cpus = [c for c in cpus if c not in set(template.cpus)]
        if bad_cpus:
            raise ResourceManagerError(f"CPUs {_short(bad_cpus)} are not on node {node.name}", 400)
        mems = sorted(set(allocation.mems))
        bad_mems = [m for m in mems if m not in template.numa_ids]
        if bad_mems:
            raise ResourceManagerError(
                f"NUMA nodes {bad_mems} are not on node {node.name} "
                f"(it has {list(template.numa_ids)})",
                400,
            )
        gpus = sorted(set(allocation.gpus))
        known = {g.index for g in template.gpus}
        bad_gpus = [g for g in gpus if g not in known]
        if bad_gpus:
            raise ResourceManagerError(f"GPUs {bad_gpus} are not on node {node.name}", 400)
        wanted = workload.spec.gpus
        if len(gpus) != wanted:
            raise ResourceManagerError(
                f"workload {workload.spec.name} needs {wanted} GPU(s), got {len(gpus)}", 400
            )
        if not allow_shared:
            held = self._held_gpus(node, exclude=workload.spec.name)
            taken = [g for g in gpus if g in held]
            if taken:
                owners = sorted({held[g] for g in taken})
                raise ResourceManagerError(
                    f"GPUs {taken} on {node.name} are held by {', '.join(owners)}", 409
                )
        return Allocation(
            node.name,
            cpus or list(template.cpus),
            mems or [n.id for n in template.topology.numa_nodes if n.memory_bytes > 0],
            gpus,
        )

    def _start(self, workload: SimWorkload, allocation: Allocation, pinned: bool) -> None:
        allocation = self._check_placement(workload, allocation, allow_shared=True)
        node = self._nodes[allocation.node]
        self._integrate(node, self._time)
        workload.state = RUNNING
        workload.allocation = allocation
        workload.pinned = pinned
        if workload.started_at is None:
            workload.started_at = self._time
        workload.pid = node.next_pid
        node.next_pid += max(workload.spec.threads, 1) + 1
        node.workloads.add(workload.spec.name)
        self._refresh(node)

    def _remove(self, workload: SimWorkload) -> SimNode | None:
        """Take a running workload off its node (integrated to now); returns the node."""
        if workload.allocation is None:
            return None
        node = self._nodes[workload.allocation.node]
        self._integrate(node, self._time)
        node.workloads.discard(workload.spec.name)
        workload.allocation = None
        workload.perf = None
        workload.version += 1
        return node

    def _finish(self, workload: SimWorkload) -> None:
        node = self._remove(workload)
        workload.state = DONE
        workload.finished_at = self._time
        self._finished.append(workload.spec.name)
        if node is not None:
            self._refresh(node)
        self._schedule()

    def _schedule(self) -> None:
        """First fit for pending jobs, in submission order (when the scheduler is on)."""
        if self.scheduler != "first-fit":
            return
        pending = sorted(
            (w for w in self._workloads.values() if w.state == PENDING and self._arrived(w)),
            key=lambda w: (w.spec.submit_time, w.spec.name),
        )
        for workload in pending:
            allocation = self._first_fit(workload.spec)
            if allocation is not None:
                self._start(workload, allocation, pinned=False)

    def _arrived(self, workload: SimWorkload) -> bool:
        return workload.spec.submit_time <= self._time

    def _first_fit(self, job: JobSpec) -> Allocation | None:
        nodes = list(self._nodes.values())
        if not job.gpus:
            nodes.sort(key=lambda n: bool(n.template.gpus))
        for node in nodes:
            if job.gpus:
                held = self._held_gpus(node)
                free = [g.index for g in node.template.gpus if g.index not in held]
                if len(free) < job.gpus:
                    continue
                return Allocation(node.name, [], [], free[: job.gpus])
            busy = sum(self._workloads[n].spec.threads for n in node.workloads)
            if busy + job.threads <= len(node.template.cpus):
                return Allocation(node.name, [], [], [])
        return None

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

    def _view(self, workload: SimWorkload) -> WorkloadView:
        return WorkloadView(
            name=workload.spec.name,
            kind=workload.spec.kind.value,
            state=workload.state,
            allocation=workload.allocation,
            gpus_requested=workload.spec.gpus,
            pinned=workload.pinned,
        )

    def _find(self, name: str) -> SimWorkload:
        workload = self._workloads.get(name) or self._workloads.get(f"{name}.service")
        if workload is None:
            raise ResourceManagerError(f"unknown workload {name!r}", 404)
        return workload

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
        before = _memory_shares(current, template, threads)
        after = _memory_shares(allocation, template, threads)
        moved = sum(abs(after.get(n, 0.0) - before.get(n, 0.0)) for n in set(before) | set(after))
        cost = moved / 2 * workload.spec.memory_bytes / MIGRATE_PAGES_BYTES_PER_SECOND
        workload.allocation = allocation
        if kind is ActionKind.PIN:
            workload.pinned = self._is_pinned(allocation)
        self._refresh(node)
        return allocation, cost

    # -- reading for metrics ----------------------------------------------------------------------

    def node_names(self) -> list[str]:
        """Node names in the order they were added."""
        with self._lock:
            return list(self._nodes)

    def template_of(self, node: str) -> NodeTemplate:
        """The template of a node (``KeyError`` when unknown)."""
        return self._nodes[node].template

    def node_snapshot(self, name: str) -> NodeSnapshot:
        """One node's state now, integrated (``KeyError`` for an unknown node)."""
        with self._lock:
            self.sync()
            node = self._nodes[name]
            self._integrate(node, self._time)
            rows = []
            layout = self._memory_layout(node)
            for wname in sorted(node.workloads):
                workload = self._workloads[wname]
                allocation = workload.allocation
                perf = workload.perf
                if allocation is None or perf is None:
                    continue
                spec = workload.spec
                cpus = placement(allocation, node.template, spec.threads)[2]
                shares: dict[int, float] = {}
                for (_, target), weight in layout[wname].items():
                    shares[target] = shares.get(target, 0.0) + weight
                rows.append(
                    WorkloadSnapshot(
                        name=wname,
                        spec=spec,
                        allocation=allocation,
                        pid=workload.pid,
                        thread_cpus=tuple(cpus),
                        cpu_seconds=workload.cpu_seconds,
                        memory_by_node={
                            n: int(share * spec.memory_bytes) for n, share in shares.items()
                        },
                        perf=perf,
                        paused=workload.paused_until > self._time,
                    )
                )
            return NodeSnapshot(
                name=name,
                template=node.template,
                now=self._time,
                version=node.version,
                workloads=tuple(rows),
                cpu_busy=dict(node.cpu_busy),
                numastat={n: dict(v) for n, v in node.numastat.items()},
                counter_time=self.clock.counter_time(),
            )

    def best_throughput(self, workload: str) -> float:
        """The best throughput the workload could have: alone, on the best allocation of its
        node's template (of any template in the cluster while it is not placed).
        """
        with self._lock:
            found = self._find(workload)
            if found.allocation is not None:
                templates: Iterable[NodeTemplate] = [self._nodes[found.allocation.node].template]
            else:
                templates = {n.template.name: n.template for n in self._nodes.values()}.values()
            return max((self._ideal(found.spec, t) for t in templates), default=0.0)

    def _ideal(self, job: JobSpec, template: NodeTemplate) -> float:
        key = (template.name, *job.shape())
        cached = self._best_cache.get(key)
        if cached is None:
            if job.gpus > len(template.gpus):
                cached = 0.0
            else:
                cached = best_allocation(job, template.name, template)[1].throughput
            self._best_cache[key] = cached
        return cached

    def job_states(self) -> list[JobState]:
        """Every workload's spec, state and allocation now, sorted by name (for the oracle
        and the closed-loop evaluation, which score alternative allocations).
        """
        with self._lock:
            self.sync()
            return [
                JobState(name, w.spec, w.state, w.allocation)
                for name, w in sorted(self._workloads.items())
            ]

    def ideal_throughput(self, job: JobSpec) -> float:
        """The best throughput ``job`` could have alone on any node of the cluster (the
        normalisation of the closed loop's aggregate: each job counts 1 at its best).
        """
        with self._lock:
            templates = {n.template.name: n.template for n in self._nodes.values()}.values()
            return max((self._ideal(job, t) for t in templates), default=0.0)

    def truth(self) -> list[TruthRow]:
        """Ground truth for every workload that is not done, sorted by name."""
        with self._lock:
            self.sync()
            rows = []
            for name in sorted(self._workloads):
                workload = self._workloads[name]
                if workload.state == DONE:
                    continue
                perf = workload.perf
                paused = workload.paused_until > self._time
                throughput = 0.0 if perf is None or paused else perf.throughput
                duration = workload.spec.duration
                rows.append(
                    TruthRow(
                        name=name,
                        kind=workload.spec.kind.value,
                        state=workload.state,
                        node=workload.allocation.node if workload.allocation else "",
                        throughput=throughput,
                        best_throughput=self.best_throughput(name),
                        slowdown=perf.slowdown if perf is not None else math.inf,
                        factors=dict(perf.factors) if perf is not None else {},
                        link_class=perf.link_class if perf is not None else "",
                        progress_ratio=(
                            min(workload.progress / duration, 1.0) if duration else None
                        ),
                    )
                )
            return rows

    def action_counts(self) -> dict[tuple[str, str], int]:
        """Actions carried out so far by (kind, result)."""
        with self._lock:
            return dict(self._action_counts)

    def counts(self) -> dict[str, int]:
        """Workloads by state."""
        with self._lock:
            self.sync()
            result: dict[str, int] = {PENDING: 0, RUNNING: 0, DONE: 0}
            for workload in self._workloads.values():
                result[workload.state] += 1
            return result


def _memory_shares(
    allocation: Allocation, template: NodeTemplate, threads: int
) -> dict[int, float]:
    shares = thread_shares(allocation, template, threads)
    mems = allocation.mems or template.numa_ids
    result: dict[int, float] = {}
    for (_, target), weight in memory_flows(shares, mems, template).items():
        result[target] = result.get(target, 0.0) + weight
    return result


def _short(values: Sequence[int]) -> str:
    text = ", ".join(str(v) for v in values[:8])
    return f"[{text}{', ...' if len(values) > 8 else ''}]"
