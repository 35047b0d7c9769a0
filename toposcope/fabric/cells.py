"""Buddy cells over the fabric: each level's cells and the free GPUs in them.

HiveD (OSDI 2020) guards a GPU cluster against fragmentation by seeing it as *cells*, one per
level of its hierarchy (a node, the nodes under a leaf, those under a spine...), and by
placing each job in the smallest cell that holds it while breaking as few fully free cells as
possible, so that the jobs behind still find whole cells. A :class:`CellTree` is that
hierarchy for one fabric of :mod:`toposcope.fabric`, built once:

* a cell of a switch level is a *domain* as :mod:`toposcope.fabric.spread` defines it (the
  set of switches of that level above a node, so that a rail-optimised unit whose nodes reach
  eight leaves is one leaf cell), nested so that each cell has one parent: a cell of level L
  is named by its nodes' domains at L and every level above;
* a fabric with blocks (Slurm's topology/block, NVLink domains) and no switches has one
  level, ``block``;
* nodes are the cells below the first level, and the whole fabric is the root above the last
  (a node under no switch is only in its own cell and the root).

:meth:`CellTree.free_by_cell` sums each node's free GPUs (:class:`NodeFree`) over the cells.
Where a job goes is :mod:`toposcope.fabric.cellfit`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toposcope.fabric.model import Fabric, level_name
from toposcope.fabric.spread import node_domains

#: the level name of a fabric's blocks when it has no switches
BLOCK_LEVEL = "block"
#: the level name of the cells below the first fabric level
NODE_LEVEL = "node"
#: the level name of the root cell (the whole fabric: no switch joins its nodes)
FABRIC_LEVEL = "fabric"


@dataclass(frozen=True)
class Cell:
    """One cell: its level (position in :attr:`CellTree.levels`), name, nodes and parent.

    ``parent`` is the index of the parent cell in :attr:`CellTree.cells` (``-1``: the root).
    """

    level: int
    name: str
    nodes: tuple[str, ...]
    parent: int


@dataclass(frozen=True)
class NodeFree:
    """A node's GPUs: how many it has, how many are free, and which (where known)."""

    node: str
    total: int
    free: int
    free_indices: tuple[int, ...] | None = None

    @property
    def whole(self) -> bool:
        """Whether every GPU of the node is free (the node is a whole cell)."""
        return self.total > 0 and self.free >= self.total


class CellTree:
    """The cells of one fabric at every level (see the module docstring)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        keys, names = _node_domains(fabric)
        #: the level names, lowest first (``node`` first, ``fabric`` last)
        self.levels: tuple[str, ...] = (NODE_LEVEL, *names, FABRIC_LEVEL)
        self.cells: list[Cell] = []
        #: node -> the index of its cell at each level (node level first, root last)
        self.path: dict[str, tuple[int, ...]] = {}
        self._build(keys, len(names))
        #: the cells above the nodes, children before parents
        self._upper = [at for at in range(len(self.cells) - 1, -1, -1) if self.cells[at].level]
        self.rail_optimised = fabric.rail_optimised()

    def _build(self, keys: Mapping[str, tuple[frozenset[str], ...]], depth: int) -> None:
        root = len(self.cells)
        all_nodes = tuple(node.name for node in self.fabric.nodes)
        self.cells.append(Cell(depth + 1, FABRIC_LEVEL, all_nodes, -1))
        index: dict[tuple[frozenset[str], ...], int] = {}
        members: dict[int, list[str]] = {}
        taken: set[tuple[int, str]] = set()
        for node in all_nodes:
            domains = keys.get(node, ())
            path = [root]
            parent = root
            for level in range(depth, 0, -1):
                if not domains:
                    break
                key = domains[level - 1 :]
                at = index.get(key)
                if at is None:
                    at = len(self.cells)
                    index[key] = at
                    name = _unique(_cell_name(domains[level - 1]), level, taken)
                    self.cells.append(Cell(level, name, (), parent))
                members.setdefault(at, []).append(node)
                path.append(at)
                parent = at
            at = len(self.cells)
            self.cells.append(Cell(0, node, (node,), parent))
            path.append(at)
            self.path[node] = tuple(reversed(path))
        for at, nodes in members.items():
            cell = self.cells[at]
            self.cells[at] = Cell(cell.level, cell.name, tuple(nodes), cell.parent)

    def cells_at(self, level: int) -> list[int]:
        """The indexes of the cells of ``level``."""
        return [at for at, cell in enumerate(self.cells) if cell.level == level]

    def cell_of(self, node: str, level: int) -> int | None:
        """The index of ``node``'s cell at ``level`` (``None``: the node is below no switch
        of that level, or unknown).
        """
        path = self.path.get(node)
        if path is None:
            return None
        root_level = len(self.levels) - 1
        if level == root_level:
            return path[-1]
        # a node outside every switch has only its own cell and the root
        if len(path) < len(self.levels):
            return path[0] if level == 0 else None
        return path[level]

    def free_by_cell(self, free: Mapping[str, NodeFree]) -> dict[int, tuple[int, int]]:
        """Cell index -> (free GPUs, total GPUs) summed over its nodes' :class:`NodeFree`
        (nodes without an entry count as 0 of 0).
        """
        got = [0] * len(self.cells)
        total = [0] * len(self.cells)
        sums: dict[int, tuple[int, int]] = {}
        for node, state in free.items():
            path = self.path.get(node)
            if path is None:
                continue
            held = max(0, min(state.free, state.total))
            sums[path[0]] = (held, state.total)
            parent = self.cells[path[0]].parent
            got[parent] += held
            total[parent] += state.total
        # a parent is always listed before its children: sum upwards from the last cell
        for at in self._upper:
            parent = self.cells[at].parent
            if parent >= 0:
                got[parent] += got[at]
                total[parent] += total[at]
            if total[at] or got[at]:
                sums[at] = (got[at], total[at])
        return sums

    def whole_cells(self, free: Mapping[str, NodeFree]) -> set[int]:
        """The indexes of the cells whose every GPU is free (and that have GPUs)."""
        return {
            at for at, (got, total) in self.free_by_cell(free).items() if total and got >= total
        }


def _node_domains(fabric: Fabric) -> tuple[dict[str, tuple[frozenset[str], ...]], tuple[str, ...]]:
    """Node -> its domain (set of switch or block names) per level, lowest first, and the
    level names. A node under no switch of a level keeps its highest domain below it.
    """
    if not fabric.switches:
        if not fabric.blocks:
            return {}, ()
        return {n: (frozenset((b.name,)),) for b in fabric.blocks for n in b.nodes}, (BLOCK_LEVEL,)
    levels = sorted({s.level for s in fabric.switches})
    return node_domains(fabric), tuple(level_name(level) for level in levels)


def _cell_name(domain: frozenset[str]) -> str:
    """A domain's name: its switch, or its first switch and how many more (``u1-rail0+7``)."""
    first = min(domain)
    return first if len(domain) == 1 else f"{first}+{len(domain) - 1}"


def _unique(name: str, level: int, taken: set[tuple[int, str]]) -> str:
    candidate, number = name, 1
    while (level, candidate) in taken:
        number += 1
        candidate = f"{name}#{number}"
    taken.add((level, candidate))
    return candidate
