"""GPU sets: which N GPUs of a node go well together, and the best ones across nodes.

Every candidate set of N GPUs on a node is ranked by (1) the price of its dearest pair (its
step-time factor), then its worst pairwise link, NVLink > same PCIe switch (PIX, then PXB) >
same socket (PHB, NODE) > across sockets (SYS); at the nominal PCIe rate the price follows the
link class, and it tells NV4 from NV12 and a link that trained down from a healthy one; (2) the
sum of its pairwise link ranks; (3) fragmentation, buddy-cell style as in HiveD: the GPUs of
a node form cells (a PCIe switch or NVLink island, then a socket, then the node), and a set
that breaks fewer fully free cells, and then leaves fewer free GPUs stranded in the cells it
touches, keeps larger well-connected blocks for later jobs; (4) NUMA locality: a set whose
GPUs sit on fewer NUMA nodes (one, ideally: the job's CPUs and memory can then be pinned next
to all of them) before one that spans more, and a set of unknown NUMA nodes last; (5) the GPU
indexes (deterministic). :func:`rank_sets` ranks the sets of one node, :func:`place` across nodes
(``toposcope place --gpus N``), :func:`first_fit` is what a topology-blind scheduler would
pick. A multi-GPU job's step time scales with its dearest pair's link price
(:mod:`~toposcope.advisor.link_prices`: by the pair's bandwidth from the topology or a
measurement, else by :data:`LINK_FACTOR`, Gandiva-anchored; see the gpu-placement policy),
and that price ranks a set before its worst link's class. GPU claims (``gpu:NODE/INDEX``,
:func:`gpu_claims`) name GPUs that earlier decisions of a run took.

The gpu-placement and job-migration policies, defragmentation and the placement endpoints
all rank with this one module.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from toposcope.advisor.link_prices import LINK_FACTOR, SINGLE_GPU, LinkPrice
from toposcope.advisor.model import ClusterModel, NodeModel
from toposcope.report.advisor_api import GpuSet
from toposcope.topology.model import LinkType

__all__ = [
    "LINK_FACTOR",
    "MAX_COMBINATIONS",
    "PRICE_DECIMALS",
    "UNKNOWN_NUMA_SPAN",
    "Placement",
    "cells",
    "first_fit",
    "gpu_claims",
    "link_factor",
    "place",
    "rank_sets",
]

#: most candidate sets enumerated per node before falling back to a greedy search
MAX_COMBINATIONS = 20000
#: the NUMA span ranked for a set whose GPUs' NUMA nodes are unknown: after any known span
UNKNOWN_NUMA_SPAN = 1 << 16


def link_factor(worst: LinkType | None, sensitivity: float = 1.0) -> float:
    """Step-time factor of a GPU set whose worst link is ``worst``.

    ``sensitivity`` scales the slowdown part (0: the job does not communicate; 1: as
    communication-bound as Gandiva's measured jobs).
    """
    return 1.0 + sensitivity * (LINK_FACTOR[worst] - 1.0)


#: decimals of a price compared in the ranking (prices equal to that are a tie)
PRICE_DECIMALS = 6


@dataclass(frozen=True)
class Placement(GpuSet):
    """A candidate GPU set on one node with its ranking terms (lower is better) and the
    price of its dearest pair (:mod:`~toposcope.advisor.link_prices`).
    """

    price: LinkPrice = field(default=SINGLE_GPU)

    def score(self) -> tuple[float, int, int, int, int, int, tuple[int, ...]]:
        """The ranking key: price, worst link, link sum, broken cells, stranded GPUs, NUMA
        span (:meth:`numa_span`), indexes.
        """
        worst = self.worst_link.rank if self.worst_link is not None else -1
        return (
            round(self.price.factor, PRICE_DECIMALS),
            worst,
            self.link_sum,
            self.broken_cells,
            self.stranded,
            self.numa_span(),
            self.gpus,
        )

    def numa_span(self) -> int:
        """How many NUMA nodes the set's GPUs sit on (:data:`UNKNOWN_NUMA_SPAN` if unknown)."""
        return len(self.numa_nodes) or UNKNOWN_NUMA_SPAN

    def factor(self, sensitivity: float = 1.0) -> float:
        """The step-time factor of this set: its price, the slowdown part scaled by
        ``sensitivity`` as in :func:`link_factor`.
        """
        return 1.0 + sensitivity * (self.price.factor - 1.0)

    def to_dict(self) -> dict[str, object]:
        """JSON form for ``toposcope place --format json``."""
        return {
            "node": self.node,
            "gpus": list(self.gpus),
            "worst_link": str(self.worst_link) if self.worst_link else None,
            "link_sum": self.link_sum,
            "broken_cells": self.broken_cells,
            "stranded": self.stranded,
            "numa_nodes": list(self.numa_nodes),
            "link_factor": round(self.factor(), 4),
            "price_source": self.price.source,
            "link_gbps": round(self.price.gbps, 2) if self.price.gbps is not None else None,
            "price_detail": self.price.detail,
        }


def _pair_rank(node: NodeModel, a: int, b: int) -> int:
    link = node.link(a, b)
    return link.rank if link is not None else LinkType.SYS.rank


def _worst(node: NodeModel, gpus: Sequence[int]) -> tuple[LinkType | None, int]:
    worst: LinkType | None = None
    total = 0
    for a, b in itertools.combinations(gpus, 2):
        link = node.link(a, b) or LinkType.SYS
        total += link.rank
        if worst is None or link.rank > worst.rank:
            worst = link
    return worst, total


def cells(node: NodeModel) -> list[frozenset[int]]:
    """The node's GPU cells below the node level: switch/NVLink islands, then sockets.

    An island is a group of GPUs joined by links of class PXB or better; a socket cell
    holds the GPUs of one package (of one NUMA node when packages are unknown). Cells of
    one GPU are left out (they cannot be broken).
    """
    indexes = [g.index for g in node.gpus]
    parent = {g: g for g in indexes}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in itertools.combinations(indexes, 2):
        link = node.link(a, b)
        if link is not None and link.rank <= LinkType.PXB.rank:
            parent[find(a)] = find(b)
    islands: dict[int, set[int]] = {}
    for g in indexes:
        islands.setdefault(find(g), set()).add(g)
    sockets: dict[object, set[int]] = {}
    for gpu in node.gpus:
        package = node.package_of(gpu.numa_node)
        key = ("package", package) if package is not None else ("numa", gpu.numa_node)
        if gpu.numa_node is not None or package is not None:
            sockets.setdefault(key, set()).add(gpu.index)
    found = {frozenset(c) for c in list(islands.values()) + list(sockets.values()) if len(c) > 1}
    return sorted(found, key=lambda c: (len(c), sorted(c)))


def _fragmentation(
    node_cells: Sequence[frozenset[int]], free: frozenset[int], chosen: frozenset[int]
) -> tuple[int, int]:
    broken = stranded = 0
    after = free - chosen
    for cell in node_cells:
        if not cell & chosen:
            continue
        if cell <= free and not cell <= chosen:
            broken += 1
        stranded += len(cell & after)
    return broken, stranded


def _candidates(node: NodeModel, free: Sequence[int], count: int) -> Iterable[tuple[int, ...]]:
    if math.comb(len(free), count) <= MAX_COMBINATIONS:
        yield from itertools.combinations(sorted(free), count)
        return
    for seed in sorted(free):  # greedy: grow from each seed by the best next link
        chosen = [seed]
        rest = [g for g in sorted(free) if g != seed]
        while len(chosen) < count:
            best = min(
                rest,
                key=lambda g: (
                    max(_pair_rank(node, g, c) for c in chosen),
                    sum(_pair_rank(node, g, c) for c in chosen),
                    g,
                ),
            )
            chosen.append(best)
            rest.remove(best)
        yield tuple(sorted(chosen))


def rank_sets(
    node: NodeModel,
    free: Iterable[int],
    count: int,
    node_cells: Sequence[frozenset[int]] | None = None,
) -> list[Placement]:
    """Every candidate set of ``count`` GPUs among ``free`` on ``node``, best first
    (``node_cells``: the node's :func:`cells`, when the caller has them already).
    """
    free_set = frozenset(free)
    if count < 1 or len(free_set) < count:
        return []
    if node_cells is None:
        node_cells = cells(node)
    placements = []
    seen: set[tuple[int, ...]] = set()
    for gpus in _candidates(node, sorted(free_set), count):
        if gpus in seen:
            continue
        seen.add(gpus)
        worst, total = _worst(node, gpus)
        broken, stranded = _fragmentation(node_cells, free_set, frozenset(gpus))
        numa = sorted(
            {g.numa_node for g in node.gpus if g.index in gpus and g.numa_node is not None}
        )
        placements.append(
            Placement(
                node.name,
                tuple(gpus),
                worst,
                total,
                broken,
                stranded,
                tuple(numa),
                node.prices.worst(gpus),
            )
        )
    return sorted(placements, key=Placement.score)


def place(
    model: ClusterModel,
    count: int,
    node: str | None = None,
    *,
    taken: Iterable[str] = (),
    top: int = 5,
) -> list[Placement]:
    """The best ``top`` placements of ``count`` GPUs, over all nodes or on ``node``.

    ``taken`` holds ``gpu:NODE/INDEX`` claims of GPUs to treat as busy (earlier decisions of
    the same run). Across nodes the order is the same ranking; ties go to the node name.
    """
    busy = set(taken)
    names = [node] if node is not None else sorted(model.nodes)
    ranked: list[Placement] = []
    for name in names:
        node_model = model.node(name)
        if node_model is None:
            continue
        free = [g for g in model.free_gpus(name) if f"gpu:{name}/{g}" not in busy]
        ranked.extend(rank_sets(node_model, free, count)[: max(top, 1)])
    ranked.sort(key=lambda p: (p.score(), p.node))
    return ranked[:top]


def first_fit(model: ClusterModel, count: int, taken: Iterable[str] = ()) -> Placement | None:
    """What a topology-blind scheduler picks: the lowest free indexes on the first node."""
    busy = set(taken)
    for name in sorted(model.nodes):
        free = [g for g in model.free_gpus(name) if f"gpu:{name}/{g}" not in busy]
        if len(free) >= count:
            node_model = model.nodes[name]
            chosen = tuple(sorted(free)[:count])
            worst, total = _worst(node_model, chosen)
            numa = sorted(
                {
                    g.numa_node
                    for g in node_model.gpus
                    if g.index in chosen and g.numa_node is not None
                }
            )
            price = node_model.prices.worst(chosen)
            return Placement(name, chosen, worst, total, 0, 0, tuple(numa), price)
    return None


def gpu_claims(node: str, gpus: Iterable[int]) -> list[str]:
    """Claim strings of GPUs (``gpu:NODE/INDEX``) for conflict resolution."""
    return [f"gpu:{node}/{g}" for g in gpus]
