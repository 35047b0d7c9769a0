"""Where a multi-node job fits on the fabric's cells, keeping whole cells free.

Over a :class:`~toposcope.fabric.cells.CellTree` and each node's free GPUs:

* :func:`choose` places a job of ``nodes`` x ``gpus_per_node`` GPUs at the lowest level with
  a cell holding enough nodes that have ``gpus_per_node`` free GPUs (a leaf, then a spine,
  then a core or block...). Among that level's cells it takes the one breaking the fewest
  fully free cells below it (HiveD's buddy-cell rule), then the one with the least free GPUs
  (best fit, as Kueue's topology-aware ``BestFit`` picks among domains), then by name; inside
  it the fewest child cells, partly used ones first, and on each the tightest nodes. Where the
  cluster is rail-optimised and the free GPU indices are known, the nodes are chosen so that
  they all give the same GPU indices (local rank k on rail k everywhere);
* :func:`lowest_level_possible` is the tightest level the job could ever get (every GPU free);
* :func:`node_ready_wait` gives, for a level, the shortest time until some cell of it could
  hold the job, from when each node will have the GPUs free: what waiting for a tighter cell
  costs.

Everything is a pure function of its arguments: on a 10,000-node fabric a choice takes
milliseconds (``bench/fabric_scale.py --cells``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from toposcope.fabric.cells import CellTree, NodeFree

#: how many candidate cells of the chosen level are picked in full and compared
SHORTLIST = 8
#: at most this many cell names are listed in a choice (the counts are always whole)
MAX_LISTED = 10


class CellError(ValueError):
    """A request that cannot be placed as asked (bad sizes), with what is wrong."""


@dataclass(frozen=True)
class Choice:
    """Where a job goes and what that does to the cells.

    ``level`` is the position of the chosen cell's level in the tree (``level_name`` its
    name, ``"fabric"`` when no single cell holds the job); ``nodes`` the chosen nodes;
    ``gpu_indices`` the GPU indices every chosen node gives (rail alignment; empty when not
    chosen by index); ``broken`` the fully free cells the job takes GPUs from (every level);
    ``kept_whole`` the fully free cells of the chosen level and the level below that stay
    fully free (at most :data:`MAX_LISTED` names each; ``kept_whole_count`` counts all);
    ``candidates`` how many cells of the chosen level could hold it.
    """

    level: int
    level_name: str
    cell: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    gpu_indices: tuple[int, ...]
    broken: tuple[str, ...]
    broken_count: int
    kept_whole: tuple[str, ...]
    kept_whole_count: int
    candidates: int
    rail_aligned: bool | None


def choose(
    tree: CellTree, free: Mapping[str, NodeFree], nodes: int, gpus_per_node: int
) -> Choice | None:
    """Where ``nodes`` nodes of ``gpus_per_node`` free GPUs each go (module docstring);
    ``None`` when the cluster has no such nodes now.
    """
    if nodes < 1 or gpus_per_node < 1:
        raise CellError(
            f"a job needs at least 1 node and 1 GPU per node, not {nodes} x {gpus_per_node}"
        )
    eligible = {n for n, s in free.items() if s.free >= gpus_per_node and n in tree.path}
    if len(eligible) < nodes:
        return None
    sums = tree.free_by_cell(free)
    whole = {at for at, (got, total) in sums.items() if total and got >= total}
    for level in range(1, len(tree.levels)):
        fits = _cells_that_fit(tree, eligible, level, nodes)
        if not fits:
            continue
        # the few best by a cheap key (a partly used cell before a whole one, then best fit)
        # are picked in full and ranked by the fully free cells each pick breaks
        shortlist = sorted(
            fits, key=lambda at: (at in whole, sums.get(at, (0, 0))[0], tree.cells[at].name)
        )[:SHORTLIST]
        ranked = []
        for at in shortlist:
            members = fits[at]
            picked, indices = _pick(tree, free, members, level, nodes, gpus_per_node, whole)
            broken = _broken(tree, picked, whole)
            ranked.append(
                (
                    len(broken),
                    sums.get(at, (0, 0))[0],
                    tree.cells[at].name,
                    at,
                    picked,
                    indices,
                    broken,
                )
            )
        ranked.sort(key=lambda r: (r[0], r[1], r[2]))
        _, _, name, _, picked, indices, broken = ranked[0]
        return _choice(
            tree, free, level, name, picked, gpus_per_node, indices, broken, whole, len(fits)
        )
    return None


def node_ready_wait(
    tree: CellTree,
    free: Mapping[str, NodeFree],
    level: int,
    nodes: int,
    gpus_per_node: int,
    ready_in: Mapping[str, float],
) -> tuple[str, float] | None:
    """The cell of ``level`` that could soonest hold ``nodes`` nodes of ``gpus_per_node``
    GPUs, and in how many seconds: nodes free enough now count at 0, the others at
    ``ready_in[node]`` (seconds until they have the GPUs; absent: never). ``None`` when no
    cell of that level has enough nodes with that many GPUs at all.
    """
    best: tuple[float, str] | None = None
    members: dict[int, list[float]] = {}
    for node in tree.path:
        state = free.get(node)
        if state is None or state.total < gpus_per_node:
            continue
        at = tree.cell_of(node, level)
        if at is None:
            continue
        wait = 0.0 if state.free >= gpus_per_node else ready_in.get(node, math.inf)
        members.setdefault(at, []).append(wait)
    for at, waits in members.items():
        if len(waits) < nodes:
            continue
        waits.sort()
        candidate = (waits[nodes - 1], tree.cells[at].name)
        if best is None or candidate < best:
            best = candidate
    return None if best is None else (best[1], best[0])


def lowest_level_possible(
    tree: CellTree, free: Mapping[str, NodeFree], nodes: int, gpus_per_node: int
) -> int | None:
    """The lowest level with a cell whose nodes have ``gpus_per_node`` GPUs in all (free or
    not) for ``nodes`` nodes: the tightest the job could ever get. ``None``: none at all.
    """
    capable = {n for n, s in free.items() if s.total >= gpus_per_node and n in tree.path}
    for level in range(1, len(tree.levels)):
        if _cells_that_fit(tree, capable, level, nodes):
            return level
    return None


def _cells_that_fit(
    tree: CellTree, eligible: Iterable[str], level: int, nodes: int
) -> dict[int, list[str]]:
    members: dict[int, list[str]] = {}
    for node in eligible:
        at = tree.cell_of(node, level)
        if at is not None:
            members.setdefault(at, []).append(node)
    return {at: sorted(names) for at, names in members.items() if len(names) >= nodes}


def _pick(
    tree: CellTree,
    free: Mapping[str, NodeFree],
    members: Sequence[str],
    level: int,
    nodes: int,
    gpus_per_node: int,
    whole: set[int],
) -> tuple[list[str], tuple[int, ...]]:
    """The nodes of one cell for the job, and the common GPU indices (rail alignment)."""
    indices: tuple[int, ...] = ()
    pool = list(members)
    if tree.rail_optimised:
        aligned = _rail_pool(free, pool, nodes, gpus_per_node)
        if aligned is not None:
            indices, pool = aligned
    return _fewest_children(tree, free, pool, level, nodes, gpus_per_node, whole), indices


def _rail_pool(
    free: Mapping[str, NodeFree], pool: Sequence[str], nodes: int, gpus_per_node: int
) -> tuple[tuple[int, ...], list[str]] | None:
    """GPU indices that at least ``nodes`` of ``pool`` have free, and those nodes; the index
    set held by most nodes wins (then the lowest indices). ``None`` when indices are unknown
    or no set is common to enough nodes.
    """
    candidates: dict[tuple[int, ...], None] = {}
    for node in pool:
        got = free[node].free_indices
        if got is None:
            return None
        if len(got) >= gpus_per_node:
            candidates[tuple(sorted(got)[:gpus_per_node])] = None
    best: tuple[int, tuple[int, ...], list[str]] | None = None
    for wanted in candidates:
        need = set(wanted)
        holders = [n for n in pool if need <= set(free[n].free_indices or ())]
        if len(holders) >= nodes and (
            best is None or (-len(holders), wanted) < (-best[0], best[1])
        ):
            best = (len(holders), wanted, holders)
    return None if best is None else (best[1], best[2])


def _fewest_children(
    tree: CellTree,
    free: Mapping[str, NodeFree],
    pool: Sequence[str],
    level: int,
    nodes: int,
    gpus_per_node: int,
    whole: set[int],
) -> list[str]:
    """``nodes`` nodes of ``pool`` (all in one cell of ``level``) over the fewest child cells,
    partly used children first, and the tightest nodes of each (recursively).
    """
    if level <= 1:
        ranked = sorted(pool, key=lambda n: (free[n].whole, free[n].free - gpus_per_node, n))
        return ranked[:nodes]
    children: dict[int, list[str]] = {}
    for node in pool:
        at = tree.cell_of(node, level - 1)
        children.setdefault(-1 if at is None else at, []).append(node)
    by_size = sorted(children.items(), key=lambda item: (-len(item[1]), tree.cells[item[0]].name))
    fewest = _count_to_cover((len(v) for _, v in by_size), nodes)
    order = sorted(
        children.items(),
        key=lambda item: (item[0] in whole, -len(item[1]), tree.cells[item[0]].name),
    )
    if _count_to_cover((len(v) for _, v in order), nodes) > fewest:
        order = by_size
    picked: list[str] = []
    for _, names in order:
        need = min(nodes - len(picked), len(names))
        picked += _fewest_children(tree, free, names, level - 1, need, gpus_per_node, whole)
        if len(picked) >= nodes:
            break
    return picked


def _count_to_cover(sizes: Iterable[int], nodes: int) -> int:
    total = 0
    for count, size in enumerate(sizes, start=1):
        total += size
        if total >= nodes:
            return count
    return sys.maxsize


def _broken(tree: CellTree, picked: Iterable[str], whole: set[int]) -> list[int]:
    """The fully free cells (every level below the root) the picked nodes take GPUs from."""
    hit: dict[int, None] = {}
    for node in picked:
        for at in tree.path[node][:-1]:
            if at in whole:
                hit[at] = None
    return list(hit)


def _choice(
    tree: CellTree,
    free: Mapping[str, NodeFree],
    level: int,
    name: str,
    picked: Sequence[str],
    gpus_per_node: int,
    indices: tuple[int, ...],
    broken: Sequence[int],
    whole: set[int],
    candidates: int,
) -> Choice:
    broken_set = set(broken)
    kept = [
        at
        for at in sorted(whole, key=lambda a: (-tree.cells[a].level, tree.cells[a].name))
        if at not in broken_set
        and tree.cells[at].level in (level, level - 1)
        and tree.cells[at].level > 0
    ]
    broken_names = sorted(tree.cells[at].name for at in broken if tree.cells[at].level > 0)
    shares = [free[n].free_indices for n in picked]
    aligned = None if any(s is None for s in shares) or not tree.rail_optimised else bool(indices)
    return Choice(
        level=level,
        level_name=tree.levels[level],
        cell=name,
        nodes=tuple(picked),
        gpus_per_node=gpus_per_node,
        gpu_indices=indices,
        broken=tuple(broken_names[:MAX_LISTED]),
        broken_count=len(broken_names),
        kept_whole=tuple(tree.cells[at].name for at in kept[:MAX_LISTED]),
        kept_whole_count=len(kept),
        candidates=candidates,
        rail_aligned=aligned,
    )


def span_level(tree: CellTree, nodes: Iterable[str]) -> int | None:
    """The lowest level at which all of ``nodes`` share one cell: the highest level their
    traffic crosses (``None`` for no nodes or one the fabric does not know).
    """
    names = list(nodes)
    if not names or any(node not in tree.path for node in names):
        return None
    for level in range(1, len(tree.levels)):
        cells = {tree.cell_of(node, level) for node in names}
        if len(cells) == 1 and None not in cells:
            return level
    return len(tree.levels) - 1
