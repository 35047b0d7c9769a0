"""The placement policies trace replay compares, each choosing GPUs for one job.

Every policy sees the same thing: each node's free GPU indexes and its simulator template
(its hardware, as the exporter publishes it). None reads the simulator's performance model.

* ``first-fit``: the first node (in order) with enough free GPUs, its lowest free indexes
  (the simulator's own scheduler; a topology-blind baseline).
* ``k8s-spread``: the Kubernetes default scheduler's ``NodeResourcesFit`` least-allocated
  scoring: the node with the largest free share of its GPUs, lowest free indexes (what the
  device plugin hands out).
* ``gandiva``: Gandiva-style packing (Xiao et al., OSDI 2018): the fullest node that fits
  (best fit), lowest indexes, and migration to de-fragment when a job cannot start.
* ``hived``: HiveD-style buddy cells (Zhao et al., OSDI 2020): a job of k GPUs takes an
  aligned block of the next power of two, from the node whose smallest free enclosing cell
  is smallest (so large cells stay whole).
* ``toposcope``: the advisor's GPU-set ranking (``rank_sets``: worst link, link sum, broken
  cells, stranded GPUs) on an advisor node model built from the template, then the machine
  whose best pair is worst (``best_pair_factor``), then best fit; it waits for better sets,
  pins and migrates as :mod:`trace_toposcope` says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toposcope.advisor.gpu_sets import Placement, rank_sets
from toposcope.advisor.model import GpuState, NodeModel, NumaNodeState
from toposcope.advisor.placement_wait import best_pair_factor
from toposcope.sim.templates import NodeTemplate

Choice = tuple[str, tuple[int, ...]]


def advisor_node(name: str, template: NodeTemplate) -> NodeModel:
    """The advisor's model of a node's hardware, as its exporter publishes it: NUMA nodes
    with packages, GPUs with their NUMA node, and the ``nvidia-smi topo`` link labels.
    """
    numa = tuple(
        NumaNodeState(n.id, package=template.package_of_node(n.id), cpus=tuple(n.cpus))
        for n in template.topology.numa_nodes
    )
    gpus = tuple(GpuState(g.index, numa_node=g.numa_node) for g in template.gpus)
    links: dict[tuple[int, int], str] = {}
    for a in template.gpus:
        for b in template.gpus:
            if a.index < b.index:
                label = template.link_class(a.index, b.index)
                links[(a.index, b.index)] = (
                    "NV12" if label == "nvlink" else template.pcie_label(a.index, b.index)
                )
    return NodeModel(name, numa, gpus, links)


@dataclass
class Policy:
    """A placement rule (see the module docstring); ``migrates``: it may move running jobs
    to make room for one that cannot start; ``pins``: it pins CPUs and memory to the GPUs'
    NUMA nodes.
    """

    name: str
    migrates: bool = False
    pins: bool = False
    waits: bool = False

    def choose(
        self,
        gpus: int,
        free: Mapping[str, frozenset[int]],
        templates: Mapping[str, NodeTemplate],
    ) -> Choice | None:
        """Where a job of ``gpus`` GPUs goes, or ``None`` when no node has room."""
        able = [n for n in free if len(free[n]) >= gpus]
        if not able:
            return None
        if self.name == "hived":
            return _buddy(gpus, able, free, templates)
        if self.name == "toposcope":
            return ranked(gpus, able, free, templates)
        if self.name == "k8s-spread":
            node = max(able, key=lambda n: (len(free[n]) / len(templates[n].gpus), -_pos(able, n)))
        elif self.name == "gandiva":
            node = min(able, key=lambda n: (len(free[n]), _pos(able, n)))
        else:
            node = able[0]
        return node, tuple(sorted(free[node])[:gpus])


def _pos(names: list[str], name: str) -> int:
    return names.index(name)


def _buddy(
    gpus: int,
    able: list[str],
    free: Mapping[str, frozenset[int]],
    templates: Mapping[str, NodeTemplate],
) -> Choice | None:
    size = 1
    while size < gpus:
        size *= 2
    best: tuple[int, int, str, tuple[int, ...]] | None = None
    for order, node in enumerate(able):
        count = len(templates[node].gpus)
        for start in range(0, count - size + 1, size):
            block = frozenset(range(start, start + size))
            if not block <= free[node]:
                continue
            enclosing = size
            while enclosing * 2 <= count:
                base = start - start % (enclosing * 2)
                if not frozenset(range(base, base + enclosing * 2)) <= free[node]:
                    break
                enclosing *= 2
            key = (enclosing, order, node, tuple(sorted(block)[:gpus]))
            if best is None or key[:2] < best[:2]:
                best = key
    return None if best is None else (best[2], best[3])


_RANK_CACHE: dict[tuple[str, frozenset[int], int], Placement | None] = {}
_MODELS: dict[tuple[str, str], NodeModel] = {}


def model_of(template: NodeTemplate, name: str = "") -> NodeModel:
    """The advisor's model of ``template``'s hardware called ``name`` (the template's name
    when empty), built once.
    """
    key = (template.name, name or template.name)
    if key not in _MODELS:
        _MODELS[key] = advisor_node(key[1], template)
    return _MODELS[key]


_SPARE: dict[str, float] = {}


def _spare(template: NodeTemplate) -> float:
    if template.name not in _SPARE:
        _SPARE[template.name] = best_pair_factor(model_of(template))
    return _SPARE[template.name]


def ranked(
    gpus: int,
    able: list[str],
    free: Mapping[str, frozenset[int]],
    templates: Mapping[str, NodeTemplate],
) -> Choice | None:
    """The best set of ``gpus`` GPUs on the nodes ``able`` by the advisor's ranking
    (``rank_sets``), best fit (fewest free GPUs) between equally good sets; ``None`` when
    none has room.
    """
    found: list[tuple[tuple[float, ...], str, tuple[int, ...]]] = []
    for order, node in enumerate(able):
        template = templates[node]
        if len(free[node]) < gpus:
            continue
        key = (template.name, free[node], gpus)
        if key not in _RANK_CACHE:
            sets = rank_sets(model_of(template), free[node], gpus)
            _RANK_CACHE[key] = sets[0] if sets else None
        best = _RANK_CACHE[key]
        if best is not None:
            price, worst, link_sum, broken, stranded, _span, _ = best.score()
            spare = -_spare(template)
            rank = (price, worst, link_sum, spare, broken, stranded, len(free[node]), order)
            found.append((rank, node, best.gpus))
    if not found:
        return None
    _, node, chosen = min(found)
    return node, chosen


POLICIES: tuple[Policy, ...] = (
    Policy("first-fit"),
    Policy("k8s-spread"),
    Policy("gandiva", migrates=True),
    Policy("hived"),
    Policy("toposcope", migrates=True, pins=True, waits=True),
)
