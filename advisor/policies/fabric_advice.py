"""fabric-placement's recommendations: what a choice of cell says, as evidence and proposal.

Beside :mod:`.fabric_placement` (the rule): one :class:`FabricAdvice` per pending multi-node
job becomes one ``place`` recommendation whose ``proposed`` holds what a scheduler needs to
apply it (the nodes, the number of leaf switches, the longest wait: Slurm's ``ReqNodeList``
and ``Switches=N@T``) and says which level was chosen and why, which fully free cells the
placement breaks and which stay whole. Its evidence names each chosen node's leaf
(``toposcope_fabric_node_info``) and each cell kept whole (``toposcope_fabric_switch_info``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toposcope.advisor.fabric_wait import level_factor
from toposcope.advisor.recommendations import make_recommendation
from toposcope.fabric.cellfit import Choice
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)

#: at most this many cells kept whole are listed as evidence
MAX_KEPT_EVIDENCE = 5


@dataclass(frozen=True)
class Hold:
    """Wait for a cell of a tighter level: which, for how long, and the run time it saves."""

    level: int
    level_name: str
    cell: str
    wait_s: float
    saved_s: float


@dataclass(frozen=True)
class FabricAdvice:
    """Everything one recommendation says about one pending multi-node job."""

    job: str
    gpus: int
    tree: CellTree
    choice: Choice
    tightest: int
    first_fit: tuple[str, ...]
    first_fit_level: int
    per_level: float
    run_seconds: float
    hold: Hold | None
    free: Mapping[str, NodeFree]
    after: str = ""


def leaves_spanned(tree: CellTree, nodes: tuple[str, ...]) -> int:
    """How many leaf cells (level 1) ``nodes`` are under: Slurm's ``Switches`` count."""
    return len({tree.cell_of(node, 1) for node in nodes})


def leaves_needed(tree: CellTree, level: int, cell: str, nodes: int) -> int:
    """The fewest leaf cells of the named cell of ``level`` whose nodes number ``nodes``."""
    members = next(
        (tree.cells[at].nodes for at in tree.cells_at(level) if tree.cells[at].name == cell), ()
    )
    if level <= 1:
        return 1
    sizes: dict[int | None, int] = {}
    for node in members:
        leaf = tree.cell_of(node, 1)
        sizes[leaf] = sizes.get(leaf, 0) + 1
    total = 0
    for count, size in enumerate(sorted(sizes.values(), reverse=True), start=1):
        total += size
        if total >= nodes:
            return count
    return max(1, len(sizes))


def advice_recommendation(policy: str, advice: FabricAdvice) -> Recommendation:
    """The ``place`` recommendation of one :class:`FabricAdvice`."""
    choice, tree, hold = advice.choice, advice.tree, advice.hold
    now_above = choice.level - advice.tightest
    first_above = max(advice.first_fit_level - advice.tightest, 0)
    tightest = tree.levels[advice.tightest]
    why = _why(advice, now_above)
    proposed: dict[str, object] = {
        "level": choice.level_name,
        "cell": choice.cell,
        "nodes": list(choice.nodes),
        "gpus_per_node": choice.gpus_per_node,
        "gpu_indices": list(choice.gpu_indices),
        "rail_aligned": choice.rail_aligned,
        "tightest_level": tightest,
        "why": why,
        "cells_broken": list(choice.broken),
        "cells_broken_count": choice.broken_count,
        "cells_kept_whole": list(choice.kept_whole),
        "cells_kept_whole_count": choice.kept_whole_count,
        "switches": leaves_spanned(tree, choice.nodes),
        "max_wait_s": 0,
    }
    if hold is None:
        gain = level_factor(first_above, advice.per_level) / level_factor(
            now_above, advice.per_level
        )
        gain -= 1.0
        summary = (
            f"place {advice.job} on {len(choice.nodes)} nodes under {choice.level_name} "
            f"{choice.cell} ({','.join(choice.nodes)})"
        )
        gain_model = (
            f"first-fit's nodes cross up to the {tree.levels[advice.first_fit_level]} level, "
            f"ours the {choice.level_name}; each level above the tightest ({tightest}) costs "
            f"{advice.per_level:g} of the step time (a prior)"
        )
        risk = Risk.LOW
        claims = [f"workload:pending/{advice.job}", *_gpu_claims(advice)]
    else:
        waited_above = hold.level - advice.tightest
        gain = level_factor(now_above, advice.per_level) / level_factor(
            waited_above, advice.per_level
        )
        gain -= 1.0 + hold.wait_s / advice.run_seconds
        summary = (
            f"hold {advice.job} for {hold.level_name} {hold.cell}: about {hold.wait_s:.0f} s of "
            f"waiting saves {hold.saved_s:.0f} s of running across the {choice.level_name}"
        )
        gain_model = (
            f"now across the {choice.level_name}, after the wait under one {hold.level_name}; "
            f"{advice.per_level:g} of the step per level above the tightest (a prior), less "
            f"the wait as a share of a {advice.run_seconds:.0f} s run"
        )
        proposed.update(
            {
                "hold_level": hold.level_name,
                "hold_cell": hold.cell,
                "max_wait_s": round(hold.wait_s, 1),
                "saved_s": round(hold.saved_s, 1),
                "switches": leaves_needed(tree, hold.level, hold.cell, len(choice.nodes)),
                "nodes": [],
            }
        )
        risk = Risk.MEDIUM
        claims = [f"workload:pending/{advice.job}"]
    return make_recommendation(
        kind=RecommendationKind.PLACE,
        policy=policy,
        target=Target(hold.cell if hold else choice.cell, advice.job),
        summary=summary,
        current={
            "state": "pending",
            "gpus": advice.gpus,
            "first_fit": {
                "nodes": list(advice.first_fit),
                "level": tree.levels[advice.first_fit_level],
            },
        },
        proposed=proposed,
        evidence=_evidence(advice),
        estimated_gain=gain,
        gain_model=gain_model,
        confidence=0.5,
        risk=risk,
        claims=claims,
    )


def _why(advice: FabricAdvice, now_above: int) -> str:
    choice, tree = advice.choice, advice.tree
    if advice.after:
        reason = f"the tightest level it fits under, once {advice.after}"
    elif now_above == 0:
        reason = f"the tightest level it fits under; {choice.candidates} such cell(s) free"
    else:
        below = tree.levels[choice.level - 1]
        reason = f"no {below} has {len(choice.nodes)} nodes with the GPUs free now"
    whole = (
        f"; keeps {choice.kept_whole_count} whole cell(s) free" if choice.kept_whole_count else ""
    )
    broken = f", breaks {choice.broken_count}" if choice.broken_count else ", breaks none"
    return f"{choice.level_name} {choice.cell}: {reason}{whole}{broken}"


def _gpu_claims(advice: FabricAdvice) -> list[str]:
    claims: list[str] = []
    share = advice.choice.gpus_per_node
    for node in advice.choice.nodes:
        indices = advice.choice.gpu_indices or (advice.free[node].free_indices or ())[:share]
        claims += [f"gpu:{node}/{index}" for index in indices]
    return claims


def _evidence(advice: FabricAdvice) -> list[Evidence]:
    tree, choice = advice.tree, advice.choice
    evidence = []
    for node in choice.nodes:
        leaf = tree.cell_of(node, 1)
        evidence.append(
            Evidence(
                "toposcope_fabric_node_info",
                {
                    "node": node,
                    "leaf": tree.cells[leaf].name if leaf is not None else "",
                    "level": choice.level_name,
                    "free_gpus": str(advice.free[node].free),
                },
                1.0,
            )
        )
    evidence += [
        Evidence(
            "toposcope_fabric_switch_info",
            {"switch": name, "state": "kept whole"},
            1.0,
        )
        for name in choice.kept_whole[:MAX_KEPT_EVIDENCE]
    ]
    return evidence
