"""The best allocation that slows no job down: what advice that harms no job could reach.

The judge counts every job whose true throughput falls as harm (:mod:`toposcope.sim.judge`),
so advice held to 0 harm cannot follow an oracle that slows one job to speed up others
(a 16-GPU gang moved onto slower nodes to give its GPUs to several smaller jobs). This
search is the gang oracle (:mod:`toposcope.sim.gang_oracle`) with one more rule: every
counted job keeps at least the efficiency it has now (its *floor*); a state that puts a
job below its floor, or leaves it without GPUs, scores :data:`PENALTY` below any feasible
one, so the local search never keeps it. Its result is a reported yardstick beside the
oracle's, never the oracle: the judge's ratio stays against the best known allocation.

Like the oracle it is a local search (a best found, not a proven optimum), and its floor is
the state before the first round, while the judge counts harm round by round: an outcome
no round harmed has every job at or above its floor, so this bounds what such rounds can
reach within the search's reach.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from toposcope.rm import Allocation
from toposcope.sim.cluster import SimCluster
from toposcope.sim.gang_engine import GangBook
from toposcope.sim.gang_oracle import SWEEPS, _GangSearch
from toposcope.sim.jobs import JobSpec
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.oracle import EPSILON, OracleResult, finish, starting_point

#: what a state that slows a job below its floor loses (far beyond any aggregate)
PENALTY = 1e6
#: efficiency a job may lose to rounding before it counts as slowed
FLOOR_TOLERANCE = 1e-6


class _HarmFreeSearch(_GangSearch):
    """The gang search with every counted job held at or above its floor."""

    def __init__(
        self,
        templates: Mapping[str, NodeTemplate],
        specs: Mapping[str, JobSpec],
        ideal: Mapping[str, float],
        book: GangBook,
    ) -> None:
        super().__init__(templates, specs, ideal, book)
        self.floor: dict[str, float] = {}

    def set_floors(self) -> None:
        """Every counted job's efficiency where it is now becomes its floor."""
        self.floor = {}
        for name in self.ideal:
            alloc = self.alloc.get(name)
            if alloc is not None:
                self.floor[name] = self._own(name, alloc)

    def node_value(self, node: str, extra: tuple[str, Allocation] | None = None) -> float:
        """The node's aggregate, :data:`PENALTY` less when a job on it falls below its floor."""
        members = [(n, self.alloc[n]) for n in sorted(self.on_node[node])]
        if extra is not None:
            members.append(extra)
        total, short = 0.0, False
        for name, alloc in members:
            if name not in self.ideal or alloc is None:
                continue
            co = [(self.specs[m], a) for m, a in members if m != name and a is not None]
            value = self.efficiency(name, alloc, co)
            total += value
            short = short or value < self.floor.get(name, 0.0) - FLOOR_TOLERANCE
        return total - PENALTY if short else total

    def total(self) -> float:
        """The aggregate, :data:`PENALTY` less when a job with a floor holds no GPUs."""
        value = super().total()
        if any(self.alloc.get(name) is None for name in self.floor):
            value -= PENALTY
        return value


def solve_harm_free(
    cluster: SimCluster, names: Iterable[str] | None = None, budget_s: float = 60.0
) -> OracleResult:
    """The best allocation found that slows no counted job (see the module docstring):
    :func:`~toposcope.sim.gang_oracle.solve_gangs`'s search from the current allocation,
    with every job's floor its efficiency now.
    """
    book = cluster.gangs
    assert book is not None, "the harm-free search is for clusters with gang jobs"
    started = time.perf_counter()
    deadline = started + budget_s
    point = starting_point(cluster, names)
    ideal, specs = point.ideal, point.specs
    search = _HarmFreeSearch(point.templates, specs, ideal, book)
    search.load(point.now)
    search.set_floors()
    baseline = search.total()
    order = sorted(
        (n for n in ideal if n not in book.part_of),
        key=lambda n: (-specs[n].gpus, -specs[n].threads, n),
    )
    search.load(point.start)
    search.improve(order)
    for _ in range(SWEEPS):
        if not search.gang_moves(order, deadline):
            break
    while search.eject(deadline):
        search.improve(order)
    best_total, best_alloc = search.total(), dict(search.alloc)
    if best_total < baseline - EPSILON:  # nothing feasible beat where it started
        best_total, best_alloc = baseline, dict(point.now)
    return finish(search, point, best_alloc, best_total, baseline, started)


__all__ = ["PENALTY", "solve_harm_free"]
