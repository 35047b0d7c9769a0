"""Perturbed seeds for both closed loops (``bench/closed_loop.py``, with ``--rm sim`` or
``--rm slurm``): the truth each run judges under, and the summary over a scenario's runs.

``--perturb F --seeds N --first-seed K`` runs a scenario as runs ``K .. K+N-1``; run ``s``
judges under :func:`perturbed`: every job's own parameters and every global figure of the
truth scaled by factors from ``[1 - F, 1 + F]`` seeded by ``s``
(:mod:`toposcope.sim.truth_perturb`), the advisor, another process, never told. Run 0 is
perturbed too when ``F`` > 0. :func:`summarize` reports a scenario's worst and mean ratio and
its harm across runs against the targets (:data:`TARGET_WORST` for the worst of several runs,
:data:`TARGET_RATIO` for the mean and a single run, :data:`TARGET_HARMFUL`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from toposcope.sim.scenarios import Scenario
from toposcope.sim.truth_params import shipped_truth, truth_in_effect
from toposcope.sim.truth_perturb import perturb_scenario, perturb_truth

#: the mean ratio to reach (and a single run's)
TARGET_RATIO = 0.9
#: the worst ratio to reach over several perturbed runs
TARGET_WORST = 0.85
#: harmful plus collateral actions allowed over all runs
TARGET_HARMFUL = 0


def seed_numbers(first: int, count: int) -> range:
    """The numbers of the runs ``--first-seed first --seeds count`` asks for."""
    return range(first, first + count)


@contextmanager
def perturbed(scenario: Scenario, fraction: float, seed: int) -> Iterator[Scenario]:
    """Put run ``seed``'s perturbed truth in effect (this process only) while the block
    runs and give ``scenario`` with its jobs perturbed by the same run's draws
    (``fraction`` 0: the shipped truth and ``scenario`` unchanged).
    """
    with truth_in_effect(perturb_truth(shipped_truth(), fraction, seed)):
        yield perturb_scenario(scenario, shipped_truth(), fraction, seed)


def ratio_targets(runs: int) -> dict[str, float]:
    """The ratio and harm targets a scenario of ``runs`` runs is judged against."""
    return {
        "worst_ratio": TARGET_WORST if runs > 1 else TARGET_RATIO,
        "mean_ratio": TARGET_RATIO,
        "harmful_and_collateral": TARGET_HARMFUL,
    }


def summarize(name: str, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One scenario over its runs (each with ``ratio``, ``ratio_to_bound``,
    ``harmful_actions``, ``collateral_harm``, ``useless_actions`` and ``applied_actions``):
    worst and mean ratio, harm and useless counts, and whether the targets were met.
    """
    if not runs:
        raise ValueError(f"no runs of {name} to summarize")
    ratios_seen = [r["ratio"] for r in runs]
    worst, mean = min(ratios_seen), sum(ratios_seen) / len(ratios_seen)
    harmful = sum(r["harmful_actions"] + r["collateral_harm"] for r in runs)
    targets = ratio_targets(len(runs))
    return {
        "name": name,
        "runs": len(runs),
        "worst_ratio": round(worst, 4),
        "mean_ratio": round(mean, 4),
        "mean_ratio_to_bound": round(sum(r["ratio_to_bound"] for r in runs) / len(runs), 4),
        "harmful_actions": sum(r["harmful_actions"] for r in runs),
        "collateral_harm": sum(r["collateral_harm"] for r in runs),
        "useless_actions": sum(r["useless_actions"] for r in runs),
        "applied_actions": sum(r["applied_actions"] for r in runs),
        "met": (
            worst >= targets["worst_ratio"]
            and mean >= targets["mean_ratio"]
            and harmful <= targets["harmful_and_collateral"]
        ),
        **harm_free_summary(runs),
    }


def harm_free_summary(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Worst and mean ``ratio_to_harm_free`` of the runs that carry one (a yardstick beside
    the ratio, not a target: :mod:`toposcope.sim.harm_free_oracle`); empty when none does.
    """
    seen = [r["ratio_to_harm_free"] for r in runs if "ratio_to_harm_free" in r]
    if not seen:
        return {}
    return {
        "worst_ratio_to_harm_free": round(min(seen), 4),
        "mean_ratio_to_harm_free": round(sum(seen) / len(seen), 4),
    }
