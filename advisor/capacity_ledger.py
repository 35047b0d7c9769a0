"""One round's capacity: the CPUs, GPUs and memory every recommendation of a round claims.

Each policy plans against the node's capacity, but policies do not see each other's results:
numa-pinning may pin a CPU job to the NUMA node that job-migration pins a moved GPU job to,
a placement may pick GPUs a move also picks, and each fits alone. :class:`CapacityLedger`
makes the round's recommendations reserve what their actions take, whatever policy made them:

* **CPUs**: every action that sets CPUs (``pin``, and the pins attached to ``migrate`` and
  ``place``) brings its workload's busy cores to the NUMA nodes of those CPUs and takes them
  from where the workload runs now; checked under ``max_load`` of each NUMA node's CPUs
  within :data:`RATE_SLACK`, the rule numa-pinning plans by;
* **GPUs**: ``migrate`` and ``place`` bring their workload to the action's GPUs, ``migrate``
  and ``release`` take it off the GPUs it holds now; a GPU may not end the round with more
  holders than it has now or one, whichever is more;
* **memory**: ``migrate-memory``, and a ``migrate`` with memory nodes, bring the workload's
  resident memory to those NUMA nodes (filling them in order, as the kernel's nearest-first
  fallback does) and take it from where it lives now; a NUMA node may not end the round
  with more than its installed memory in use.

The ledger also counts the GPUs a round leaves free (:meth:`CapacityLedger.free_gpus`), so
that the conflict resolution can tell whether a recommendation leaves a pending job no set
of GPUs to start on (:func:`jobs_that_fit`).

Capacity is that of the node after the round: what every recommendation still in play takes
away counts first, so two workloads can still swap places. A workload whose use is unknown
(no rate, no memory series, a pending job's CPUs) brings nothing it can count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.report.recommendation import Recommendation
from toposcope.rm import ActionKind, ActionRequest

#: relative error allowed on measured cores and bytes (a rate over a window is an estimate);
#: the one slack of every capacity check of the advisor
RATE_SLACK = 0.03
#: actions whose CPUs move a workload's threads
_CPU_ACTIONS = (ActionKind.PIN, ActionKind.MIGRATE, ActionKind.PLACE)
#: actions that put a workload on GPUs, and those that take it off its GPUs
_GPU_BRING = (ActionKind.MIGRATE, ActionKind.PLACE)
_GPU_TAKE = (ActionKind.MIGRATE, ActionKind.RELEASE)
#: actions that move a workload's pages
_MEMORY_ACTIONS = (ActionKind.MIGRATE_MEMORY, ActionKind.MIGRATE)

#: (resource, node, index) -> amount: ("cpu", node, NUMA node) busy cores, ("gpu", node,
#: GPU index) holders, ("memory", node, NUMA node) bytes in use
Key = tuple[str, str, int]
Load = dict[Key, float]

_UNITS = {"cpu": "busy cores", "gpu": "holders", "memory": "GiB in use"}


def jobs_that_fit(free: Mapping[str, int], sizes: Iterable[int]) -> int:
    """How many jobs of ``sizes`` GPUs, each on one node, fit in ``free`` GPUs per node:
    largest first, each on the node with the fewest free GPUs that still holds it.
    """
    left = dict(free)
    fitted = 0
    for size in sorted(sizes, reverse=True):
        room = [(count, name) for name, count in left.items() if count >= size]
        if room:
            _, name = min(room)
            left[name] -= size
            fitted += 1
    return fitted


@dataclass(frozen=True)
class CapacityLedger:
    """The round's CPU, GPU and memory capacity over ``model`` (see the module docstring)."""

    model: ClusterModel
    max_load: float = 1.0

    @cached_property
    def _by_name(self) -> dict[str, list[WorkloadModel]]:
        """The model's workloads by name (a name may run on several nodes)."""
        index: dict[str, list[WorkloadModel]] = defaultdict(list)
        for workload in self.model.workloads:
            index[workload.name].append(workload)
        return index

    @cached_property
    def _by_key(self) -> dict[str, WorkloadModel]:
        return {w.key: w for w in self.model.workloads}

    def _workload(self, name: str, node: str) -> WorkloadModel | None:
        """The running workload called ``name``, preferring the one on ``node``."""
        found = self._by_name.get(name, [])
        return next((w for w in found if w.node == node), found[0] if found else None)

    def _cpu(self, action: ActionRequest, workload: WorkloadModel, away: Load, to: Load) -> None:
        cores = workload.cores_used()
        node = self.model.node(action.node) if action.node is not None else None
        if cores is None or node is None:
            return
        for numa, share in workload.cpu_shares().items():
            away[("cpu", workload.node, numa)] += share * cores
        wanted = set(action.cpus)
        counts = {n.id: len(wanted.intersection(n.cpus)) for n in node.numa_nodes}
        total = sum(counts.values())
        for numa, count in counts.items():
            if count and total:
                to[("cpu", node.name, numa)] += cores * count / total

    def _memory(
        self, action: ActionRequest, workload: WorkloadModel, load: Load, away: Load, to: Load
    ) -> None:
        left = workload.memory_bytes
        if left <= 0 or action.node is None:
            return
        for numa, used in workload.memory_by_numa.items():
            away[("memory", workload.node, numa)] += used
        keys = [("memory", action.node, m) for m in action.mems]
        for i, key in enumerate(keys):
            room = max(0.0, self.limit(key) - load.get(key, 0.0) - to[key])
            share = left if i == len(keys) - 1 else min(left, room)
            to[key] += share
            left -= share

    def moves(self, rec: Recommendation, load: Load | None = None) -> tuple[Load, Load]:
        """(taken away, brought) per resource by ``rec``'s actions; memory fills its NUMA
        nodes in order on top of ``load`` (the round's use so far, when known).
        """
        away: Load = defaultdict(float)
        brought: Load = defaultdict(float)
        memory_moved: dict[str, ActionRequest] = {}
        for action in rec.actions:
            workload = self._workload(action.workload, action.node or rec.target.node)
            if action.kind in _GPU_BRING and action.node is not None:
                for gpu in action.gpus:
                    brought[("gpu", action.node, gpu)] += 1.0
            if workload is None:
                continue
            if action.kind in _GPU_TAKE:
                for gpu in workload.gpus:
                    away[("gpu", workload.node, gpu)] += 1.0
            if action.kind in _CPU_ACTIONS and action.cpus:
                self._cpu(action, workload, away, brought)
            if action.kind in _MEMORY_ACTIONS and action.mems:
                memory_moved[workload.key] = action
        for key, action in memory_moved.items():
            workload = self._by_key[key]
            self._memory(action, workload, load or {}, away, brought)
        return away, brought

    @cached_property
    def before(self) -> Load:
        """Use per resource before the round."""
        load: Load = defaultdict(float)
        for name, node in self.model.nodes.items():
            for numa, capacity in self.model.numa_capacity(name).items():
                load[("cpu", name, numa)] += capacity.cores_used
            for state in node.numa_nodes:
                total, free = state.memory_total_bytes, state.memory_free_bytes
                if total is not None and free is not None:
                    load[("memory", name, state.id)] = max(0.0, total - free)
        for w in self.model.workloads:
            for gpu in w.gpus:
                load[("gpu", w.node, gpu)] += 1.0
            home = self.model.node(w.node)
            for numa, used in w.memory_by_numa.items():
                where = home.numa(numa) if home is not None else None
                if where is None or where.memory_free_bytes is None:
                    load[("memory", w.node, numa)] += used
        return load

    def base_load(self, leaving: Iterable[Recommendation]) -> Load:
        """Use per resource now, less what the ``leaving`` recommendations take away."""
        load: Load = defaultdict(float, self.before)
        for rec in leaving:
            for key, amount in self.moves(rec)[0].items():
                load[key] -= amount
        return load

    def limit(self, key: Key) -> float:
        """The most a resource may hold after the round (``inf`` when it is unknown)."""
        resource, name, index = key
        node = self.model.node(name)
        if node is None:
            return float("inf")
        if resource == "gpu":
            known = node.gpu(index) is not None
            return max(1.0, self.before.get(key, 0.0)) if known else float("inf")
        numa = node.numa(index)
        if numa is None:
            return float("inf")
        if resource == "cpu":
            return numa.cpu_count * self.max_load * (1.0 + RATE_SLACK)
        total = numa.memory_total_bytes
        return float("inf") if total is None else total * (1.0 + RATE_SLACK)

    def overflow(self, load: Load, rec: Recommendation) -> str | None:
        """Why ``rec``'s claims do not fit on top of ``load`` (``None`` when they do)."""
        for key, amount in sorted(self.moves(rec, load)[1].items()):
            used = load.get(key, 0.0) + amount
            if used > self.limit(key):
                resource, node, index = key
                scale = 2.0**30 if resource == "memory" else 1.0
                slack = 1.0 if resource == "gpu" else 1.0 + RATE_SLACK
                where = f"GPU {index}" if resource == "gpu" else f"NUMA node {index}"
                return (
                    f"{where} of {node}: {used / scale:.1f} {_UNITS[resource]} with the round's "
                    f"other recommendations would exceed {self.limit(key) / slack / scale:.1f}"
                )
        return None

    @cached_property
    def _pending(self) -> dict[str, int]:
        return {p.name: p.gpus_requested for p in self.model.pending}

    def pending_gpus(self, name: str) -> int | None:
        """GPUs the pending job ``name`` asks for (``None``: not a pending job)."""
        return self._pending.get(name)

    def gpu_load(self) -> Load:
        """Holders per GPU before the round."""
        return {key: amount for key, amount in self.before.items() if key[0] == "gpu"}

    def gpus_moved(self, rec: Recommendation) -> Load:
        """Holders ``rec`` adds (or, below 0, takes away) per GPU."""
        away, brought = self.moves(rec)
        change: Load = defaultdict(float)
        for key, amount in away.items():
            if key[0] == "gpu":
                change[key] -= amount
        for key, amount in brought.items():
            if key[0] == "gpu":
                change[key] += amount
        return change

    def free_gpus(self, load: Load, nodes: Iterable[str] | None = None) -> dict[str, int]:
        """Per node (of ``nodes``, default all), how many of its GPUs are up and have no
        holder in ``load``.
        """
        found: dict[str, int] = {}
        for name in self.model.nodes if nodes is None else nodes:
            node = self.model.node(name)
            if node is not None:
                found[name] = sum(
                    1
                    for gpu in node.gpus
                    if gpu.up is not False and load.get(("gpu", name, gpu.index), 0.0) <= 0.0
                )
        return found

    def add(self, load: Load, rec: Recommendation) -> None:
        """Count what ``rec`` brings where it brings it."""
        for key, amount in self.moves(rec, load)[1].items():
            load[key] = load.get(key, 0.0) + amount
