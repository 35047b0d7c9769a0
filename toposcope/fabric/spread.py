"""How far each multi-node job is spread over the fabric, against the fewest domains it needs.

A *domain* of a level is what one node sees above it at that level: the set of switches of
that level its ports lead up to. Two nodes in one domain of level L talk through switches no
higher than L. Using sets rather than single switches keeps the figures right on the fabrics
GPU clusters are built as: in a rail-optimised unit every node reaches the same eight leaves
(one per rail), so the unit is *one* leaf domain, and a fat tree's pod (whose leaves all reach
the same spines) is one spine domain. A node whose tree ends below a level keeps its highest
domain there, so separate trees stay separate; blocks (Slurm's topology/block, NVLink
domains) are a level of their own, ``block``.

:class:`FabricIndex` is built once per fabric (interning each node's domain per level as a
number and sorting each level's domain sizes) so that :meth:`FabricIndex.spread` of one job
costs a few dictionary look-ups per node: 2,000 jobs over 10,000 nodes take well under a
second (``bench/fabric_scale.py``). For a job it gives:

- ``domains``: domains spanned per level (leaf, spine, core... and ``block`` where the fabric
  has blocks), and ``needed``: the fewest domains of that level whose nodes could hold the
  job's node count, taking the largest first (the ideal, whatever else runs);
- ``top_level``: the lowest level at which all its nodes share one domain, i.e. the highest
  switch level its traffic must cross (the number of levels when none joins them), and
  ``top_level_needed``: the lowest level with one domain big enough for it;
- ``rail_aligned``: whether every node holds the same GPU indices, so that local rank k uses
  rail k everywhere (``None`` where a node's indices are unknown).

Nodes of a job the fabric does not know are counted in ``nodes`` and ``unknown_nodes`` and
left out of the domain figures.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from toposcope.fabric.model import Fabric, level_name

#: the level name of Slurm blocks and NVLink domains in :attr:`JobSpread.domains`
BLOCK_LEVEL = "block"


@dataclass(frozen=True)
class NodeShare:
    """What a job holds on one node: its GPU count and, where known, their indices."""

    node: str
    gpus: int = 0
    gpu_indices: tuple[int, ...] | None = None


@dataclass(frozen=True)
class JobPlacement:
    """A running job and where it runs, with the labels that name it on every series."""

    scheduler: str
    partition: str
    workload: str
    shares: tuple[NodeShare, ...]

    @property
    def multi_node(self) -> bool:
        """Whether the job runs on more than one node."""
        return len({share.node for share in self.shares}) > 1


@dataclass(frozen=True)
class JobSpread:
    """How far one job is spread (see the module docstring for each figure)."""

    job: JobPlacement
    nodes: int
    gpus: int
    unknown_nodes: int
    domains: Mapping[str, int] = field(default_factory=dict)
    needed: Mapping[str, int] = field(default_factory=dict)
    top_level: int | None = None
    top_level_needed: int | None = None
    rail_aligned: bool | None = None

    @property
    def spread_beyond_need(self) -> dict[str, int]:
        """Levels at which the job spans more domains than it needs, and by how many."""
        return {
            level: count - self.needed[level]
            for level, count in self.domains.items()
            if level in self.needed and count > self.needed[level]
        }


@dataclass(frozen=True)
class _Level:
    """One level's interned domains: sizes sorted largest first and their running sums."""

    name: str
    sizes: tuple[int, ...]
    sums: tuple[int, ...]

    def needed(self, nodes: int) -> int:
        """The fewest domains (largest first) holding ``nodes`` nodes, all of them at most."""
        at = bisect.bisect_left(self.sums, nodes)
        return min(at + 1, len(self.sums))


class FabricIndex:
    """A fabric prepared for computing many jobs' spread (see the module docstring)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        levels = sorted({switch.level for switch in fabric.switches})
        self.levels: tuple[int, ...] = tuple(levels)
        self.level_names: tuple[str, ...] = tuple(level_name(level) for level in levels)
        #: node -> its domain number per level (in :attr:`levels` order)
        self.domains: dict[str, tuple[int, ...]] = {}
        #: node -> its block number
        self.blocks: dict[str, int] = {}
        self._index_switch_levels()
        self._index_blocks()

    def _index_switch_levels(self) -> None:
        interned: list[dict[frozenset[str], int]] = [{} for _ in self.levels]
        numbered: dict[tuple[frozenset[str], ...], tuple[int, ...]] = {}
        for node, domains in node_domains(self.fabric).items():
            numbers = numbered.get(domains)
            if numbers is None:
                numbers = tuple(
                    table.setdefault(domain, len(table))
                    for table, domain in zip(interned, domains, strict=True)
                )
                numbered[domains] = numbers
            self.domains[node] = numbers
        self._levels = tuple(
            _level(name, _sizes(self.domains.values(), at))
            for at, name in enumerate(self.level_names)
        )

    def _index_blocks(self) -> None:
        sizes: list[int] = []
        for number, block in enumerate(self.fabric.blocks):
            for node in block.nodes:
                self.blocks[node] = number
            sizes.append(len(block.nodes))
        self._block_level = _level(BLOCK_LEVEL, [s for s in sizes if s]) if sizes else None

    def spread(self, job: JobPlacement) -> JobSpread:
        """How far ``job`` is spread over this fabric."""
        names = list(dict.fromkeys(share.node for share in job.shares))
        gpus = sum(share.gpus for share in job.shares)
        known = [self.domains[name] for name in names if name in self.domains]
        count = len(names)
        domains: dict[str, int] = {}
        needed: dict[str, int] = {}
        top: int | None = None
        top_needed: int | None = None
        for at, level in enumerate(self._levels if known else ()):
            spanned = len({numbers[at] for numbers in known})
            domains[level.name] = spanned
            needed[level.name] = level.needed(count)
            if top is None and spanned == 1:
                top = self.levels[at]
            if top_needed is None and level.sizes and level.sizes[0] >= count:
                top_needed = self.levels[at]
        if known:
            beyond = self.levels[-1] + 1
            top = beyond if top is None else top
            top_needed = beyond if top_needed is None else top_needed
        if self._block_level is not None:
            in_blocks = {self.blocks[name] for name in names if name in self.blocks}
            if in_blocks:
                domains[BLOCK_LEVEL] = len(in_blocks)
                needed[BLOCK_LEVEL] = self._block_level.needed(count)
        return JobSpread(
            job=job,
            nodes=count,
            gpus=gpus,
            unknown_nodes=count - len(known),
            domains=domains,
            needed=needed,
            top_level=top,
            top_level_needed=top_needed,
            rail_aligned=rail_aligned(job.shares),
        )

    def spreads(self, jobs: Iterable[JobPlacement]) -> list[JobSpread]:
        """The spread of every multi-node job among ``jobs`` (single-node jobs are skipped)."""
        return [self.spread(job) for job in jobs if job.multi_node]


def node_domains(fabric: Fabric) -> dict[str, tuple[frozenset[str], ...]]:
    """Each node under a switch -> its domain per switch level, lowest level first (see the
    module docstring); nodes under the same leaves share one tuple, computed once.
    """
    levels = sorted({s.level for s in fabric.switches})
    position = {level: at for at, level in enumerate(levels)}
    parents: dict[str, list[str]] = {}
    leaves_of: dict[str, list[str]] = {}
    for switch in fabric.switches:
        for child in switch.switches:
            parents.setdefault(child, []).append(switch.name)
        for node in switch.nodes:
            leaves_of.setdefault(node, []).append(switch.name)
    by_leaves: dict[frozenset[str], tuple[frozenset[str], ...]] = {}
    result: dict[str, tuple[frozenset[str], ...]] = {}
    for node, leaves in leaves_of.items():
        key = frozenset(leaves)
        domains = by_leaves.get(key)
        if domains is None:
            domains = _domains_above(fabric, key, parents, position, len(levels))
            by_leaves[key] = domains
        result[node] = domains
    return result


def _domains_above(
    fabric: Fabric,
    leaves: frozenset[str],
    parents: Mapping[str, list[str]],
    position: Mapping[int, int],
    depth: int,
) -> tuple[frozenset[str], ...]:
    """The domain of each level above one set of leaves (an iterative walk up)."""
    by_level: list[set[str]] = [set() for _ in range(depth)]
    seen: set[str] = set()
    stack = list(leaves)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        by_level[position[fabric.switch(name).level]].add(name)
        stack.extend(parents.get(name, ()))
    domains: list[frozenset[str]] = []
    current: frozenset[str] = frozenset()
    for names in by_level:
        if names:
            current = frozenset(names)
        domains.append(current)
    return tuple(domains)


def rail_aligned(shares: Sequence[NodeShare]) -> bool | None:
    """Whether every node holds the same GPU indices; ``None`` where any node's are unknown."""
    held: set[tuple[int, ...]] = set()
    for share in shares:
        if share.gpu_indices is None:
            return None
        held.add(tuple(sorted(share.gpu_indices)))
    return len(held) <= 1


def _sizes(domains: Iterable[tuple[int, ...]], at: int) -> list[int]:
    counts: dict[int, int] = {}
    for numbers in domains:
        counts[numbers[at]] = counts.get(numbers[at], 0) + 1
    return list(counts.values())


def _level(name: str, sizes: Sequence[int]) -> _Level:
    ordered = tuple(sorted(sizes, reverse=True))
    return _Level(name, ordered, tuple(accumulate(ordered)))
