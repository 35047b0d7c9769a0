"""fabric-placement's joint re-placement: running multi-node jobs spread over more of the
fabric than they need, moved *together* when no tighter cell is free for any one of them.

:mod:`.fabric_moves` moves one spread job onto a cell that is free once its own GPUs count
free. When every tighter cell holds a part of another spread job (three jobs of two nodes
each over three leaves of two nodes, each job across two leaves), none can move alone, yet
swapping their parts puts each under one leaf. :func:`best_swap` searches such swaps:

* **who moves**: each running multi-node job whose traffic crosses a level above the
  tightest it could ever fit under (:func:`~toposcope.fabric.cellfit.lowest_level_possible`
  over the fabric's GPU counts) and whose time left is known, or assumed with
  ``unknown_time_left_s``; jobs that do not move keep their nodes and count for contention;
* **where**: for each such job, stay, or one of the :data:`CELLS_PER_JOB` cells of its
  tightest level with the most room for it (its own GPUs, free GPUs and GPUs of the other
  moving jobs); every combination is tried, at most :data:`MAX_COMBINATIONS`;
* **packing** (:func:`_pack`): jobs with the largest parts first; on its cell a job takes
  the nodes it already runs on, then those with room, then those where single-node jobs
  can make room. A part keeps its GPU indices where they are free (a pinned rank stays
  pinned on an identical node), else takes the lowest free ones. A single-node job in the
  way is moved aside onto a node where its own GPU indices are free (its own node first). A
  job only goes to nodes made like its own (GPU models, their NUMA nodes and links: it runs
  there as it does now); a combination that cannot place every part and every job moved
  aside is dropped;
* **price**: a job's step time over its slowest level is ``1 + per_level x sum over the
  levels it crosses above its tightest of taper x sharers``: ``per_level`` the job's own,
  from its measured NIC load (:func:`~toposcope.advisor.gang_share.gang_share`), else the
  slowdown prior of :mod:`~toposcope.advisor.fabric_wait` (it assumes a 2:1 tapered uplink
  used by one job), ``taper`` the crossed switches' oversubscription from the fabric file
  over that 2:1 (1 where the file does not give it), ``sharers`` the most multi-node jobs
  crossing one uplink the job crosses. Over its time left a job saves ``left x (1 - f_new /
  f_now)`` seconds; every moved job (multi-node or moved aside) costs one restart
  (``restart_seconds``). Savings and restarts are weighed in GPU-seconds: a 2-GPU job's
  restart stands still 2 GPUs, a 16-GPU job's saving frees 16;
* **rules**: a combination that makes any multi-node job slower is dropped (no collateral),
  every moving job must save more than its own restart (a job about to end never moves),
  and the best combination is kept when its summed saving beats its summed restarts, both
  in GPU-seconds.

The answer (:class:`Swap`) names every job, part, node and GPU; :mod:`.fabric_swap_advice`
makes it a recommendation that a backend applies at once or refuses whole.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from toposcope.advisor.gang_share import GangShare, gang_share
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies.fabric_moves import MoveRule, RunningJob
from toposcope.fabric.cellfit import lowest_level_possible, span_level
from toposcope.fabric.cells import CellTree, NodeFree

#: cells of its tightest level tried per moving job
CELLS_PER_JOB = 4
#: combinations of cells tried at most (the jobs with the most to save first)
MAX_COMBINATIONS = 4096
#: moving jobs considered at most
MAX_JOBS = 6
#: the uplink taper the per-level prior assumes (2:1)
PRIOR_TAPER = 2.0


@dataclass(frozen=True)
class Part:
    """One workload of a job on one node: where it is and where it goes."""

    workload: str
    from_node: str
    from_gpus: tuple[int, ...]
    node: str
    gpus: tuple[int, ...]

    @property
    def moves(self) -> bool:
        """Whether the part changes node or GPUs."""
        return self.node != self.from_node or sorted(self.gpus) != sorted(self.from_gpus)


@dataclass(frozen=True)
class MovedJob:
    """A job of the swap: a multi-node job onto its cell, or a single-node job moved aside."""

    job: str
    parts: tuple[Part, ...]
    multi_node: bool
    cell: str = ""
    level_now: str = ""
    level_new: str = ""
    factor_now: float = 1.0
    factor_new: float = 1.0
    time_left: float = 0.0
    saved_s: float = 0.0
    #: GPUs the job holds (what its saving and its restart are weighed by)
    gpus: int = 0
    #: what priced a multi-node job's step time (its measured NIC load or the prior)
    share: GangShare | None = None


@dataclass(frozen=True)
class Swap:
    """The best joint re-placement: the moved jobs, the saving and the restarts."""

    jobs: tuple[MovedJob, ...]
    saved_s: float
    restart_s: float
    combinations: int
    #: multi-node jobs that stay but run faster (fewer sharers on their uplinks): job -> s
    helped: Mapping[str, float] = field(default_factory=dict)
    #: the saving and the restarts weighed by the GPUs of each job (GPU-seconds)
    saved_gpu_s: float = 0.0
    restart_gpu_s: float = 0.0

    @property
    def net_s(self) -> float:
        """Seconds saved less the restarts."""
        return self.saved_s - self.restart_s

    @property
    def net_gpu_s(self) -> float:
        """GPU-seconds saved less the GPU-seconds the restarts stand still."""
        return self.saved_gpu_s - self.restart_gpu_s


@dataclass
class _Board:
    """Free GPU indices per node and the single-node jobs on each, as a packing changes them."""

    total: dict[str, int]
    avail: dict[str, set[int]]
    singles: dict[str, dict[str, tuple[int, ...]]]
    #: each node's make-up (GPU models, NUMA nodes, links): a job only moves to its like
    shape: dict[str, Hashable] = field(default_factory=dict)

    def like(self, node: str, other: str) -> bool:
        """Whether ``node`` is made like ``other`` (a job runs there as it does now)."""
        return node in self.shape and self.shape.get(node) == self.shape.get(other)

    def copy(self) -> _Board:
        return _Board(
            dict(self.total),
            {n: set(g) for n, g in self.avail.items()},
            {n: dict(s) for n, s in self.singles.items()},
            self.shape,
        )


def best_swap(
    tree: CellTree,
    free: Mapping[str, NodeFree],
    model: ClusterModel,
    jobs: Sequence[RunningJob],
    rule: MoveRule,
    fixed_nodes: Iterable[str] = (),
) -> Swap | None:
    """The best joint move of ``jobs`` (running multi-node jobs; see the module docstring),
    or ``None`` when none fits or no moving job saves more than its restart; it pays when its
    :attr:`Swap.net_gpu_s` is above 0. ``fixed_nodes`` are not used (taken by other advice).
    """
    fixed = set(fixed_nodes)
    gangs = {j.name: j for j in jobs}
    part_names = {p.split("/", 1)[1] for j in jobs for p in j.parts}
    capacity = {n: NodeFree(n, s.total, s.total) for n, s in free.items()}
    board = _board(free, model, tree, part_names)
    tightest = {j.name: lowest_level_possible(tree, capacity, len(j.gpus), _share(j)) for j in jobs}
    now = {j.name: tuple(j.gpus) for j in jobs}
    extra_now = _extras(tree, now, tightest)
    shares = {j.name: gang_share(model, j.gpus, extra_now[j.name], rule.per_level) for j in jobs}
    before = _factors(extra_now, shares)
    movers = [
        j
        for j in jobs
        if j.time_left is not None
        and (level := span_level(tree, j.gpus)) is not None
        and (tight := tightest[j.name]) is not None
        and level > tight
        and not fixed.intersection(j.gpus)
        and len(j.parts) == len(j.gpus)
        and all(board.like(n, next(iter(j.gpus))) for n in j.gpus)
    ]
    movers.sort(key=lambda j: (-(j.time_left or 0.0) * (1 - 1 / before[j.name]), j.name))
    movers = movers[:MAX_JOBS]
    if not movers:
        return None
    for job in movers:  # a mover's GPUs are free for the packing
        for node, gpus in job.gpus.items():
            board.avail.setdefault(node, set()).update(gpus)
    options = [
        [None, *_cells(tree, board, job, tightest[job.name] or 0, gangs, fixed)] for job in movers
    ]
    best: Swap | None = None
    tried = 0
    for combo in itertools.product(*options):
        if all(c is None for c in combo) or tried >= MAX_COMBINATIONS:
            continue
        tried += 1
        found = _try(tree, board, movers, combo, now, (tightest, shares, before), rule)
        if found is None:
            continue
        if best is None or found.net_gpu_s > best.net_gpu_s:
            best = found
    if best is None:
        return None
    return replace(best, combinations=tried)


def _share(job: RunningJob) -> int:
    return max(len(g) for g in job.gpus.values())


def _gpus(job: RunningJob) -> int:
    return sum(len(g) for g in job.gpus.values())


def _board(
    free: Mapping[str, NodeFree], model: ClusterModel, tree: CellTree, parts: set[str]
) -> _Board:
    """Free indices and single-node jobs of every fabric node in ``free``."""
    total = {n: s.total for n, s in free.items()}
    avail = {n: set(s.free_indices or ()) for n, s in free.items()}
    nodes_of: dict[str, set[str]] = {}
    for w in model.workloads:
        if w.gpus:
            nodes_of.setdefault(w.name, set()).add(w.node)
    singles: dict[str, dict[str, tuple[int, ...]]] = {n: {} for n in free}
    for w in model.workloads:
        single = w.gpus and len(nodes_of[w.name]) == 1 and w.name not in parts
        if single and w.node in free and w.node in tree.path:
            singles[w.node][w.name] = tuple(sorted(w.gpus))
    shape: dict[str, Hashable] = {}
    for name in free:
        node = model.nodes.get(name)
        if node is not None:
            gpus = tuple((g.index, g.model, g.numa_node) for g in node.gpus)
            shape[name] = (gpus, tuple(sorted(node.links.items())))
    return _Board(total, avail, singles, shape)


def _cells(
    tree: CellTree,
    board: _Board,
    job: RunningJob,
    level: int,
    gangs: Mapping[str, RunningJob],
    fixed: set[str],
) -> list[int]:
    """The cells of ``level`` that could hold ``job`` (enough nodes of its part size, none
    taken by other advice), the most room first, at most :data:`CELLS_PER_JOB`.
    """
    share = _share(job)
    home = next(iter(job.gpus))
    scored: list[tuple[int, int, int]] = []
    for at in tree.cells_at(level):
        nodes = [
            n
            for n in tree.cells[at].nodes
            if board.total.get(n, 0) >= share and n not in fixed and board.like(n, home)
        ]
        if len(nodes) < len(job.gpus):
            continue
        own = sum(1 for n in nodes if n in job.gpus)
        room = sum(len(board.avail.get(n, ())) for n in nodes)
        scored.append((-own, -room, at))
    return [at for _, _, at in sorted(scored)[:CELLS_PER_JOB]]


def _try(
    tree: CellTree,
    start: _Board,
    movers: Sequence[RunningJob],
    combo: Sequence[int | None],
    now: Mapping[str, tuple[str, ...]],
    prices: tuple[Mapping[str, int | None], Mapping[str, GangShare], Mapping[str, float]],
    rule: MoveRule,
) -> Swap | None:
    """One combination packed and priced; ``None`` when it does not fit or harms a job.
    ``prices``: each job's tightest level, what prices its step time and its factor now.
    """
    tightest, shares, before = prices
    board = start.copy()
    moving = [(j, c) for j, c in zip(movers, combo, strict=True) if c is not None]
    staying = [j for j, c in zip(movers, combo, strict=True) if c is None]
    for job in staying:  # a mover left in place keeps its GPUs
        for node, gpus in job.gpus.items():
            board.avail.setdefault(node, set()).difference_update(gpus)
    placed: dict[str, tuple[Part, ...]] = {}
    aside: dict[str, tuple[str, tuple[int, ...]]] = {}
    for job, cell in sorted(moving, key=lambda jc: (-_share(jc[0]), jc[0].name)):
        parts = _pack(tree, board, job, cell, aside)
        if parts is None:
            return None
        placed[job.name] = parts
    moved_aside = _place_aside(board, aside)
    if moved_aside is None:
        return None
    after = dict(now)
    for name, parts in placed.items():
        after[name] = tuple(sorted({p.node for p in parts}))
    factors = _factors(_extras(tree, after, tightest), shares)
    if any(factors[n] > before[n] + 1e-9 for n in factors):
        return None
    lefts = {j.name: j.time_left or 0.0 for j in movers}
    jobs: list[MovedJob] = []
    saved = saved_gpu = 0.0
    for job, cell in moving:
        gain = lefts[job.name] * (1.0 - factors[job.name] / before[job.name])
        if gain <= rule.restart_seconds:
            return None
        saved += gain
        saved_gpu += gain * _gpus(job)
        jobs.append(
            MovedJob(
                job.name,
                placed[job.name],
                True,
                tree.cells[cell].name,
                tree.levels[span_level(tree, now[job.name]) or 0],
                tree.levels[tree.cells[cell].level],
                before[job.name],
                factors[job.name],
                lefts[job.name],
                gain,
                _gpus(job),
                shares[job.name],
            )
        )
    helped = {
        j.name: lefts[j.name] * (1.0 - factors[j.name] / before[j.name])
        for j in staying
        if factors[j.name] < before[j.name] - 1e-9
    }
    saved += sum(helped.values())
    saved_gpu += sum(v * _gpus(j) for j in staying if (v := helped.get(j.name)) is not None)
    jobs += moved_aside
    restarts = rule.restart_seconds * len(jobs)
    restart_gpu = rule.restart_seconds * sum(j.gpus for j in jobs)
    return Swap(tuple(jobs), saved, restarts, 0, helped, saved_gpu, restart_gpu)


def _pack(
    tree: CellTree,
    board: _Board,
    job: RunningJob,
    cell: int,
    aside: dict[str, tuple[str, tuple[int, ...]]],
) -> tuple[Part, ...] | None:
    """``job``'s parts onto nodes of ``cell`` (see the module docstring); ``board`` loses
    the GPUs taken and ``aside`` gains the single-node jobs moved out of the way.
    """
    share = _share(job)
    parts = sorted((node, name) for node, _, name in (p.partition("/") for p in job.parts))
    held = {node: job.gpus[node] for node in job.gpus}

    def room(node: str) -> tuple[int, int, str]:
        free = len(board.avail.get(node, ()))
        movable = sum(len(g) for g in board.singles.get(node, {}).values())
        own = 0 if node in held else 1
        need = 0 if free >= share else 1
        return (own, need if free + movable >= share else 2, node)

    home = next(iter(job.gpus))
    cell_nodes = tree.cells[cell].nodes
    nodes = sorted((n for n in cell_nodes if board.like(n, home)), key=room)[: len(parts)]
    if len(nodes) < len(parts) or any(room(n)[1] == 2 for n in nodes):
        return None
    staying = [p for p in parts if p[0] in nodes]
    going = [p for p in parts if p[0] not in nodes]
    targets = iter(n for n in nodes if n not in {p[0] for p in staying})
    result: list[Part] = []
    for from_node, workload in staying + going:
        node = from_node if (from_node, workload) in staying else next(targets)
        own = held[from_node]
        gpus = _take(board, node, own, len(own), aside)
        if gpus is None:
            return None
        result.append(Part(workload, from_node, own, node, gpus))
    return tuple(result)


def _take(
    board: _Board,
    node: str,
    own: tuple[int, ...],
    count: int,
    aside: dict[str, tuple[str, tuple[int, ...]]],
) -> tuple[int, ...] | None:
    """``count`` GPUs of ``node`` (``own`` indices where free), moving single-node jobs
    aside until there is room (those on ``own`` indices first); ``None``: too few.
    """
    avail = board.avail.setdefault(node, set())
    singles = board.singles.setdefault(node, {})
    order = sorted(singles, key=lambda s: (not set(singles[s]) & set(own), -len(singles[s]), s))
    for name in order:
        if set(own) <= avail or (len(avail) >= count and not set(own) & set(singles[name])):
            break
        gpus = singles.pop(name)
        avail.update(gpus)
        aside[name] = (node, gpus)
    if len(avail) < count:
        return None
    chosen = tuple(sorted(own)) if set(own) <= avail else tuple(sorted(avail)[:count])
    avail.difference_update(chosen)
    return chosen


def _place_aside(
    board: _Board, aside: Mapping[str, tuple[str, tuple[int, ...]]]
) -> list[MovedJob] | None:
    """Each single-node job moved aside onto a node with room (its own node and indices
    first, then its own indices elsewhere, then the most room); ``None`` when one finds none.
    """
    moved: list[MovedJob] = []
    for name, (node, gpus) in sorted(aside.items(), key=lambda kv: (-len(kv[1][1]), kv[0])):
        want = set(gpus)

        def fit(candidate: str, want: set[int] = want, home: str = node) -> tuple[int, int, str]:
            avail = board.avail.get(candidate, set())
            return (
                0 if candidate == home and want <= avail else 1 if want <= avail else 2,
                -len(avail),
                candidate,
            )

        fits = [n for n, a in board.avail.items() if want <= a and board.like(n, node)]
        if not fits:
            return None
        target = min(fits, key=fit)
        avail = board.avail[target]
        chosen = tuple(sorted(want)) if want <= avail else tuple(sorted(avail)[: len(gpus)])
        avail.difference_update(chosen)
        part = Part(name, node, gpus, target, chosen)
        if part.moves:
            moved.append(MovedJob(name, (part,), False, gpus=len(gpus)))
    return moved


def _extras(
    tree: CellTree,
    placing: Mapping[str, tuple[str, ...]],
    tightest: Mapping[str, int | None],
) -> dict[str, float]:
    """Each multi-node job's levels crossed above its tightest where ``placing`` puts it, each
    weighted by its uplink's taper over 2:1 and the jobs sharing it (module docstring).
    """
    spans = {name: span_level(tree, nodes) for name, nodes in placing.items()}
    crossing: dict[int, int] = {}
    for name, nodes in placing.items():
        span = spans[name]
        if span is None:
            continue
        for at in _uplinks(tree, nodes, span):
            crossing[at] = crossing.get(at, 0) + 1
    oversub = {s.name: s.oversubscription for s in tree.fabric.switches}
    extras: dict[str, float] = {}
    for name, nodes in placing.items():
        span, low = spans[name], tightest.get(name)
        if span is None or low is None or span <= low:
            extras[name] = 0.0
            continue
        extra = 0.0
        for level in range(max(low, 1), span):
            worst = 0.0
            for cell in {c for n in nodes if (c := tree.cell_of(n, level)) is not None}:
                taper = oversub.get(tree.cells[cell].name)
                scale = taper / PRIOR_TAPER if taper else 1.0
                worst = max(worst, scale * crossing.get(cell, 1))
            extra += worst
        extras[name] = extra
    return extras


def _factors(extras: Mapping[str, float], shares: Mapping[str, GangShare]) -> dict[str, float]:
    """Each multi-node job's step-time factor: ``1 + per_level x extra`` (module docstring)."""
    return {name: 1.0 + shares[name].per_level * extra for name, extra in extras.items()}


def _uplinks(tree: CellTree, nodes: Iterable[str], span: int) -> set[int]:
    """The cells below ``span`` (above the nodes) whose uplinks the job's traffic crosses."""
    found: set[int] = set()
    for level in range(1, span):
        for node in nodes:
            at = tree.cell_of(node, level)
            if at is not None:
                found.add(at)
    return found
