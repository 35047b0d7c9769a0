"""Wait for a tighter cell or spread now: the rule of :mod:`~toposcope.advisor.placement_wait`
over the fabric's levels.

A multi-node job whose nodes share one leaf exchanges its collectives through that leaf's
switch only; spread over two leaves, its traffic also crosses the spine, whose uplinks are
shared and usually tapered; over two spines, the core as well. Until finished jobs measure
it, each level crossed above the tightest level the job could fit under slows its steps by
:data:`LEVEL_SLOWDOWN_PRIOR` (a *prior*, calibrated later with
:func:`~toposcope.advisor.placement_wait.calibrated_scale`, and never the simulator's truth):

* a quarter of a data-parallel step in inter-node collectives (ring all-reduce of the
  gradients; the share the issue's anchor jobs spend communicating, from 40 % slower to 5x
  slower when a 2-GPU job crosses nodes, taken at its low end for jobs built to scale out),
* whose bandwidth halves at each level above through a 2:1 oversubscribed uplink (the
  typical leaf-to-spine taper of GPU fabrics that are not fully non-blocking),

so 0.25 x (2 - 1) / 2 = 0.125 per level. A job placed ``levels`` above its tightest level runs
``1 + 0.125 x levels`` times as long. :func:`wait_for_tighter` then applies
:func:`~toposcope.advisor.placement_wait.wait_pays`: wait for the tighter cell while the
expected wait costs less than the slower run (counting the other queued jobs that need the
GPUs the slower run would hold longer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from toposcope.advisor.placement_wait import wait_pays

#: step-time slowdown per switch level crossed above the tightest level (a prior, see above)
LEVEL_SLOWDOWN_PRIOR = 0.125


def level_factor(levels_above: int, per_level: float = LEVEL_SLOWDOWN_PRIOR) -> float:
    """The step-time factor of a job placed ``levels_above`` levels above its tightest."""
    return 1.0 + max(0.0, per_level) * max(0, levels_above)


def wait_for_tighter(
    run_seconds: float,
    levels_now: int,
    levels_waiting: int,
    wait_seconds: float,
    *,
    gpus: int,
    waiting: int,
    per_level: float = LEVEL_SLOWDOWN_PRIOR,
) -> bool:
    """Whether a job should wait ``wait_seconds`` to run ``levels_waiting`` levels above its
    tightest rather than start now ``levels_now`` above it (see the module docstring).

    Alone in the queue (``waiting`` 0) the slower run costs the job its own extra run time;
    with others queued, the GPU time its ``gpus`` hold longer is theirs too, as
    :func:`~toposcope.advisor.placement_wait.wait_pays` counts it.
    """
    if levels_waiting >= levels_now:
        return False
    return wait_pays(
        run_seconds,
        level_factor(levels_now, per_level),
        level_factor(levels_waiting, per_level),
        wait_seconds,
        gpus=gpus if waiting > 0 else 1,
        waiting=waiting,
    )


def ready_in(
    gpus_on_node: int,
    free_now: int,
    held: Iterable[tuple[int, float | None]],
    wanted: int,
) -> float:
    """Seconds until a node has ``wanted`` free GPUs, given what it has free now and what
    its jobs hold with the time each has left (``None``: no limit, never counted): the
    soonest-ending jobs free theirs first. ``inf`` when it never gets there.
    """
    if free_now >= wanted:
        return 0.0
    if gpus_on_node < wanted:
        return float("inf")
    have = free_now
    for count, left in sorted(held, key=lambda item: float("inf") if item[1] is None else item[1]):
        if left is None:
            break
        have += count
        if have >= wanted:
            return max(0.0, left)
    return float("inf")


def ready_times(
    holders: Mapping[str, Iterable[tuple[int, float | None]]],
    free_now: Mapping[str, tuple[int, int]],
    wanted: int,
) -> dict[str, float]:
    """Node -> :func:`ready_in` for every node of ``free_now`` (node -> (GPUs, free GPUs))."""
    return {
        node: ready_in(total, free, holders.get(node, ()), wanted)
        for node, (total, free) in free_now.items()
    }
