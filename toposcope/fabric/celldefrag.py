"""Defragment a cell: which small jobs to move, and where, so that a multi-node job fits it.

A pending multi-node job often fits no leaf although a leaf has enough nodes: small jobs sit
on a few of them. Gandiva and HiveD move such jobs out of the way; :func:`clear_cell` plans it
over the cells of :mod:`toposcope.fabric.cells`. For each cell of the level asked (the
tightest the job could fit under), the nodes that lack the job's GPUs now are *clearable*
when every job holding GPUs on them is movable (the caller says which: single-node jobs that
may be checkpointed) and moving some of them frees enough GPUs; the fewest moves per node
are taken (largest jobs first). The cell needs as many cleared nodes as the job lacks there,
cheapest first. Each moved job goes to a node *outside* the cell with room for it, the
tightest such node first (best fit, so that whole nodes stay whole), each destination's room
counted down as it is used. The cell needing the fewest moves wins (then by name); a cell
whose moves find no room is not possible.

Where the free GPU indices are known, each move also names the GPUs it takes on its
destination (a resource manager that places GPU jobs by index needs them): the caller's
``fit`` says which, or that the job would run slower there (the node is then no room for
it); without one, the job's own indices where free, else the lowest free ones.

Pure: the result names the moves (job, from, to, GPUs) and the nodes the job then gets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from toposcope.fabric.cells import CellTree, NodeFree


@dataclass(frozen=True)
class Occupant:
    """A job holding ``gpus`` GPUs on one node, and whether it may be moved."""

    job: str
    gpus: int
    movable: bool
    #: its GPU indices on the node (empty: not known)
    indices: tuple[int, ...] = ()


#: (job, node it leaves, destination, free GPU indices there) -> the GPUs it takes there, or
#: ``None`` when it would run slower on them
Fit = Callable[[Occupant, str, str, Sequence[int]], tuple[int, ...] | None]


@dataclass(frozen=True)
class Move:
    """One job moved off a node of the cell onto a node outside it."""

    job: str
    from_node: str
    to_node: str
    gpus: int
    #: the GPU indices taken on ``to_node`` (empty where its free indices are not known)
    to_gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class CellClearing:
    """The cell to clear, the moves that clear it and the nodes the job then gets."""

    level: int
    cell: str
    nodes: tuple[str, ...]
    moves: tuple[Move, ...]


def clear_cell(
    tree: CellTree,
    free: Mapping[str, NodeFree],
    occupants: Mapping[str, Sequence[Occupant]],
    level: int,
    nodes: int,
    gpus_per_node: int,
    fit: Fit | None = None,
) -> CellClearing | None:
    """The cheapest way to give a cell of ``level`` ``nodes`` nodes of ``gpus_per_node`` free
    GPUs by moving movable jobs out of it (module docstring); ``None`` when none can be.
    """
    members: dict[int, list[str]] = {}
    for node in free:
        at = tree.cell_of(node, level)
        if at is not None:
            members.setdefault(at, []).append(node)
    best: tuple[int, str, CellClearing] | None = None
    for at, names in members.items():
        clearing = _clear_one(
            tree, free, occupants, at, sorted(names), nodes, gpus_per_node, fit or _own_first
        )
        if clearing is None:
            continue
        key = (len(clearing.moves), clearing.cell)
        if best is None or key < best[:2]:
            best = (key[0], key[1], clearing)
    return None if best is None else best[2]


def _clear_one(
    tree: CellTree,
    free: Mapping[str, NodeFree],
    occupants: Mapping[str, Sequence[Occupant]],
    at: int,
    names: Sequence[str],
    nodes: int,
    gpus_per_node: int,
    fit: Fit,
) -> CellClearing | None:
    ready = [n for n in names if free[n].free >= gpus_per_node]
    if len(ready) >= nodes:
        return None  # nothing to clear: the job fits this cell now
    options: list[tuple[int, str, list[Occupant]]] = []
    for node in names:
        if node in ready or free[node].total < gpus_per_node:
            continue
        moving = _moves_for(free[node], occupants.get(node, ()), gpus_per_node)
        if moving is not None:
            options.append((len(moving), node, moving))
    need = nodes - len(ready)
    if len(options) < need:
        return None
    options.sort(key=lambda item: (item[0], item[1]))
    chosen = options[:need]
    inside = set(names)
    room = {n: s.free for n, s in free.items() if n not in inside and s.free > 0}
    indices = {n: set(s.free_indices) for n, s in free.items() if s.free_indices is not None}
    moves: list[Move] = []
    for _, node, moving in chosen:
        for occupant in moving:
            found = _destination(room, indices, occupant, node, fit)
            if found is None:
                return None
            target, gpus = found
            room[target] -= occupant.gpus
            indices.get(target, set()).difference_update(gpus)
            moves.append(Move(occupant.job, node, target, occupant.gpus, gpus))
    cell = tree.cells[at]
    cleared = tuple(node for _, node, _ in chosen)
    return CellClearing(cell.level, cell.name, tuple(ready[: nodes - need]) + cleared, tuple(moves))


def _moves_for(
    state: NodeFree, holders: Sequence[Occupant], gpus_per_node: int
) -> list[Occupant] | None:
    """The fewest movable jobs of a node whose GPUs, freed, give it ``gpus_per_node``."""
    if any(not o.movable for o in holders):
        return None
    have = state.free
    moving: list[Occupant] = []
    for occupant in sorted(holders, key=lambda o: (-o.gpus, o.job)):
        if have >= gpus_per_node:
            break
        moving.append(occupant)
        have += occupant.gpus
    return moving if have >= gpus_per_node else None


def _destination(
    room: Mapping[str, int],
    indices: Mapping[str, set[int]],
    occupant: Occupant,
    from_node: str,
    fit: Fit,
) -> tuple[str, tuple[int, ...]] | None:
    """The node with the least room that still holds ``occupant`` (then by name), and the
    GPUs it takes there (``()`` where the free indices are not known).
    """
    for _, node in sorted((left, n) for n, left in room.items() if left >= occupant.gpus):
        if node not in indices:
            return node, ()
        gpus = fit(occupant, from_node, node, sorted(indices[node]))
        if gpus is not None and len(gpus) == occupant.gpus:
            return node, tuple(gpus)
    return None


def _own_first(
    occupant: Occupant, from_node: str, to_node: str, free: Sequence[int]
) -> tuple[int, ...] | None:
    """The job's own indices where all are free, else the lowest free ones."""
    del from_node, to_node  # any node will do
    if occupant.indices and set(occupant.indices) <= set(free):
        return tuple(sorted(occupant.indices))
    return tuple(sorted(free)[: occupant.gpus]) if len(free) >= occupant.gpus else None
