"""The trace replay's engine: one placement policy run over a job trace on the simulator.

:class:`Replay` holds what a run knows (the cluster, free GPUs, who holds what, the pending
queue) and logs each placement, move, wait and finish as an :class:`Event`; :func:`replay`
drives it from event to event of the simulator's clock. ``bench/trace_replay.py`` runs it
once per policy and reports the figures (:mod:`trace_figures`).
"""

from __future__ import annotations

import math
from bisect import insort
from dataclasses import dataclass, field

from trace_policies import Choice, Policy
from trace_toposcope import (
    LinkCalibration,
    Plan,
    Wait,
    decide,
    home_pin,
    plan_for,
    set_factor,
    worst_link,
)

from toposcope.rm import ActionKind, ActionRequest
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobSpec
from toposcope.sim.templates import NodeTemplate

SAMPLE_S = 600.0
#: a job moved for de-fragmentation is not moved again for this long
MOVE_GAP_S = 3600.0


@dataclass(frozen=True)
class Event:
    """One entry of a replay's log, in the order it happened: ``place``, ``migrate`` (the
    job's GPUs from then on), ``finish`` (the GPUs it gives back) or ``wait`` (the
    ``toposcope`` policy let a pending job wait, ``why``; the GPUs are the set it reserves).
    The figures and the tests recompute what the replay did from it.
    """

    time: float
    kind: str
    job: str
    node: str = ""
    gpus: tuple[int, ...] = ()
    why: Wait | None = None


@dataclass
class Replay:
    """One policy's run over the trace: the cluster, what is free, who holds what, and the
    log of what happened (:class:`Event`).
    """

    policy: Policy
    cluster: SimCluster
    templates: dict[str, NodeTemplate]
    specs: dict[str, JobSpec]
    free: dict[str, frozenset[int]] = field(default_factory=dict)
    held: dict[str, Choice] = field(default_factory=dict)
    pending: list[tuple[float, str]] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    moved: dict[str, float] = field(default_factory=dict)
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    actions: int = 0
    #: node -> NUMA node -> (busy cores, bytes) of the jobs pinned there; job -> its pin
    pinned: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)
    pins: dict[str, tuple[str, int]] = field(default_factory=dict)
    calibration: LinkCalibration = field(default_factory=LinkCalibration)
    log: list[Event] = field(default_factory=list)

    def act(self, kind: ActionKind, name: str, choice: Choice) -> None:
        """Place or migrate ``name`` onto ``choice`` through the resource-manager API."""
        self.actions += 1
        node, gpus = choice
        if name in self.held:
            self._give_back(name)
        cpus, mems = self._pin(name, choice)
        self.cluster.apply(
            ActionRequest(
                f"r{self.actions}", kind, name, node=node, gpus=list(gpus), cpus=cpus, mems=mems
            )
        )
        self.free[node] = self.free[node] - set(gpus)
        self.held[name] = choice
        self.log.append(Event(self.cluster.now, kind.value, name, node, tuple(gpus)))

    def _pin(self, name: str, choice: Choice) -> tuple[list[int], list[int]]:
        """The CPUs and memory nodes the policy pins ``name`` to on ``choice``."""
        node, gpus = choice
        template = self.templates[node]
        if not self.policy.pins:
            return [], []
        if not self.policy.waits:
            return pinning(template, gpus)
        job = self.specs[name]
        ledger = self.pinned.setdefault(node, {})
        cpus, mems = home_pin(template, node, gpus, job, ledger)
        if not mems:
            return pinning(template, gpus)
        cores, used = ledger.get(mems[0], (0.0, 0.0))
        ledger[mems[0]] = (cores + job.threads * job.cpu_busy, used + job.memory_bytes)
        self.pins[name] = (node, mems[0])
        return cpus, mems

    def observe(self, name: str) -> None:
        """Calibrate the link prior with a finished job that ran on one GPU set."""
        node, gpus = self.held[name]
        job = self.specs[name]
        if len(gpus) < 2 or not job.duration:
            return
        template = self.templates[node]
        ideal = Plan(0.0, self.templates, {}).ideal(len(gpus))
        took = (self.finished[name] - self.started[name]) / job.duration
        self.calibration.observe(
            worst_link(template, gpus), set_factor(template, gpus) / ideal - 1.0, took - 1.0
        )

    def _give_back(self, name: str) -> None:
        node, gpus = self.held.pop(name)
        self.free[node] = self.free[node] | set(gpus)
        if name in self.pins:
            where, numa = self.pins.pop(name)
            job = self.specs[name]
            cores, used = self.pinned[where][numa]
            self.pinned[where][numa] = (
                cores - job.threads * job.cpu_busy,
                used - job.memory_bytes,
            )

    def schedule(self) -> None:
        """Place what fits in arrival order; then, for a migrating policy, make room for
        the oldest waiting job by moving others.
        """
        now = self.cluster.now
        if self.policy.waits:
            self._schedule_waiting(now)
            return
        largest = max(len(f) for f in self.free.values())
        for entry in list(self.pending):
            name = entry[1]
            gpus = self.specs[name].gpus
            if gpus > largest:
                continue
            choice = self.policy.choose(gpus, self.free, self.templates)
            if choice is not None:
                self.act(ActionKind.PLACE, name, choice)
                self.pending.remove(entry)
                self.started[name] = now
                largest = max(len(f) for f in self.free.values())
        if self.policy.migrates and self.pending:
            self._defragment(self.pending[0][1], now)

    def _schedule_waiting(self, now: float) -> None:
        """Place in arrival order where the advisor's wait rule says to start now
        (:func:`trace_toposcope.decide`); then de-fragment for the oldest waiting job unless
        it waits by choice (a set was free for it but waiting for a better one pays).
        """
        plan = plan_for(
            now, self.templates, self.free, self.held, self.specs, self.started, self.calibration
        )
        plan.waiting = len(self.pending) - 1
        for entry in list(self.pending):
            name = entry[1]
            choice = decide(plan, self.specs[name], self.free)
            if choice is None:
                why = plan.waits[-1]
                where = why.reserved or ("", ())
                self.log.append(Event(now, "wait", name, where[0], where[1], why))
            else:
                self.act(ActionKind.PLACE, name, choice)
                self.pending.remove(entry)
                self.started[name] = now
                for g in choice[1]:
                    plan.avail[choice[0]][g] = now + (self.specs[name].duration or 0.0)
        head = self.pending[0][1] if self.pending else ""
        chose = any(w.job == head and math.isfinite(w.factor) for w in plan.waits)
        if self.policy.migrates and head and not chose:
            self._defragment(head, now)

    def _defragment(self, name: str, now: float) -> None:
        """Move running jobs so that ``name`` can start, when enough GPUs are free but split
        over nodes.
        """
        gpus = self.specs[name].gpus
        if sum(len(f) for f in self.free.values()) < gpus:
            return
        best: tuple[int, str, list[tuple[str, Choice]]] | None = None
        for node, template in self.templates.items():
            if len(template.gpus) < gpus:
                continue
            plan = self._plan(node, gpus - len(self.free[node]), now)
            if plan is not None:
                cost = sum(self.specs[n].gpus for n, _ in plan)
                if best is None or cost < best[0]:
                    best = (cost, node, plan)
        if best is None:
            return
        for moved, choice in best[2]:
            self.act(ActionKind.MIGRATE, moved, choice)
            self.moved[moved] = now
        target = self.policy.choose(gpus, {best[1]: self.free[best[1]]}, self.templates)
        if target is not None:
            self.act(ActionKind.PLACE, name, target)
            self.pending = [p for p in self.pending if p[1] != name]
            self.started[name] = now

    def _plan(self, node: str, need: int, now: float) -> list[tuple[str, Choice]] | None:
        """Moves off ``node`` (smallest jobs first) to other nodes freeing ``need`` GPUs."""
        here = sorted(
            (self.specs[n].gpus, n)
            for n, (where, _) in self.held.items()
            if where == node and now - self.moved.get(n, -math.inf) >= MOVE_GAP_S
        )
        trial = {n: f for n, f in self.free.items() if n != node}
        plan: list[tuple[str, Choice]] = []
        for gpus, name in here:
            if need <= 0:
                break
            choice = self.policy.choose(gpus, trial, self.templates)
            if choice is None:
                continue
            trial[choice[0]] = trial[choice[0]] - set(choice[1])
            plan.append((name, choice))
            need -= gpus
        return plan if need <= 0 else None

    def sample_until(self, until: float) -> None:
        """Record (time, allocated, fragmented, waiting) every :data:`SAMPLE_S` up to
        ``until`` (the state is constant between events).
        """
        next_at = self.samples[-1][0] + SAMPLE_S if self.samples else 0.0
        total = sum(len(t.gpus) for t in self.templates.values())
        while next_at <= until:
            free = sum(len(f) for f in self.free.values())
            smallest = min((self.specs[n].gpus for _, n in self.pending), default=0)
            fragmented = sum(len(f) for f in self.free.values() if 0 < len(f) < smallest)
            self.samples.append((next_at, total - free, fragmented, len(self.pending)))
            next_at += SAMPLE_S


def pinning(template: NodeTemplate, gpus: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """CPUs and memory nodes of the NUMA nodes the GPUs hang off (none when they span every
    node: then pinning changes nothing).
    """
    numa = sorted(
        {g.numa_node for g in template.gpus if g.index in gpus and g.numa_node is not None}
    )
    nodes = [n for n in template.topology.numa_nodes if n.id in numa]
    if not nodes or len(nodes) == len(template.topology.numa_nodes):
        return [], []
    return sorted(c for n in nodes for c in n.cpus), [n.id for n in nodes]


def replay(
    policy: Policy, templates: dict[str, NodeTemplate], jobs: list[JobSpec], stop: float
) -> Replay:
    """Run the trace under one policy until every job is done or ``stop``."""
    cluster = SimCluster(SimClock(speed=0), scheduler="none")
    for name, template in templates.items():
        cluster.add_node(name, template)
    run = Replay(policy, cluster, templates, {j.name: j for j in jobs})
    run.free = {name: frozenset(g.index for g in t.gpus) for name, t in templates.items()}
    arrivals = sorted((j.submit_time, j.name) for j in jobs)
    for job in jobs:
        cluster.submit(job)
    seen, arrived = 0, 0
    # the first pass is at the start, for the jobs that arrive with the cluster
    when: float | None = cluster.now
    while when is not None and when <= stop:
        run.sample_until(when)
        cluster.advance(when - cluster.now)
        changed = False
        while arrived < len(arrivals) and arrivals[arrived][0] <= cluster.now:
            insort(run.pending, arrivals[arrived])
            arrived += 1
            changed = True
        done = cluster.finished(seen)
        seen += len(done)
        for name in done:
            run.finished[name] = cluster.now
            run.log.append(Event(cluster.now, "finish", name, *run.held[name]))
            if policy.waits and name not in run.moved:
                run.observe(name)
            run._give_back(name)
            changed = True
        if changed:
            run.schedule()
        when = cluster.next_event_time()
    run.sample_until(min(stop, cluster.now))
    return run
