"""The placement policies the fabric trace replay compares.

Every policy places a job of ``gpus`` GPUs on a fabric of ``G``-GPU nodes: a job of at most
``G`` GPUs on one node, a larger one as a gang of ``gpus / G`` whole nodes. Each sees the
free GPUs of every node (:class:`View`) and answers :class:`Place`, :class:`Hold` (a job
that could start now but waits for a tighter cell) or ``None`` (it does not fit now).

* ``first-fit``: the first nodes by name that have the GPUs (a topology-blind scheduler;
  names are in leaf order, so it fills leaf after leaf).
* ``bestfit``: Kueue's topology-aware scheduling with its ``BestFit`` algorithm and a
  *preferred* level: the lowest level with a domain that holds the job, and there the
  domain with the least free capacity that does; inside it the nodes with the fewest free
  GPUs. When no single domain of any level holds the job it takes the fewest leaves,
  largest first, the last one the smallest that holds the rest. It never waits.
* ``hard-affinity``: a gang job waits until one leaf has the nodes for it (first leaf by
  name, first-fit inside): the hard locality constraint HiveD (OSDI '20) and the Philly
  analysis (ATC '19) show queueing behind; single-node jobs first-fit, which packs them into
  the first leaves and leaves the others whole.
* ``hard-affinity-spread``: the same constraint, single-node jobs on the node with the most
  free GPUs (kube-scheduler's default ``LeastAllocated`` scoring, as where only the gang
  jobs go through topology-aware admission): small jobs scatter over every node, and a gang
  finds whole nodes in one leaf only when enough of them have ended.
* ``toposcope``: the advisor's rules: :func:`toposcope.fabric.cellfit.choose` (the tightest
  level, the cell whose choice breaks the fewest fully free buddy cells, then best fit;
  single-node jobs too, so that they keep whole nodes and leaves free) and, when that lands
  above the tightest level the job could have, the wait-or-spread rule
  (:func:`toposcope.advisor.fabric_wait.wait_for_tighter` with the advisor's own per-level
  prior, not the judge's model), each node's readiness from the running jobs' ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from toposcope.advisor.fabric_wait import ready_times, wait_for_tighter
from toposcope.fabric.cellfit import choose, lowest_level_possible, node_ready_wait, span_level
from toposcope.fabric.cells import CellTree, NodeFree


@dataclass(frozen=True)
class Place:
    """Start the job on ``nodes``, ``share`` GPUs on each, spanning tree level ``level``."""

    nodes: tuple[str, ...]
    share: int
    level: int


@dataclass(frozen=True)
class Hold:
    """The job could start now at ``level`` but waits for a cell of level ``tighter``,
    expected to hold it in ``wait_s`` seconds.
    """

    level: int
    tighter: int
    cell: str
    wait_s: float


@dataclass
class View:
    """What a policy sees: the cell tree, each node's GPUs and free GPUs (node name order),
    when each running job is expected to end, what each node's jobs hold, and for how long
    each pending job has been held already.
    """

    tree: CellTree
    gpus: Mapping[str, int]
    free: dict[str, int]
    order: Sequence[str]
    now: float = 0.0
    #: node -> (GPUs held, expected end time, job) of each running job on it
    holders: dict[str, list[tuple[int, float, str]]] = field(default_factory=dict)
    #: job -> when it was first held
    held_since: dict[str, float] = field(default_factory=dict)
    #: how many jobs are queued now
    queued: int = 0

    def shape(self, gpus: int) -> tuple[int, int]:
        """(nodes, GPUs per node) of a job of ``gpus`` GPUs on this fabric's nodes."""
        per = max(self.gpus.values())
        if gpus <= per:
            return 1, gpus
        return math.ceil(gpus / per), per

    def node_free(self) -> dict[str, NodeFree]:
        """The free GPUs as :mod:`toposcope.fabric.cells` counts them (indices unknown)."""
        return {n: NodeFree(n, self.gpus[n], self.free[n]) for n in self.order}


Decision = Place | Hold | None
Policy = Callable[[View, str, int, float], Decision]


def first_fit(view: View, job: str, gpus: int, run_s: float) -> Decision:
    """The first nodes by name with the GPUs free."""
    nodes, share = view.shape(gpus)
    picked = [n for n in view.order if view.free[n] >= share][:nodes]
    return _place(view, picked, nodes, share)


def bestfit(view: View, job: str, gpus: int, run_s: float) -> Decision:
    """Kueue TAS ``BestFit`` with a preferred level (module docstring)."""
    nodes, share = view.shape(gpus)
    tree = view.tree
    usable = {n for n in view.order if view.free[n] >= share}
    if len(usable) < nodes:
        return None
    for level in range(1, len(tree.levels) - 1):
        members = _members(tree, usable, level)
        fits = [at for at, names in members.items() if len(names) >= nodes]
        if fits:
            best = min(fits, key=lambda at: (_free_in(view, members[at]), tree.cells[at].name))
            return _place(view, _tightest(view, members[best], nodes), nodes, share)
    members = _members(tree, usable, 1)
    ranked = sorted(members.values(), key=lambda names: (-len(names), names[0]))
    picked: list[str] = []
    for at, names in enumerate(ranked):
        need = nodes - len(picked)
        if len(names) >= need:
            holds = [r for r in ranked[at:] if len(r) >= need]
            last = min(holds, key=lambda r: (len(r), _free_in(view, r), r[0]))
            picked += _tightest(view, last, need)
            break
        picked += names
    return _place(view, picked, nodes, share)


def least_allocated(view: View, job: str, gpus: int, run_s: float) -> Decision:
    """A single-node job on the node with the most free GPUs (kube-scheduler's default
    ``LeastAllocated`` score); a gang job first-fit.
    """
    nodes, share = view.shape(gpus)
    if nodes > 1:
        return first_fit(view, job, gpus, run_s)
    usable = [n for n in view.order if view.free[n] >= share]
    return _place(view, sorted(usable, key=lambda n: (-view.free[n], n))[:1], 1, share)


def hard_affinity(view: View, job: str, gpus: int, run_s: float) -> Decision:
    """A gang job only within one leaf (first leaf by name that holds it, first-fit); a
    single-node job first-fit.
    """
    return _within_leaf(view, job, gpus, run_s, first_fit)


def hard_affinity_spread(view: View, job: str, gpus: int, run_s: float) -> Decision:
    """As :func:`hard_affinity`, single-node jobs by :func:`least_allocated`."""
    return _within_leaf(view, job, gpus, run_s, least_allocated)


def _within_leaf(view: View, job: str, gpus: int, run_s: float, single: Policy) -> Decision:
    nodes, share = view.shape(gpus)
    if nodes == 1:
        return single(view, job, gpus, run_s)
    usable = [n for n in view.order if view.free[n] >= share]
    members = _members(view.tree, usable, 1)
    for at in sorted(members, key=lambda a: members[a][0]):
        if len(members[at]) >= nodes:
            return _place(view, members[at][:nodes], nodes, share)
    return None


def toposcope(view: View, job: str, gpus: int, run_s: float) -> Decision:
    """The advisor's cells and wait-or-spread rule (module docstring)."""
    nodes, share = view.shape(gpus)
    tree = view.tree
    free = view.node_free()
    choice = choose(tree, free, nodes, share)
    if choice is None:
        return None
    level = span_level(tree, choice.nodes) or choice.level
    if nodes == 1:
        return Place(choice.nodes, share, 0)
    tightest = lowest_level_possible(tree, free, nodes, share) or choice.level
    if level > tightest:
        hold = _hold(view, job, free, nodes, share, level, tightest, run_s)
        if hold is not None:
            return hold
    return Place(choice.nodes, share, level)


def _hold(
    view: View,
    job: str,
    free: Mapping[str, NodeFree],
    nodes: int,
    share: int,
    level: int,
    tightest: int,
    run_s: float,
) -> Hold | None:
    """The tighter cell worth waiting for (the advisor's rule), counting the time this job
    has been held already as part of the wait.
    """
    counts = {n: (f.total, f.free) for n, f in free.items()}
    left = {
        n: [(g, max(0.0, end - view.now)) for g, end, _ in held] for n, held in view.holders.items()
    }
    ready = ready_times(left, counts, share)
    waited = view.now - view.held_since.get(job, view.now)
    for tighter in range(tightest, level):
        found = node_ready_wait(view.tree, free, tighter, nodes, share, ready)
        if found is None or math.isinf(found[1]):
            continue
        cell, wait_s = found
        if wait_for_tighter(
            run_s,
            level - tightest,
            tighter - tightest,
            waited + wait_s,
            gpus=nodes * share,
            waiting=max(0, view.queued - 1),
        ):
            return Hold(level, tighter, cell, wait_s)
    return None


def _members(tree: CellTree, nodes: Sequence[str] | set[str], level: int) -> dict[int, list[str]]:
    """Cell of ``level`` -> its nodes among ``nodes`` (name order)."""
    members: dict[int, list[str]] = {}
    for node in sorted(nodes):
        at = tree.cell_of(node, level)
        if at is not None:
            members.setdefault(at, []).append(node)
    return members


def _free_in(view: View, names: Sequence[str]) -> int:
    """Free GPUs of a domain's nodes that can take a part of the job."""
    return sum(view.free[n] for n in names)


def _tightest(view: View, names: Sequence[str], count: int) -> list[str]:
    """The ``count`` nodes of ``names`` with the fewest free GPUs (then by name)."""
    return sorted(names, key=lambda n: (view.free[n], n))[:count]


def _place(view: View, picked: Sequence[str], nodes: int, share: int) -> Decision:
    if len(picked) < nodes:
        return None
    level = 0 if nodes == 1 else (span_level(view.tree, picked) or len(view.tree.levels) - 1)
    return Place(tuple(picked), share, level)


#: name -> policy, in report order
POLICIES: dict[str, Policy] = {
    "first-fit": first_fit,
    "bestfit": bestfit,
    "hard-affinity": hard_affinity,
    "hard-affinity-spread": hard_affinity_spread,
    "toposcope": toposcope,
}
#: policies that may hold a job that fits (the engine keeps their wait decisions)
WAITING = frozenset({"toposcope"})
