"""What the simulated cluster shows of itself: node snapshots for the metrics trees and
the fake NVML, ground truth, the best throughputs the oracle and the judge normalise by,
and counts (:class:`SimClusterReads`, a base of :class:`~toposcope.sim.cluster.SimCluster`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from toposcope.sim.cluster_core import SimClusterCore
from toposcope.sim.cluster_state import (
    DONE,
    PENDING,
    RUNNING,
    JobState,
    NodeSnapshot,
    TruthRow,
    WorkloadSnapshot,
)
from toposcope.sim.jobs import JobSpec
from toposcope.sim.model import placement
from toposcope.sim.node_oracle import best_allocation
from toposcope.sim.nodetemplate import NodeTemplate


class SimClusterReads(SimClusterCore):
    """Read-only views of the simulated cluster (every method holds the cluster's lock)."""

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
                        memory_traffic=dict(workload.memory_traffic),
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
                gpu_energy=dict(node.gpu_energy),
                gpu_counters={i: c.copy() for i, c in node.gpu_counters.items()},
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

    def job_steps(self) -> list[tuple[str, float]]:
        """Steps done by every running job that has a throughput, counted up to now (each
        node's counters integrated first; :mod:`~toposcope.sim.job_steps`).
        """
        with self._lock:
            now = self.sync()
            for node in self._nodes.values():
                self._integrate(node, now)
            return [
                (name, workload.steps)
                for name, workload in sorted(self._workloads.items())
                if workload.state == RUNNING and workload.spec.base_throughput > 0
            ]

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
