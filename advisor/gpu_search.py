"""Searches for the best GPU set of a size, memoised for one advisor run over one model.

A policy that re-places many jobs asks the same questions again and again: the best set of
``count`` free GPUs on a node, the best free set anywhere, the best worst link a node's
machine could give ``count`` GPUs if all were free. :class:`GpuSetSearch` answers them
with the GPU-set ranking (:func:`~toposcope.advisor.gpu_sets.rank_sets`)
and keeps the answers for the run: build one per evaluation (the answers hold only for the
model it was built on), never share one between runs.

GPU claims (``gpu:NODE/INDEX``, see :func:`~toposcope.advisor.gpu_sets.gpu_claims`)
name the GPUs that earlier decisions of the run took; searches given ``taken`` leave them out.
"""

from __future__ import annotations

from collections.abc import Collection

from toposcope.advisor.gpu_sets import Placement, cells, gpu_claims, rank_sets
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.topology.model import LinkType

#: worst-link rank standing for "no set at all" (worse than any link)
NO_SET = LinkType.SYS.rank + 1


def worst_rank(placement: Placement | None) -> int:
    """The worst-link rank of a set (-1 for one GPU, :data:`NO_SET` for none)."""
    if placement is None:
        return NO_SET
    return placement.worst_link.rank if placement.worst_link is not None else -1


class GpuSetSearch:
    """Memoised best-set searches over one model (see the module docstring).

    ``cross_node``: a running job may move to other nodes (else only its own node counts).
    """

    def __init__(self, model: ClusterModel, *, cross_node: bool) -> None:
        self.model = model
        self.cross_node = cross_node
        self._best_sets: dict[tuple[str, frozenset[int], int], Placement | None] = {}
        self._by_count: dict[int, list[Placement]] = {}
        self._cells: dict[str, list[frozenset[int]]] = {}
        self._shape_ids: dict[tuple[object, ...], int] = {}
        self._shapes: dict[str, int] = {}
        self._ideal: dict[tuple[int, int], int] = {}
        self._floors: dict[int, int] = {}
        self._able_nodes: dict[tuple[int, int], list[str]] = {}
        self._free_claims: dict[str, frozenset[str]] = {}

    def node_cells(self, name: str) -> list[frozenset[int]]:
        """The GPU cells of node ``name`` (:func:`cells`, computed once per node)."""
        if name not in self._cells:
            self._cells[name] = cells(self.model.nodes[name])
        return self._cells[name]

    def node_best(self, name: str, free: set[int], count: int) -> Placement | None:
        """The best set of ``count`` GPUs among ``free`` on node ``name``."""
        if len(free) < count:
            return None
        key = (name, frozenset(free), count)
        if key not in self._best_sets:
            sets = rank_sets(self.model.nodes[name], free, count, self.node_cells(name))
            self._best_sets[key] = sets[0] if sets else None
        return self._best_sets[key]

    def free_claimed(self, name: str, taken: Collection[str]) -> bool:
        """True when a claim in ``taken`` names one of node ``name``'s free GPUs: only then
        can the node's best free sets differ from those :meth:`ranked_free` found (a look-up
        of the node's few free GPUs, not a parse of every claim of the round on every search).
        """
        if name not in self._free_claims:
            self._free_claims[name] = frozenset(gpu_claims(name, self.model.free_gpus(name)))
        return not self._free_claims[name].isdisjoint(taken)

    def ranked_free(self, count: int) -> list[Placement]:
        """Every node's best free set of ``count`` GPUs, best first."""
        if count not in self._by_count:
            model = self.model
            found = [
                p
                for name in sorted(model.nodes)
                if (p := self.node_best(name, set(model.free_gpus(name)), count)) is not None
            ]
            self._by_count[count] = sorted(found, key=lambda p: (p.score()[:3], p.score(), p.node))
        return self._by_count[count]

    def free_best(self, count: int, taken: Collection[str]) -> Placement | None:
        """The best free set of ``count`` GPUs on any node, GPUs in ``taken`` excluded."""
        ranked: list[Placement] = []
        for placement in self.ranked_free(count):
            if self.free_claimed(placement.node, taken):
                free = set(self.model.free_gpus(placement.node))
                free -= {g for g in free if f"gpu:{placement.node}/{g}" in taken}
                again = self.node_best(placement.node, free, count)
                if again is not None:
                    ranked.append(again)
                continue
            ranked.append(placement)
            break
        return min(ranked, key=lambda p: (p.score(), p.node)) if ranked else None

    def best_for(
        self,
        job: WorkloadModel,
        taken: Collection[str] = (),
        *,
        include_own: bool = True,
    ) -> Placement | None:
        """The best set of as many GPUs as ``job`` holds: on its node (its own GPUs count as
        free when ``include_own``) or, with ``cross_node``, on another node; staying on its
        node wins ties (a local move is cheaper). GPUs in ``taken`` are left out.
        """
        model = self.model
        count = len(job.gpus)

        def free_on(name: str) -> set[int]:
            free = set(model.free_gpus(name))
            if name == job.node and include_own:
                free |= set(job.gpus)
            return {g for g in free if f"gpu:{name}/{g}" not in taken}

        ranked: list[Placement] = []
        if job.node in model.nodes:
            own = self.node_best(job.node, free_on(job.node), count)
            if own is not None:
                ranked.append(own)
        if self.cross_node:
            for placement in self.ranked_free(count):
                if placement.node == job.node:
                    continue
                if self.free_claimed(placement.node, taken):  # earlier jobs took some
                    again = self.node_best(placement.node, free_on(placement.node), count)
                    if again is not None:
                        ranked.append(again)
                    continue
                ranked.append(placement)  # the best of the untouched nodes: none after beats it
                break
        if not ranked:
            return None
        return min(ranked, key=lambda p: (p.score()[:3], p.node != job.node, p.score(), p.node))

    def ideal_rank(self, name: str, count: int) -> int:
        """The best worst-link rank ``count`` GPUs of node ``name`` could have if all were
        free (kept per machine shape: large clusters repeat a few machine types).
        """
        node = self.model.nodes[name]
        if name not in self._shapes:
            shape = (
                tuple((g.index, g.numa_node, node.package_of(g.numa_node)) for g in node.gpus),
                tuple(g.index for g in node.gpus if g.up is not False),
                tuple(sorted(node.links.items())),
            )
            self._shapes[name] = self._shape_ids.setdefault(shape, len(self._shape_ids))
        key = (self._shapes[name], count)
        if key not in self._ideal:
            up = [g.index for g in node.gpus if g.up is not False]
            sets = rank_sets(node, up, count, self.node_cells(name))
            self._ideal[key] = worst_rank(sets[0]) if sets else NO_SET
        return self._ideal[key]

    def floor_any(self, count: int) -> int:
        """The best worst-link rank ``count`` GPUs could have on any node."""
        if count not in self._floors:
            self._floors[count] = min(
                (self.ideal_rank(n, count) for n in self.model.nodes), default=NO_SET
            )
        return self._floors[count]

    def floor(self, name: str, count: int) -> int:
        """The best worst-link rank a job of ``count`` GPUs on node ``name`` could reach: on
        its node, or with ``cross_node`` on any node.
        """
        own = self.ideal_rank(name, count) if name in self.model.nodes else NO_SET
        if not self.cross_node:
            return own
        return min(own, self.floor_any(count))

    def able_nodes(self, count: int, must_beat: int) -> list[str]:
        """Nodes (by name) whose machine could give ``count`` GPUs a worst link better than
        ``must_beat``.
        """
        key = (count, must_beat)
        if key not in self._able_nodes:
            self._able_nodes[key] = [
                n for n in sorted(self.model.nodes) if self.ideal_rank(n, count) < must_beat
            ]
        return self._able_nodes[key]
