"""The simulated cluster's engine: nodes and workloads, simulated time and its events,
counters, the performance of every job, placement checks and the first-fit scheduler.

:class:`SimClusterCore` is the base of :class:`~toposcope.sim.cluster.SimCluster` (the
resource-manager backend; see its module for the whole story). Time is the
:class:`~toposcope.sim.clock.SimClock`'s. State is advanced lazily and exactly: jobs arrive,
finish and resume (after a checkpoint-restore) at events kept in a heap; each public call
first processes the events due, and each node's counters
(:mod:`toposcope.sim.cluster_counters`) are integrated only when that node is read or
changes. Between events every job runs at the constant speed the performance model
(:func:`toposcope.sim.model.evaluate`) gives for its allocation and its co-runners.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from toposcope.identity.names import (
    OBJECT_NAME_RULE,
    InvalidNameError,
    check_node_name,
    check_object_name,
)
from toposcope.rm import (
    Allocation,
    BaseResourceManager,
    ResourceManagerError,
    WorkloadView,
)
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster_counters import Layout, integrate, node_memory_layout
from toposcope.sim.cluster_state import (
    DONE,
    PENDING,
    RUNNING,
    SimNode,
    SimWorkload,
    short_list,
)
from toposcope.sim.gang_engine import GangBook, pending_gang_parts
from toposcope.sim.jobs import JobSpec, is_unit_name
from toposcope.sim.model import CoRunner, evaluate
from toposcope.sim.nodetemplate import NodeTemplate


class SimClusterCore(BaseResourceManager):
    """Simulated nodes and workloads, their time, counters and placement.

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
        #: While :meth:`building`: nodes whose jobs' speeds are still to be computed, in the
        #: order they last changed (``None``: every change is computed at once).
        self._stale: dict[str, SimNode] | None = None
        #: multi-node gang jobs (:mod:`toposcope.sim.gang_engine`), when the scenario has any
        self._gangs: GangBook | None = None

    def use_gangs(self, book: GangBook) -> None:
        """Run the gangs of ``book`` as gangs (before their parts are submitted)."""
        with self._lock:
            self._gangs = book

    @property
    def gangs(self) -> GangBook | None:
        """The cluster's gang jobs (``None``: every job runs on its own)."""
        return self._gangs

    # -- building ---------------------------------------------------------------------------

    def add_node(
        self, name: str, template: NodeTemplate, labels: dict[str, str] | None = None
    ) -> None:
        """Add a node (names are unique, host names that are also safe as one path
        component: :func:`toposcope.identity.names.check_node_name`, ``check_object_name``).
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

    @contextmanager
    def building(self) -> Iterator[None]:
        """Submit many jobs at once: each node's jobs are evaluated once, when the block
        ends, instead of again on every job that joins the node.

        The result is the same as submitting one by one (speeds, versions and the order of
        the completion events that stay current), since a job's speed depends only on the
        node's final set of jobs; what changes is the cost of loading a scenario with many
        jobs per node (quadratic in them, once per job, otherwise).
        """
        with self._lock:
            if self._stale is not None:
                yield
                return
            self._stale = {}
            try:
                yield
            finally:
                stale, self._stale = self._stale, None
                for node in stale.values():
                    self._replan(node)

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
        if self._stale is not None and until > node.last_time and node.name in self._stale:
            self._replan(self._stale.pop(node.name))
        integrate(node, self._workloads, until, self.clock.counter_scale())

    def _memory_layout(self, node: SimNode) -> Layout:
        """Each placed workload's page shares on ``node`` (after spills)."""
        return node_memory_layout(node, self._workloads)

    def _co_runners(self, node: SimNode, exclude: str) -> list[CoRunner]:
        result: list[CoRunner] = []
        for name in sorted(node.workloads):
            allocation = self._workloads[name].allocation
            if name != exclude and allocation is not None:
                result.append((self._workloads[name].spec, allocation))
        return result

    def _refresh(self, node: SimNode) -> None:
        """Recompute the speed of every job on a node (its set or allocations changed) and
        re-plan their completion events (within :meth:`building`: when it ends). The node
        must be integrated to now.
        """
        node.version += 1
        for name in node.workloads:
            self._workloads[name].version += 1
        if self._stale is None:
            self._replan(node)
            return
        self._stale.pop(node.name, None)
        self._stale[node.name] = node

    def _replan(self, node: SimNode) -> None:
        """Evaluate every job on a node and plan its resume and completion events (at the
        versions :meth:`_refresh` gave them).
        """
        for name in sorted(node.workloads):
            workload = self._workloads[name]
            assert workload.allocation is not None
            workload.perf = workload.node_perf = evaluate(
                workload.spec, workload.allocation, node.template, self._co_runners(node, name)
            )
            self._plan_events(workload)
        if self._gangs is not None:
            self._gangs.regang(self)

    def _plan_events(self, workload: SimWorkload) -> None:
        """Plan a placed workload's resume and completion events at its current version."""
        name = workload.spec.name
        if workload.paused_until > self._time:
            self._push(workload.paused_until, "resume", name, workload.version)
        duration = workload.spec.duration
        if duration is None or workload.perf is None or workload.perf.stalled:
            return
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
        known_cpus = template.cpu_set
        bad_cpus = [c for c in cpus if c not in known_cpus]
        if bad_cpus:
            raise ResourceManagerError(
                f"CPUs {short_list(bad_cpus)} are not on node {node.name}", 400
            )
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
        if self._gangs is not None:
            self._gangs.finish_together(self, workload.spec.name)
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
            if workload.state != PENDING:
                continue
            if self._gangs is not None and workload.spec.name in self._gangs.part_of:
                parts = pending_gang_parts(self._gangs, workload, pending)
                for part, where in self._gangs.first_fit(self, parts) or []:
                    self._start(part, where, pinned=False)
                continue
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

    # -- lookups ------------------------------------------------------------------------------

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
