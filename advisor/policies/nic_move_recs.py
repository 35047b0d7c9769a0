"""The recommendations of nic-affinity's moves (:mod:`.nic_moves` decides them): a
multi-node job moved whole onto NIC-near GPUs of its nodes, and the single-node jobs moved
out of their way first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toposcope.advisor.gpu_sets import gpu_claims
from toposcope.advisor.model import WorkloadModel
from toposcope.advisor.recommendations import make_recommendation
from toposcope.cpulist import format_cpulist
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest

LINK_METRIC = "toposcope_gpu_nic_link_info"


@dataclass(frozen=True)
class NicMoveRule:
    """What prices a move of NIC-far ranks: the bandwidth share at a tier, the share of a
    step in inter-node transfers, one restart's seconds, the time left assumed for a job
    without one (0: not priced) and the least time left a moved job must have.
    """

    share: Callable[[str], float]
    network_share: float
    restart_seconds: float
    unknown_left_s: float = 0.0
    min_left_s: float = 0.0


@dataclass(frozen=True)
class PartMove:
    """One workload onto ``gpus`` of ``node``, pinned to ``cpus`` and ``mems`` (empty: not)."""

    workload: WorkloadModel
    node: str
    gpus: tuple[int, ...]
    cpus: tuple[int, ...] = ()
    mems: tuple[int, ...] = ()

    def place(self) -> dict[str, object]:
        """The part's place as a recommendation states it (and the gang move sends it)."""
        return {
            "node": self.node,
            "gpus": list(self.gpus),
            "cpus": format_cpulist(self.cpus),
            "mems": list(self.mems),
        }


@dataclass(frozen=True)
class Clearing:
    """The single-node jobs moved off a far part's near GPUs (``part``: that part)."""

    part: WorkloadModel
    moves: tuple[PartMove, ...]


@dataclass(frozen=True)
class GangPlan:
    """A NIC-far multi-node job and where its far parts go: tiers now and after, the
    bandwidth ratio, its time left and the rule pricing it.
    """

    job: str
    parts: Sequence[WorkloadModel]
    moves: tuple[PartMove, ...]
    tier_now: str
    tier_after: str
    ratio: float
    left: float
    rule: NicMoveRule

    @property
    def gpus(self) -> int:
        """The job's GPUs, over all its parts."""
        return sum(len(p.gpus) for p in self.parts)

    @property
    def saved(self) -> float:
        """Seconds of its time left the job saves with every rank NIC-near."""
        return self.left * self.rule.network_share * (1.0 - self.ratio)

    def net_gpu_seconds(self, clearings: Sequence[Clearing] = ()) -> float:
        """GPU-seconds saved less one restart of every rank and of each job moved away."""
        cleared = sum(len(m.workload.gpus) for c in clearings for m in c.moves)
        restart = self.rule.restart_seconds
        return self.gpus * (self.saved - restart) - cleared * restart

    def model_text(self) -> str:
        """The gain model, in words."""
        r = self.rule
        return (
            f"slowest rank {self.tier_now} from its NIC now, {self.tier_after} after: bandwidth "
            f"share {self.ratio:.2f} of it; assumed network share {r.network_share:g} of a "
            f"step; saves {self.saved:.0f} s of {self.left:.0f} s left, less one restart of "
            f"{r.restart_seconds:.0f} s of every rank"
        )


def _evidence(plan: GangPlan, parts: Sequence[WorkloadModel]) -> list[Evidence]:
    return [
        Evidence(LINK_METRIC, {"node": p.node, "workload": p.name, "link": plan.tier_now}, 1.0)
        for p in parts
    ]


def gang_recommendation(policy: str, plan: GangPlan) -> Recommendation:
    """The ``migrate-job`` moving ``plan``'s far parts onto their near GPUs, the job whole."""
    by_key = {m.workload.key: m for m in plan.moves}
    places = [by_key[p.key].place() if p.key in by_key else None for p in plan.parts]
    first = plan.moves[0]
    listed = "; ".join(
        f"{m.node} GPUs {list(m.workload.gpus)} -> {list(m.gpus)}" for m in plan.moves
    )
    left = plan.left
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy=policy,
        target=Target(first.node, plan.job, first.gpus),
        summary=(
            f"move {plan.job}'s NIC-far ranks onto GPUs near a NIC of their own nodes ({listed}): "
            f"{plan.tier_now} -> {plan.tier_after}, saves about {plan.saved:.0f} s of its "
            f"{left:.0f} s left for one restart"
        ),
        current={
            "nodes": [p.node for p in plan.parts],
            "gpus": {p.node: list(p.gpus) for p in plan.parts},
            "link": plan.tier_now,
            "time_left_s": round(left),
        },
        proposed={
            "nodes": [p.node for p in plan.parts],
            "places": places,
            "link": plan.tier_after,
            "requeue": True,
            "restart_s": plan.rule.restart_seconds,
        },
        evidence=_evidence(plan, [m.workload for m in plan.moves]),
        estimated_gain=(plan.saved - plan.rule.restart_seconds) / left if left > 0 else 0.0,
        gain_model=plan.model_text(),
        confidence=0.5,
        risk=Risk.HIGH,
        claims=[
            *(f"workload:{p.key}" for p in plan.parts),
            *(claim for m in plan.moves for claim in gpu_claims(m.node, m.gpus)),
        ],
    )


def clearing_recommendation(
    policy: str,
    plan: GangPlan,
    clearing: Clearing,
    move: PartMove,
    clearings: Sequence[Clearing],
) -> Recommendation:
    """The ``migrate-job`` moving one single-node job (``move``) off ``clearing.part``'s near
    GPUs, the first of two rounds. Its target is the multi-node job it makes room for (as
    fabric-placement's leaf clearing names the job it clears for), and its gain that job's net
    gain over every job moved out of its way, as a share of its GPU-time left: the job moved
    runs as fast as before, so a verification of it would measure nothing of what it buys.
    """
    part, job = clearing.part, move.workload
    net = plan.net_gpu_seconds(clearings)
    gain = net / (plan.gpus * plan.left) if plan.left > 0 and plan.gpus else 0.0
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy=policy,
        target=Target(part.node, plan.job),
        summary=(
            f"make room near a NIC on {part.node} for {plan.job} (its ranks are "
            f"{plan.tier_now} from their NIC): move {job.name} from GPUs {list(job.gpus)} to "
            f"{move.node} GPUs {list(move.gpus)}; {plan.job} moves in a later round"
        ),
        current={"for": plan.job, "node": job.node, "gpus": list(job.gpus)},
        proposed={"for": plan.job, "workload": job.name, **move.place()},
        evidence=_evidence(plan, [part]),
        estimated_gain=gain,
        gain_model=(
            f"{plan.job}: {plan.model_text()}; less one restart of each job moved out of its "
            f"way: {net:.0f} GPU-seconds net"
        ),
        confidence=0.4,
        risk=Risk.HIGH,
        actions=[
            ActionRequest(
                "",
                ActionKind.MIGRATE,
                job.name,
                move.node,
                list(move.cpus),
                list(move.mems),
                list(move.gpus),
            )
        ],
        claims=[f"workload:{job.key}", *gpu_claims(move.node, move.gpus)],
    )
