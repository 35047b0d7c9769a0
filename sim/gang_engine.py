"""Multi-node gang jobs in the simulated cluster: all ranks start together, hold all their
GPUs and finish together.

A scenario's ``fabric.multi_node_jobs`` entry with a ``pattern`` is a gang
(:class:`~toposcope.sim.gang_price.Gang`); its parts are ordinary simulated jobs, one per
node, that the cluster's engine (:mod:`toposcope.sim.cluster_core`) hands to the
:class:`GangBook`:

* **pace**: after the engine evaluates a node, every part's speed is set from its gang
  (:func:`~toposcope.sim.gang_price.gang_performances`): the slowest part's step stretched
  by the network. A part whose speed changes is integrated to now on its own node first, so
  counters and progress stay exact, and its completion event is planned anew.
* **start together**: a gang with a part pending, paused (its checkpoint-restore after a
  ``migrate``) or gone makes no progress on any part; the first-fit scheduler places a
  gang's pending parts all at once on distinct nodes, or none of them
  (:meth:`GangBook.first_fit`).
* **finish together**: when one part finishes, its running siblings finish with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from toposcope.rm import Allocation
from toposcope.sim.cluster_state import RUNNING, SimWorkload
from toposcope.sim.gang_price import FabricPrices, Gang, gang_performances

if TYPE_CHECKING:
    from toposcope.sim.cluster_core import SimClusterCore


class GangBook:
    """The gangs of a cluster and the fabric they run on (see the module docstring)."""

    def __init__(self, prices: FabricPrices, gangs: Iterable[Gang]) -> None:
        self.prices = prices
        self.gangs = {g.name: g for g in gangs}
        self.part_of = {p: g.name for g in self.gangs.values() for p in g.parts}
        self._busy = False
        self._again = False

    def siblings(self, part: str) -> tuple[str, ...]:
        """The other parts of ``part``'s gang (none for a job outside every gang)."""
        gang = self.part_of.get(part)
        if gang is None:
            return ()
        return tuple(p for p in self.gangs[gang].parts if p != part)

    def regang(self, core: SimClusterCore) -> None:
        """Set every running part's speed from its gang and plan its events again where it
        changed (re-entrant calls, from integrating a node, repeat the pass).
        """
        if self._busy:
            self._again = True
            return
        self._busy = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._pass(core)
        finally:
            self._busy = False

    def _pass(self, core: SimClusterCore) -> None:
        workloads = core._workloads
        running = {
            p: w
            for p in self.part_of
            if (w := workloads.get(p)) is not None
            and w.state == RUNNING
            and w.allocation is not None
            and w.node_perf is not None
        }
        found = gang_performances(
            self.gangs.values(),
            {p: w.allocation for p, w in running.items()},
            {p: (w.spec, w.node_perf) for p, w in running.items() if w.node_perf is not None},
            [p for p, w in running.items() if w.paused_until > core._time],
            self.prices,
            {n: node.template for n, node in core._nodes.items()},
        )
        for part, perf in sorted(found.items()):
            workload = running[part]
            if workload.perf == perf or workload.allocation is None:
                continue
            node = core._nodes[workload.allocation.node]
            core._integrate(node, core._time)
            if self._again:  # integrating replanned a node: start over from the new state
                return
            workload.perf = perf
            workload.version += 1
            node.version += 1
            core._plan_events(workload)

    def finish_together(self, core: SimClusterCore, part: str) -> None:
        """Finish the running siblings of a part that just finished."""
        for sibling in self.siblings(part):
            workload = core._workloads.get(sibling)
            if workload is not None and workload.state == RUNNING:
                node = core._nodes[workload.allocation.node] if workload.allocation else None
                if node is not None:
                    core._integrate(node, core._time)
                core._finish(workload)

    def first_fit(
        self, core: SimClusterCore, parts: Sequence[SimWorkload]
    ) -> list[tuple[SimWorkload, Allocation]] | None:
        """First-fit allocations for a gang's pending ``parts``, each on a node no sibling
        holds, or ``None`` when they do not all fit.
        """
        taken = {
            w.allocation.node
            for p in self.gangs[self.part_of[parts[0].spec.name]].parts
            if (w := core._workloads.get(p)) is not None and w.allocation is not None
        }
        chosen: list[tuple[SimWorkload, Allocation]] = []
        for workload in parts:
            for node in core._nodes.values():
                if node.name in taken:
                    continue
                held = core._held_gpus(node)
                free = [g.index for g in node.template.gpus if g.index not in held]
                if len(free) >= workload.spec.gpus:
                    wanted = Allocation(node.name, [], [], free[: workload.spec.gpus])
                    chosen.append((workload, wanted))
                    taken.add(node.name)
                    break
            else:
                return None
        return chosen


def pending_gang_parts(
    book: GangBook, part: SimWorkload, pending: Iterable[SimWorkload]
) -> list[SimWorkload]:
    """The pending, arrived parts of ``part``'s gang (``part`` first)."""
    gang = book.part_of[part.spec.name]
    others = [w for w in pending if w is not part and book.part_of.get(w.spec.name) == gang]
    return [part, *others]


__all__ = ["GangBook", "pending_gang_parts"]
