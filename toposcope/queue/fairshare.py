"""Max-min fair shares of a capacity among accounts: the one split every queue view uses.

The Slurm queue exporter weights accounts by Slurm's normalised shares where accounting is
configured; the simulator and Slurm without accounting give every account the same weight.
"""

from __future__ import annotations

from collections.abc import Mapping

#: below this, what is left of the capacity counts as nothing (float noise)
_EPSILON = 1e-9


def fair_shares(
    capacity: float, demand: Mapping[str, float], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Max-min fair split of ``capacity`` among accounts with positive ``demand``.

    Each account gets a part proportional to its weight (1 where ``weights`` has none or a
    non-positive one), never above its demand; what a satisfied account leaves goes to the
    others. Accounts without demand get 0.
    """
    weights = weights or {}
    share = {a: 0.0 for a in demand}
    active = {a for a, d in demand.items() if d > 0}
    remaining = capacity
    while active and remaining > _EPSILON:
        weight = {a: w if (w := weights.get(a, 1.0)) > 0 else 1.0 for a in active}
        total = sum(weight.values())
        give = {a: remaining * weight[a] / total for a in active}
        full = {a for a in active if share[a] + give[a] >= demand[a]}
        if not full:
            for a in active:
                share[a] += give[a]
            break
        for a in full:
            remaining -= demand[a] - share[a]
            share[a] = demand[a]
        active -= full
    return share
