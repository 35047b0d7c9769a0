"""Where a single-node job moved out of a multi-node job's way may go without losing.

Clearing a leaf for a multi-node job (:mod:`.fabric_defrag`) moves the single-node jobs that
hold its nodes. The clearing only pays when those jobs run on as fast as before, and a job
about to end is better left to end. Two rules, shared by every part of fabric-placement that
moves jobs aside:

* **about to end**: a job with less than :data:`MIN_LEFT_RESTARTS` restarts of time left
  (``toposcope_queue_job_time_left_seconds``) is not moved: it frees its GPUs soon anyway,
  and its restart would cost a large share of what it has left. A job whose time left is
  unknown may move.
* **no slower**: on the node it goes to, the job takes GPUs of the model it runs on now, and
  its dearest GPU pair there is priced no higher than its dearest pair now
  (:mod:`toposcope.advisor.link_prices`: NVLink bonds, PCIe paths, measured bandwidth). Its
  own GPU indices come first when they are free and identical there (same model, NUMA node
  and link prices: the job keeps its CPUs and memory nodes on an identical node); otherwise
  the cheapest set by that price, then the lowest indices.

:func:`aside_fit` is the rule as the callback :func:`toposcope.fabric.celldefrag.clear_cell`
asks each destination with.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from toposcope.advisor.model import ClusterModel, NodeModel
from toposcope.fabric.celldefrag import Fit, Occupant

#: a single-node job with less time left than this many restarts is about to end: not moved
MIN_LEFT_RESTARTS = 4.0
#: GPU sets priced per destination at most (a node of 8 GPUs has 70 sets of 4)
MAX_SETS = 256
#: price difference below which two prices are equal
EPSILON = 1e-9


def ending_soon(time_left_s: float | None, restart_seconds: float) -> bool:
    """Whether a job with ``time_left_s`` left is about to end (module docstring)."""
    return time_left_s is not None and time_left_s < MIN_LEFT_RESTARTS * restart_seconds


def aside_gpus(
    model: ClusterModel,
    from_node: str,
    own: Sequence[int],
    to_node: str,
    free: Sequence[int],
) -> tuple[int, ...] | None:
    """The GPUs of ``to_node`` (among ``free``) a job holding ``own`` on ``from_node`` takes
    there without running slower, or ``None`` when no set of them is (module docstring).
    """
    source, target = model.nodes.get(from_node), model.nodes.get(to_node)
    if source is None or target is None or not own or len(free) < len(own):
        return None
    kind = _model_of(source, own)
    if kind is None:
        return None
    if set(own) <= set(free) and _identical(source, target, own):
        return tuple(sorted(own))
    same = sorted(g for g in free if (gpu := target.gpu(g)) is not None and gpu.model == kind)
    limit = source.prices.worst(own).factor + EPSILON
    best: tuple[float, tuple[int, ...]] | None = None
    for gpus in itertools.islice(itertools.combinations(same, len(own)), MAX_SETS):
        price = target.prices.worst(gpus).factor
        if price <= limit and (best is None or price < best[0] - EPSILON):
            best = (price, gpus)
    return best[1] if best is not None else None


def aside_fit(model: ClusterModel) -> Fit:
    """:func:`aside_gpus` as :func:`~toposcope.fabric.celldefrag.clear_cell`'s ``fit``."""

    def fit(
        occupant: Occupant, from_node: str, to_node: str, free: Sequence[int]
    ) -> tuple[int, ...] | None:
        return aside_gpus(model, from_node, occupant.indices, to_node, free)

    return fit


def _model_of(node: NodeModel, gpus: Sequence[int]) -> str | None:
    """The GPU model of ``gpus`` on ``node``, or ``None`` when they differ or are unknown."""
    models = {gpu.model for g in gpus if (gpu := node.gpu(g)) is not None}
    return models.pop() if len(models) == 1 and all(node.gpu(g) for g in gpus) else None


def _identical(source: NodeModel, target: NodeModel, gpus: Sequence[int]) -> bool:
    """Whether ``gpus`` are on ``target`` what they are on ``source``: model, NUMA node and
    the price of every pair.
    """
    for index in gpus:
        a, b = source.gpu(index), target.gpu(index)
        if a is None or b is None or a.model != b.model or a.numa_node != b.numa_node:
            return False
    return all(
        abs(source.prices.pair(a, b).factor - target.prices.pair(a, b).factor) <= EPSILON
        for a, b in itertools.combinations(gpus, 2)
    )
