"""Where the fabric page draws each switch and node, and which switches a job's traffic crosses.

Pure functions of the fabric model (:mod:`toposcope.fabric.model`), computed once per fabric
and per drawn view, so that a refresh only joins fresh Prometheus figures to a layout it
already has (the page renders a 10,000-node fabric's overview in well under a second).

* :class:`FabricIndex` holds the relations the page needs: the nodes under each switch (as
  positions into one node list, so that occupancy is a numpy sum), each switch's parents,
  the leaves and the block of each node.
* A :class:`View` is one drawing: the whole fabric (the overview) or one switch and what
  hangs below it (the drill-down). It draws levels from the top down while a level has at
  most :data:`MAX_ROW` switches; the leaves' nodes are drawn only when the leaves are and
  they number at most :data:`MAX_NODE_CELLS`, and links only up to :data:`MAX_EDGES`. In a
  row, switches are spread evenly; the lowest row keeps the order of a walk from the top,
  each higher row the mean place of its children, so that a switch sits over its subtree.
* :func:`job_path` is the path of a multi-node job: the leaves its nodes reach, the lowest
  level at which all its nodes share one domain (the highest level its traffic must cross,
  as ``toposcope_job_fabric_top_level`` counts it), and every switch between.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from toposcope.fabric.model import Fabric, Switch

#: the most switches drawn in one level's row
MAX_ROW = 300
#: the most node cells drawn under the leaves
MAX_NODE_CELLS = 8_000
#: the most links drawn between switches
MAX_EDGES = 5_000

Indices = npt.NDArray[np.int64]


@dataclass(frozen=True)
class View:
    """One drawing of the fabric.

    ``rows`` are ``(level, switches)`` from the highest drawn level down; ``x`` places every
    drawn switch in ``[0, 1]``; ``edges`` are ``(parent, child)`` links between drawn
    switches (``edges_left_out`` counts those over :data:`MAX_EDGES`); ``columns`` are the
    drawn leaves with their nodes, when nodes are drawn; ``hidden`` counts the switches below
    the lowest drawn row; ``nodes`` are the positions of the nodes under the view.
    """

    root: str | None
    rows: tuple[tuple[int, tuple[str, ...]], ...]
    x: Mapping[str, float]
    edges: tuple[tuple[str, str], ...]
    edges_left_out: int
    columns: tuple[tuple[str, tuple[str, ...]], ...]
    hidden: int
    nodes: Indices

    @property
    def lowest(self) -> tuple[str, ...]:
        """The switches of the lowest drawn row (what jobs are drawn across)."""
        return self.rows[-1][1] if self.rows else ()


@dataclass(frozen=True)
class JobPath:
    """Which switches a job's traffic crosses.

    ``leaves`` its nodes reach; ``switches`` every switch on its path (leaves included);
    ``edges`` the ``(parent, child)`` links on it; ``top_level`` the highest level it must
    cross (0: its nodes share one leaf domain; ``None`` when no domain holds all its nodes,
    or none of its nodes is under a switch); ``unknown`` its nodes the fabric lacks.
    """

    leaves: tuple[str, ...]
    switches: frozenset[str]
    edges: frozenset[tuple[str, str]]
    top_level: int | None
    unknown: tuple[str, ...]


@dataclass(frozen=True)
class FabricIndex:
    """The relations of one fabric the page draws from (build with :func:`index_fabric`)."""

    fabric: Fabric
    node_names: tuple[str, ...]
    position: Mapping[str, int]
    below: Mapping[str, Indices]
    parents: Mapping[str, tuple[str, ...]]
    leaves_of: Mapping[str, tuple[str, ...]]
    block_of: Mapping[str, str]
    _views: dict[str | None, View] = field(default_factory=dict, compare=False, repr=False)

    def level(self, switch: str) -> int:
        """The level of ``switch``."""
        return self.fabric.switch(switch).level

    def view(self, root: str | None = None) -> View:
        """The drawing of the whole fabric (``None``) or of ``root`` and what hangs below it
        (``KeyError`` for a switch the fabric lacks); computed once per root.
        """
        if root not in self._views:
            self._views[root] = _make_view(self, root)
        return self._views[root]


def index_fabric(fabric: Fabric) -> FabricIndex:
    """Every relation the page needs, from the model (once per fabric)."""
    names = tuple(node.name for node in fabric.nodes)
    position = {name: i for i, name in enumerate(names)}
    parents: dict[str, list[str]] = {s.name: [] for s in fabric.switches}
    for switch in fabric.switches:
        for child in switch.switches:
            parents[child].append(switch.name)
    below: dict[str, Indices] = {}
    leaves_of: dict[str, list[str]] = {}
    for switch in sorted(fabric.switches, key=lambda s: s.level):
        if switch.switches:
            parts = [below[child] for child in switch.switches]
            below[switch.name] = np.unique(np.concatenate(parts)) if parts else _none()
        else:
            below[switch.name] = np.unique(
                np.fromiter((position[n] for n in switch.nodes), np.int64, len(switch.nodes))
            )
            for name in switch.nodes:
                leaves_of.setdefault(name, []).append(switch.name)
    block_of = {name: block.name for block in fabric.blocks for name in block.nodes}
    return FabricIndex(
        fabric,
        names,
        position,
        below,
        {k: tuple(v) for k, v in parents.items()},
        {k: tuple(v) for k, v in leaves_of.items()},
        block_of,
    )


def _none() -> Indices:
    return np.zeros(0, dtype=np.int64)


def _subtree(index: FabricIndex, root: str | None) -> list[Switch]:
    """The switches of the view in the order of a walk from its top(s), each once."""
    fabric = index.fabric
    tops = [fabric.switch(root)] if root is not None else list(fabric.roots)
    seen: dict[str, Switch] = {}
    stack = list(reversed(tops))
    while stack:
        switch = stack.pop()
        if switch.name in seen:
            continue
        seen[switch.name] = switch
        stack.extend(fabric.switch(child) for child in reversed(switch.switches))
    return list(seen.values())


def _make_view(index: FabricIndex, root: str | None) -> View:
    switches = _subtree(index, root)
    walk = {s.name: i for i, s in enumerate(switches)}
    by_level: dict[int, list[Switch]] = {}
    for switch in switches:
        by_level.setdefault(switch.level, []).append(switch)
    drawn_levels: list[int] = []
    for level in sorted(by_level, reverse=True):
        if drawn_levels and len(by_level[level]) > MAX_ROW:
            break
        drawn_levels.append(level)
    drawn = {s.name for level in drawn_levels for s in by_level[level]}
    x: dict[str, float] = {}
    rows: list[tuple[int, tuple[str, ...]]] = []
    for level in reversed(drawn_levels):  # lowest first: parents sit over their children
        members = by_level[level]
        if level == drawn_levels[-1]:
            ordered = sorted(members, key=lambda s: walk[s.name])
        else:
            ordered = sorted(members, key=lambda s: (_centre(s, x), walk[s.name]))
        count = len(ordered)
        for rank, switch in enumerate(ordered):
            x[switch.name] = (rank + 0.5) / count
        rows.append((level, tuple(s.name for s in ordered)))
    rows.reverse()
    edges = [(s.name, c) for s in switches if s.name in drawn for c in s.switches if c in drawn]
    lowest = rows[-1][1] if rows else ()
    columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
    leaves_drawn = bool(rows) and rows[-1][0] == 0
    if leaves_drawn:
        cells = sum(len(index.fabric.switch(leaf).nodes) for leaf in lowest)
        if cells <= MAX_NODE_CELLS:
            columns = tuple((leaf, index.fabric.switch(leaf).nodes) for leaf in lowest)
    everything = np.arange(len(index.node_names), dtype=np.int64)
    nodes = everything if root is None else index.below[root]
    return View(
        root,
        tuple(rows),
        x,
        tuple(edges[:MAX_EDGES]),
        max(0, len(edges) - MAX_EDGES),
        columns,
        len(switches) - len(drawn),
        nodes,
    )


def _centre(switch: Switch, x: Mapping[str, float]) -> float:
    placed = [x[c] for c in switch.switches if c in x]
    return sum(placed) / len(placed) if placed else 0.5


def _up(index: FabricIndex, leaf: str) -> set[str]:
    """``leaf`` and every switch above it."""
    found = {leaf}
    stack = [leaf]
    while stack:
        for parent in index.parents[stack.pop()]:
            if parent not in found:
                found.add(parent)
                stack.append(parent)
    return found


def _domains(index: FabricIndex, node: str) -> dict[int, frozenset[str]]:
    """Level -> the switches of that level above ``node`` (its domain at that level)."""
    above: set[str] = set()
    for leaf in index.leaves_of.get(node, ()):
        above |= _up(index, leaf)
    by_level: dict[int, set[str]] = {}
    for switch in above:
        by_level.setdefault(index.level(switch), set()).add(switch)
    return {level: frozenset(found) for level, found in by_level.items()}


def job_path(index: FabricIndex, nodes: Iterable[str]) -> JobPath:
    """The path of a job on ``nodes`` (see :class:`JobPath`).

    A node's domain at a level is the set of that level's switches above it (a
    rail-optimised unit's leaves are one domain); the job crosses up to the lowest level at
    which all its nodes share one domain, and its path holds that domain and every switch
    above one of its nodes and below it.
    """
    wanted = sorted(set(nodes))
    known = [n for n in wanted if n in index.leaves_of]
    unknown = tuple(n for n in wanted if n not in index.position)
    domains = [_domains(index, n) for n in known]
    leaves = sorted({leaf for n in known for leaf in index.leaves_of[n]})
    levels = sorted({level for found in domains for level in found})
    top: int | None = None
    for level in levels:
        if len({found.get(level, frozenset()) for found in domains}) == 1 and domains[0].get(level):
            top = level
            break
    above = {s for found in domains for part in found.values() for s in part}
    if top is None:
        on_path = above
    else:
        crossing = set(domains[0][top])
        on_path = {
            s
            for s in above
            if s in crossing or (index.level(s) < top and _reaches(index, s, crossing))
        }
    edges = {
        (parent, child) for child in on_path for parent in index.parents[child] if parent in on_path
    }
    return JobPath(tuple(leaves), frozenset(on_path), frozenset(edges), top, unknown)


def _reaches(index: FabricIndex, switch: str, targets: set[str]) -> bool:
    """Whether one of ``targets`` is above ``switch`` (or is it)."""
    return not targets.isdisjoint(_up(index, switch))
