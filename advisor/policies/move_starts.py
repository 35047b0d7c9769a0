"""The start of a pending job that a job move makes possible.

A running job that moves to a better set leaves its old GPUs behind. With the free GPUs of
its node beside them they can form the set a pending job starts on: the job that waits for
want of free GPUs (or waits for a worse set) starts where the move left room. What the
cluster gains from the move is then the moved job's speed-up plus that start, counted as
:mod:`~toposcope.advisor.policies.contested_moves` counts a pending job's start: its
estimated efficiency on the set (:func:`start_value`; the closed loop's oracle counts a job
that waits as 0), less its efficiency on the best set it could start on without the move
(0 when none fits it).

gpu-placement places the pending job on the freed set in the next round, once the move has
left it: its pending jobs, largest first, take the best free set, and the freed set is the
only one (no free set fits the job) or the best (it is better than any other free set).
The move's recommendation names the start (``proposed.starts``), adds it to its estimate
and its gain model, and claims the set's free GPUs and the pending job, so that nothing else
of the round takes them. What verifies the move is the moved job's own progress, so
calibration learns from the move's own part of the estimate
(:func:`~toposcope.advisor.outcomes.start_gain`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from toposcope.advisor.gpu_search import GpuSetSearch
from toposcope.advisor.gpu_sets import Placement, gpu_claims, rank_sets
from toposcope.advisor.model import PendingWorkload, WorkloadModel


def start_value(search: GpuSetSearch, count: int, target: Placement, sensitivity: float) -> float:
    """A pending job's estimated efficiency on ``target``: the best set its size could have
    anywhere over ``target``, by the link prices (1 for one GPU).
    """
    if count < 2:
        return 1.0
    floor = search.floor_any(count)
    able = search.able_nodes(count, floor + 1)
    if not able:
        return 1.0
    node = search.model.nodes[able[0]]
    up = [g.index for g in node.gpus if g.up is not False]
    sets = rank_sets(node, up, count, search.node_cells(able[0]))
    if not sets:
        return 1.0
    return min(1.0, sets[0].factor(sensitivity) / target.factor(sensitivity))


@dataclass(frozen=True)
class EnabledStart:
    """The start of pending job ``name`` on ``target``, a set made of GPUs a move leaves
    (``vacated``) and free ones, worth ``value``: its estimated efficiency there (``full``)
    less its efficiency on the best free set it has without the move (``now``, 0: none).
    """

    name: str
    target: Placement
    vacated: tuple[int, ...]
    full: float
    now: float

    @property
    def value(self) -> float:
        """What the start adds to the move's estimate: ``full - now``."""
        return self.full - self.now

    def claims(self) -> list[str]:
        """The set's GPUs that are free now (not the moved job's), and the pending job."""
        free = [g for g in self.target.gpus if g not in self.vacated]
        return [*gpu_claims(self.target.node, free), f"workload:pending/{self.name}"]

    def text(self) -> str:
        """The clause the move's gain model adds for the start."""
        where = f"{self.target.node} GPUs {list(self.target.gpus)}"
        now = (
            f" against {self.now:.2f} on its best free set now"
            if self.now > 0
            else " (no free set fits it now)"
        )
        return (
            f"; + the start of pending {self.name} on the GPUs it frees ({where}, worst link "
            f"{self.target.worst_link}), worth {self.value:.3f}: its estimated efficiency "
            f"{self.full:.2f} there{now}"
        )

    def to_dict(self) -> dict[str, object]:
        """The start as the recommendation's ``proposed.starts`` lists it."""
        return {
            "pending": self.name,
            "node": self.target.node,
            "gpus": list(self.target.gpus),
            "worst_link": str(self.target.worst_link),
            "efficiency": round(self.full, 6),
            "efficiency_now": round(self.now, 6),
            "gain": round(self.value, 6),
        }


def enabled_start(
    search: GpuSetSearch,
    pending: Sequence[PendingWorkload],
    job: WorkloadModel,
    target: Placement,
    *,
    taken: Collection[str] = (),
    held: Collection[str] = (),
    sensitivity: float = 1.0,
    full_value: bool = False,
    alternative: Callable[[PendingWorkload], float] | None = None,
) -> EnabledStart | None:
    """The pending job whose start ``job``'s move to ``target`` is worth most, and where.

    The set is the best of the GPUs the move leaves on ``job``'s node and the node's free
    GPUs not in ``taken`` nor in ``target``, holding at least one left GPU. It counts when
    the job's efficiency there beats its efficiency on the best free set it has without the
    move (:meth:`GpuSetSearch.free_best`, outside ``taken``; ``held``: pending jobs that
    hold a set of their own this run, not offered), or than ``alternative`` (the pending
    job's efficiency where it starts this round without the move, for example on a set a
    defragmentation frees for it), when that is more. ``full_value``: the start is worth
    its whole efficiency there less only what the alternative adds over the free set (a
    joint choice that weighs it against the job's own start on that set), else the
    difference.
    """
    left = set(job.gpus) - (set(target.gpus) if target.node == job.node else set())
    if not left or job.node not in search.model.nodes:
        return None
    busy = set(taken) | set(gpu_claims(target.node, target.gpus))
    free = {g for g in search.model.free_gpus(job.node) if f"gpu:{job.node}/{g}" not in busy}
    free |= left
    found: EnabledStart | None = None
    for waiting in sorted(pending, key=lambda j: (-j.gpus_requested, j.name)):
        count = waiting.gpus_requested
        if waiting.nodes_requested > 1 or count < 1 or waiting.name in held:
            continue
        where = search.node_best(job.node, free, count)
        if where is None or left.isdisjoint(where.gpus):
            continue
        full = start_value(search, count, where, sensitivity)
        plain = search.free_best(count, taken)
        free_now = start_value(search, count, plain, sensitivity) if plain is not None else 0.0
        now = max(free_now, alternative(waiting)) if alternative is not None else free_now
        if full <= now:
            continue
        credit = free_now if full_value else 0.0
        start = EnabledStart(waiting.name, where, tuple(sorted(left)), full, now - credit)
        if found is None or start.value > found.value:
            found = start
    return found
