"""One round's CPU capacity: the cores every recommendation of a round brings to NUMA nodes.

Each policy plans its own pins against the node's capacity, but policies do not see each
other's results: numa-pinning may pin a CPU job to the NUMA node that job-migration pins a
moved GPU job to, and each fits alone. :class:`CpuLedger` makes the round's recommendations
reserve CPUs: every action that sets CPUs (``pin``, and the pins attached to ``migrate`` and
``place``) brings its workload's busy cores to the NUMA nodes of those CPUs and takes them
from where the workload runs now. Capacity is that of the node after the round (the cores of
every recommendation still in play count where it puts them, so two spread workloads can
still swap halves), checked under ``max_load`` of each NUMA node's CPUs within
:data:`RATE_SLACK`, the rule numa-pinning plans by.
A workload whose cores are unknown (no rate, or a pending job) brings nothing it can count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.recommendations import Recommendation
from toposcope.resources import ActionKind

#: relative error allowed on measured cores (a rate over a window is an estimate); the one
#: slack of every capacity check of the advisor
RATE_SLACK = 0.03
#: actions whose CPUs move a workload's threads
_CPU_ACTIONS = (ActionKind.PIN, ActionKind.MIGRATE, ActionKind.PLACE)

#: (node, NUMA node) -> busy cores
Load = dict[tuple[str, int], float]


@dataclass(frozen=True)
class CpuLedger:
    """The round's CPU capacity over ``model`` (see the module docstring)."""

    model: ClusterModel
    max_load: float = 1.0

    def _workload(self, name: str, node: str) -> WorkloadModel | None:
        """The running workload called ``name``, preferring the one on ``node``."""
        found = [w for w in self.model.workloads if w.name == name]
        return next((w for w in found if w.node == node), found[0] if found else None)

    def moves(self, rec: Recommendation) -> tuple[Load, Load]:
        """(cores taken away, cores brought) per NUMA node by ``rec``'s CPU-setting actions."""
        away: Load = defaultdict(float)
        brought: Load = defaultdict(float)
        for action in rec.actions:
            if action.kind not in _CPU_ACTIONS or not action.cpus:
                continue
            workload = self._workload(action.workload, rec.target.node)
            cores = workload.cores_used() if workload is not None else None
            node = self.model.node(action.node) if action.node is not None else None
            if workload is None or cores is None or node is None:
                continue
            for numa, share in workload.cpu_shares().items():
                away[(workload.node, numa)] += share * cores
            wanted = set(action.cpus)
            counts = {n.id: len(wanted.intersection(n.cpus)) for n in node.numa_nodes}
            total = sum(counts.values())
            for numa, count in counts.items():
                if count and total:
                    brought[(node.name, numa)] += cores * count / total
        return away, brought

    def base_load(self, leaving: Iterable[Recommendation]) -> Load:
        """Busy cores per NUMA node now, less what the ``leaving`` recommendations take away."""
        load: Load = defaultdict(float)
        for name in self.model.nodes:
            for numa, capacity in self.model.numa_capacity(name).items():
                load[(name, numa)] += capacity.cores_used
        for rec in leaving:
            for key, cores in self.moves(rec)[0].items():
                load[key] -= cores
        return load

    def limit(self, key: tuple[str, int]) -> float:
        """The most busy cores allowed on a NUMA node (``inf`` when it is unknown)."""
        node = self.model.node(key[0])
        numa = node.numa(key[1]) if node is not None else None
        if numa is None:
            return float("inf")
        return numa.cpu_count * self.max_load * (1.0 + RATE_SLACK)

    def overflow(self, load: Load, rec: Recommendation) -> str | None:
        """Why ``rec``'s cores do not fit on top of ``load`` (``None`` when they do)."""
        for key, cores in sorted(self.moves(rec)[1].items()):
            busy = load.get(key, 0.0) + cores
            if busy > self.limit(key):
                node, numa = key
                return (
                    f"NUMA node {numa} of {node}: {busy:.1f} busy cores with the round's other "
                    f"recommendations would exceed {self.limit(key) / (1.0 + RATE_SLACK):.1f}"
                )
        return None

    def add(self, load: Load, rec: Recommendation) -> None:
        """Count ``rec``'s cores where it brings them."""
        for key, cores in self.moves(rec)[1].items():
            load[key] = load.get(key, 0.0) + cores
