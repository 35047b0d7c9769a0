"""The cluster oracle for clusters with multi-node gang jobs (:mod:`toposcope.sim.oracle`
for the single-node search it extends).

A gang's parts count like any job (``throughput / ideal``, each part's ideal its best
alone on one node), but a part's throughput depends on where its siblings run and on the
other gangs crossing the same uplinks (:mod:`toposcope.sim.gang_price`), so the search
scores a part with its whole gang and moves gangs whole:

* **gang placements, exhaustive over node sets**: for each gang (largest first), every set
  of as many distinct nodes as it has parts (parts of one shape are interchangeable, so
  sets, not orders; parts of several shapes are assigned in order of size) is tried: each
  part takes the GPUs of its node nearest a cabled NIC (those no other job holds first, then
  any, evicting the single-node jobs there), the CPUs and memory of the greedy choice
  (:func:`~toposcope.sim.node_oracle.greedy_allocation`), and the single-node jobs are
  re-placed by the single-job search; the best joint result is kept. Sweeps over the gangs
  repeat until one changes nothing (at most :data:`SWEEPS`). Past :data:`MAX_NODE_SETS`
  sets per gang the search takes the sets in order and says so (``exact`` is then never
  claimed: the knapsack bound stays the bound).
* **single-node jobs**: the single-job moves and ejection chains of the node-level search,
  with gang parts fixed (a part only moves with its gang).

A gang's moves cost a checkpoint and restart of every rank (the judge's move costs,
:func:`gang_move_costs`), not counted in the search's aggregate, as for single jobs.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from toposcope.rm import Allocation
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds
from toposcope.sim.gang_engine import GangBook
from toposcope.sim.gang_price import Gang, crossing_counts, gang_slowdown
from toposcope.sim.jobs import JobSpec
from toposcope.sim.model import CoRunner, evaluate
from toposcope.sim.node_oracle import greedy_allocation
from toposcope.sim.nodetemplate import NodeTemplate
from toposcope.sim.oracle import (
    EPSILON,
    OracleResult,
    _Search,
    finish,
    starting_point,
)

#: node sets tried per gang and sweep; beyond, the first ones in node order
MAX_NODE_SETS = 3_000
#: sweeps over the gangs
SWEEPS = 3


def _key(alloc: Allocation) -> tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """An allocation as a dictionary key."""
    return (alloc.node, tuple(alloc.gpus), tuple(alloc.cpus), tuple(alloc.mems))


class _GangSearch(_Search):
    """The node-level search with gang parts scored as their gang and moved only whole."""

    def __init__(
        self,
        templates: Mapping[str, NodeTemplate],
        specs: Mapping[str, JobSpec],
        ideal: Mapping[str, float],
        book: GangBook,
    ) -> None:
        super().__init__(templates, specs, ideal)
        self.book = book
        self.gangs = [g for g in book.gangs.values() if all(p in specs for p in g.parts)]
        self.truncated = False
        self._seen: dict[tuple[object, ...], float] = {}

    def efficiency(self, name: str, alloc: Allocation, co: Sequence[CoRunner]) -> float:
        """As the node-level search, a gang's part at its gang's pace (single-node jobs'
        figures remembered: the gang sweeps score the same node states again and again).
        """
        gang_name = self.book.part_of.get(name)
        if gang_name is None:
            key = (name, _key(alloc), tuple(sorted((s.name, _key(a)) for s, a in co)))
            found = self._seen.get(key)
            if found is None:
                found = self._seen[key] = super().efficiency(name, alloc, co)
            return found
        self.evaluations += 1
        if name not in self.ideal:
            return 0.0
        gang = self.book.gangs[gang_name]
        allocs = {p: self.alloc.get(p) for p in gang.parts}
        allocs[name] = alloc
        placed = {p: a for p, a in allocs.items() if a is not None}
        if len(placed) < len(gang.parts):
            return 0.0
        slowdowns = {}
        for part, where in placed.items():
            runners = co if part == name else self.co_runners(where.node, part)
            template = self.templates[where.node]
            slowdowns[part] = evaluate(self.specs[part], where, template, runners).slowdown
        others = [
            [a.node for a in placing.values() if a is not None]
            for g in self.gangs
            if g.name != gang_name
            and all((placing := {p: self.alloc.get(p) for p in g.parts}).values())
        ]
        crossing = crossing_counts([*others, [a.node for a in placed.values()]], self.book.prices)
        slowdown, _ = gang_slowdown(
            gang, placed, slowdowns, crossing, self.book.prices, self.templates
        )
        if math.isinf(slowdown):
            return 0.0
        return self.specs[name].base_throughput / slowdown / self.ideal[name]

    def options(self, name: str) -> list[tuple[float, Allocation]]:
        """No single-job moves for a gang's part (it moves with its gang)."""
        if name in self.book.part_of:
            return []
        return super().options(name)

    def moves_alone(self, name: str) -> bool:
        """A gang's part moves only with its gang: the ejection chains are among the
        single-node jobs only."""
        return name not in self.book.part_of

    def gang_moves(self, order: Sequence[str], deadline: float) -> bool:
        """One sweep of whole-gang placements (see the module docstring); returns whether
        the aggregate rose.
        """
        improved = False
        for gang in sorted(self.gangs, key=lambda g: (-self._gang_gpus(g), g.name)):
            if time.perf_counter() > deadline:
                break
            base = dict(self.alloc)
            best_total, best = self.total(), base
            for nodes in self._node_sets(gang):
                if time.perf_counter() > deadline:
                    break
                self.load(base)
                if not self._put(gang, nodes):
                    continue
                self.improve(order)
                total = self.total()
                if total > best_total + EPSILON:
                    best_total, best, improved = total, dict(self.alloc), True
            self.load(best)
        return improved

    def _gang_gpus(self, gang: Gang) -> int:
        return sum(self.specs[p].gpus for p in gang.parts)

    def _node_sets(self, gang: Gang) -> Iterable[tuple[str, ...]]:
        """Sets of distinct nodes, each large enough for the part it would take."""
        need = max(self.specs[p].gpus for p in gang.parts)
        nodes = [n for n, t in self.templates.items() if len(t.gpus) >= need]
        sets = itertools.combinations(nodes, len(gang.parts))
        if math.comb(len(nodes), len(gang.parts)) > MAX_NODE_SETS:
            self.truncated = True
            return itertools.islice(sets, MAX_NODE_SETS)
        return sets

    def _put(self, gang: Gang, nodes: Sequence[str]) -> bool:
        """Place ``gang``'s parts on ``nodes`` (largest part first), evicting single-node
        jobs from the GPUs they take; ``False`` when a node cannot hold its part.
        """
        for part in gang.parts:
            self.remove(part)
        parts = sorted(gang.parts, key=lambda p: (-self.specs[p].gpus, p))
        for part, node in zip(parts, nodes, strict=True):
            alloc = self._part_allocation(part, node)
            if alloc is None:
                return False
            for holder in sorted(self.on_node[node]):
                held = self.alloc.get(holder)
                if held is not None and set(held.gpus) & set(alloc.gpus):
                    self.remove(holder)
            self.place(part, alloc)
        return True

    def _part_allocation(self, part: str, node: str) -> Allocation | None:
        """The part's allocation on ``node``: the NIC-nearest GPUs, free ones first."""
        spec, template = self.specs[part], self.templates[node]
        fixed = {
            g
            for holder in self.on_node[node]
            if (a := self.alloc.get(holder)) is not None
            and (holder in self.book.part_of or holder not in self.ideal)
            for g in a.gpus
        }
        held = {g for holder in self.on_node[node] if (a := self.alloc.get(holder)) for g in a.gpus}
        pool = [g.index for g in template.gpus if g.index not in fixed]
        prices = self.book.prices
        near = [g for g in pool if prices.nic_share(node, template, [g]) >= 1.0]
        free = [g for g in pool if g not in held]
        for choice in ([g for g in near if g in free], near, free, pool):
            if len(choice) >= spec.gpus:
                return greedy_allocation(spec, node, template, choice)
        return None


def solve_gangs(
    cluster: SimCluster, names: Iterable[str] | None = None, budget_s: float = 60.0
) -> OracleResult:
    """:func:`toposcope.sim.oracle.solve` for a cluster with gang jobs: the node-level
    search from the current allocation and from an empty cluster, then sweeps of whole-gang
    placements each followed by the single-job search and its ejection chains.
    """
    book = cluster.gangs
    assert book is not None
    started = time.perf_counter()
    deadline = started + budget_s
    point = starting_point(cluster, names)
    ideal, specs, start = point.ideal, point.specs, point.start
    search = _GangSearch(point.templates, specs, ideal, book)
    search.load(point.now)
    baseline = search.total()
    order = sorted(
        (n for n in ideal if n not in book.part_of),
        key=lambda n: (-specs[n].gpus, -specs[n].threads, n),
    )
    best_total, best_alloc = -1.0, dict(start)
    for seed in ("current", "empty"):
        if seed == "current":
            search.load(start)
        else:
            search.load({n: (None if n in ideal else a) for n, a in start.items()})
        search.improve(order)
        for _ in range(SWEEPS):
            if not search.gang_moves(order, deadline):
                break
        while search.eject(deadline):
            search.improve(order)
        total = search.total()
        if total > best_total + EPSILON:
            best_total, best_alloc = total, dict(search.alloc)
    result = finish(search, point, best_alloc, best_total, baseline, started)
    if search.truncated:
        return replace(result, exact=False)
    return result


def gang_move_costs(
    chosen: Mapping[str, Allocation | None],
    start: Mapping[str, Allocation | None],
    specs: Mapping[str, JobSpec],
    book: GangBook | None,
) -> dict[str, float]:
    """Checkpoint-restore seconds of the jobs a solution moves off their GPUs or node from
    where they ran at ``start`` (placing a pending job costs nothing); when one part of a
    gang moves, every rank of the gang checkpoints and restarts: each part stands still
    for the slowest part's checkpoint-restore.
    """
    costs: dict[str, float] = {}
    for name, alloc in chosen.items():
        was = start.get(name)
        if alloc is None or was is None or name not in specs:
            continue
        if alloc.node != was.node or sorted(alloc.gpus) != sorted(was.gpus):
            costs[name] = checkpoint_restore_seconds(specs[name])
    if book is None:
        return costs
    for gang in book.gangs.values():
        if not any(p in costs for p in gang.parts):
            continue
        pause = max(checkpoint_restore_seconds(specs[p]) for p in gang.parts if p in specs)
        for part in gang.parts:
            if part in specs and start.get(part) is not None:
                costs[part] = pause
    return costs
