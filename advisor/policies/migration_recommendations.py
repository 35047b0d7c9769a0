"""The recommendations job-migration makes: a plain move, and a defragmentation.

A plain move (:func:`move_recommendation`) migrates one running job to a better GPU set; a
defragmentation (:func:`defrag_recommendation`) migrates the small jobs of a
:class:`~toposcope.advisor.defragment.DefragPlan` first, then migrates the large running job
or places the large pending one on the freed set. Both optionally pin the moved jobs' CPUs
and memory to the NUMA node of their new GPUs, making room there when CPU work blocks the pin
(:mod:`~toposcope.advisor.policies.move_pins`). The decisions (which
job, which set, whether it pays off) are the policy's, in
:mod:`~toposcope.advisor.policies.job_migration`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toposcope.advisor.comm_share import measured_share
from toposcope.advisor.defragment import DefragPlan, DefragValue
from toposcope.advisor.gpu_sets import Placement, gpu_claims
from toposcope.advisor.link_prices import price_text
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.policies.move_pins import MovePin, gpu_numa_pin, pin_or_make_room
from toposcope.advisor.policies.move_starts import EnabledStart
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

#: gpu_numa_pin lives in move_pins; other move policies import it from here as before
__all__ = [
    "MigrationTerms",
    "defrag_recommendation",
    "gpu_numa_pin",
    "move_recommendation",
]


@dataclass(frozen=True)
class MigrationTerms:
    """What every recommendation of one run states or depends on: the policy's name, the
    remaining run time and checkpoint-restore cost it assumed, and whether moved jobs are
    pinned next to their new GPUs.
    """

    policy: str
    remaining_seconds: float
    checkpoint_restore_seconds: float
    pin: bool
    sensitivity: float = 1.0

    def share_terms(
        self, model: ClusterModel, job: WorkloadModel, estimate: str = "prior"
    ) -> tuple[list[Evidence], str, dict[str, object]]:
        """What ``job``'s measured communication share adds to its recommendation: evidence,
        a gain model clause and a ``current`` entry, each saying what the estimate used
        (``estimate``: ``measured``, the job's link traffic, or ``prior``, the link prices
        and ``sensitivity``) and what was measured, if anything.
        """
        if estimate == "measured":
            prior = "estimate from the measured link traffic"
        else:
            prior = f"estimate from the prior (sensitivity {self.sensitivity:g})"
        state: dict[str, object] = {"estimate": estimate, "sensitivity": self.sensitivity}
        measured = measured_share(model, job)
        if measured is None:
            return [], f"{prior}; no measured link traffic", {**state, "measured": None}
        state["measured"] = measured.to_dict()
        return measured.evidence(job), f"{prior}; {measured.text()}", state


def _proposed(
    best: Placement, pin: MovePin, saves_seconds: float, start: EnabledStart | None = None
) -> dict[str, object]:
    """The proposed state of a job moved to ``best`` and pinned by ``pin`` (with the moves
    that make room for it there, if any, and the pending job's ``start`` on the GPUs it
    leaves, if one counts).
    """
    room = pin.summary()
    return {
        "node": best.node,
        "gpus": list(best.gpus),
        "cpus": format_cpulist(pin.cpus),
        "mems": pin.mems,
        "worst_link": str(best.worst_link),
        "link_price": best.price.to_dict(),
        "saves_seconds": round(saves_seconds),
        **({"makes_room": room} if room else {}),
        **({"starts": [start.to_dict()]} if start is not None else {}),
    }


def move_recommendation(
    model: ClusterModel,
    job: WorkloadModel,
    current: Placement,
    best: Placement,
    terms: MigrationTerms,
    *,
    gain: float,
    saved: float,
    model_text: str,
    peers: list[str] | None = None,
    estimate: str = "prior",
    start: EnabledStart | None = None,
    gpu_share: Mapping[str, object] | None = None,
    extra_evidence: Sequence[Evidence] = (),
) -> Recommendation:
    """Migrate ``job`` from its ``current`` set to ``best``, saving ``saved`` seconds of the
    remaining run time (``peers``: the workloads it shares its GPUs with, when that is the
    reason; ``estimate``: what the gain rests on, ``measured`` traffic or the ``prior``;
    ``start``: the pending job's start on the GPUs it leaves, added to ``gain``;
    ``gpu_share``: how the gain of leaving a time-sliced GPU was priced, kept as
    ``current.gpu_share``, with ``extra_evidence``, the measured shares).
    """
    node = model.nodes[job.node]
    pin = pin_or_make_room(model, best.node, best.gpus, terms.pin, job, {})
    evidence = [
        Evidence(
            "toposcope_gpu_link_info",
            {"node": job.node, "gpu": str(a), "peer_gpu": str(b)},
            1.0,
        )
        for a in job.gpus
        for b in job.gpus
        if a < b and node.link(a, b) == current.worst_link
    ]
    for index in job.gpus:
        gpu = node.gpu(index)
        if gpu is not None and gpu.utilization is not None:
            evidence.append(
                Evidence(
                    "toposcope_gpu_utilization_ratio",
                    {"node": job.node, "gpu": str(index)},
                    gpu.utilization,
                )
            )
    share_evidence, share_text, share_state = terms.share_terms(model, job, estimate)
    evidence += share_evidence
    evidence += extra_evidence
    cross = best.node != job.node
    why = (
        f"shares its GPUs with {', '.join(peers)}" if peers else f"worst link {current.worst_link}"
    )
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy=terms.policy,
        target=Target(job.node, job.name, tuple(job.gpus)),
        summary=(
            f"move {job.name} from {job.node} GPUs {list(job.gpus)} ({why}) to "
            f"{best.node} GPUs {list(best.gpus)} (worst link {best.worst_link})"
        ),
        current={
            "node": job.node,
            "gpus": list(job.gpus),
            "worst_link": str(current.worst_link),
            "link_price": current.price.to_dict(),
            "communication_share": share_state,
            **({"gpu_share": dict(gpu_share)} if gpu_share is not None else {}),
        },
        proposed=_proposed(best, pin, saved, start),
        evidence=evidence,
        estimated_gain=gain + (start.value if start is not None else 0.0),
        gain_model=(
            f"{model_text}; saves {saved:.0f}s of {terms.remaining_seconds:.0f}s remaining vs "
            f"{terms.checkpoint_restore_seconds:.0f}s checkpoint-restore"
            f"{start.text() if start is not None else ''}; "
            f"{price_text(('now', current.price), ('after', best.price))}; {share_text}"
            f"{pin.text()}"
        ),
        confidence=0.5 if cross else 0.6,
        risk=Risk.HIGH if cross else Risk.MEDIUM,
        actions=[
            *pin.actions(),
            ActionRequest(
                "", ActionKind.MIGRATE, job.name, best.node, pin.cpus, pin.mems, list(best.gpus)
            ),
        ],
        claims=[
            *gpu_claims(best.node, best.gpus),
            f"workload:{job.key}",
            *pin.claims(),
            *(start.claims() if start is not None else []),
        ],
    )


def defrag_recommendation(
    model: ClusterModel,
    job: WorkloadModel | None,
    current: Placement | None,
    plan: DefragPlan,
    value: DefragValue,
    terms: MigrationTerms,
    *,
    pending: str = "",
    estimate: str = "prior",
    start: EnabledStart | None = None,
) -> Recommendation:
    """Migrate the plan's small jobs, then the large one (``job`` running: ``migrate``, from
    its ``current`` set; else the pending job ``pending``: ``place``, ``current`` being the
    best free set it could get without the plan; ``estimate``: what the running job's gain
    rests on, ``measured`` traffic or the ``prior``; ``start``: a pending job's start on the
    GPUs the running job leaves, added to the plan's gain).
    """
    best = plan.target
    actions: list[ActionRequest] = []
    moves: list[dict[str, object]] = []
    claims = plan.claims()
    reserved: dict[str, dict[int, float]] = {}
    away = [m.workload for m in plan.moves] + ([job] if job is not None else [])
    gain_room = ""
    for move in plan.moves:
        w, to = move.workload, move.target
        pin = pin_or_make_room(
            model, to.node, to.gpus, terms.pin, w, reserved.setdefault(to.node, {}), away
        )
        away += [p.candidate.workload for p in pin.room]
        actions += pin.actions()
        claims += pin.claims()
        gain_room += pin.text()
        actions.append(
            ActionRequest(
                "", ActionKind.MIGRATE, w.name, to.node, pin.cpus, pin.mems, list(to.gpus)
            )
        )
        moves.append(
            {"workload": w.name, "from_node": w.node, "from_gpus": list(w.gpus),
             "node": to.node, "gpus": list(to.gpus)}
        )  # fmt: skip
        claims.append(f"workload:{w.key}")
    pin = pin_or_make_room(
        model, best.node, best.gpus, terms.pin, job, reserved.setdefault(best.node, {}), away
    )
    actions += pin.actions()
    claims += pin.claims()
    gain_room += pin.text()
    name = job.name if job is not None else pending
    kind = ActionKind.MIGRATE if job is not None else ActionKind.PLACE
    actions.append(ActionRequest("", kind, name, best.node, pin.cpus, pin.mems, list(best.gpus)))
    claims.append(f"workload:{job.key}" if job is not None else f"workload:pending/{name}")
    cross = any(m.target.node != m.workload.node for m in plan.moves) or (
        job is not None and best.node != job.node
    )
    evidence = [
        Evidence(
            "toposcope_workload_gpu_info",
            {"node": m.workload.node, "workload": m.workload.name, "gpu": str(g)},
            1.0,
        )
        for m in plan.moves
        for g in m.workload.gpus
        if g in best.gpus
    ]
    names = ", ".join(
        f"{m.workload.name} ({m.workload.node} GPUs {list(m.workload.gpus)} -> "
        f"{m.target.node} GPUs {list(m.target.gpus)})"
        for m in plan.moves
    )
    gain_model = value.model_text + (start.text() if start is not None else "")
    if start is not None:
        claims += start.claims()
    before = [("now", current.price)] if current is not None else []
    gain_model = f"{gain_model}; {price_text(*before, ('after', best.price))}"
    if job is not None:
        where = f"{job.name} from {job.node} GPUs {list(job.gpus)}"
        worst_now = str(current.worst_link) if current is not None else "none"
        summary_now = f" (worst link {worst_now})"
        share_evidence, share_text, share_state = terms.share_terms(model, job, estimate)
        evidence += share_evidence
        gain_model = f"{gain_model}; {share_text}"
        current_state: dict[str, object] = {
            "node": job.node,
            "gpus": list(job.gpus),
            "worst_link": worst_now,
            "link_price": current.price.to_dict() if current is not None else None,
            "communication_share": share_state,
        }
        rec_kind = RecommendationKind.MIGRATE_JOB
        target = Target(job.node, job.name, tuple(job.gpus))
    else:
        where = f"pending {pending}"
        summary_now = (
            f" (best free set: worst link {current.worst_link})"
            if current is not None
            else " (no free set fits it)"
        )
        current_state = {
            "state": "pending",
            "best_free": current.to_dict() if current is not None else None,
        }
        rec_kind = RecommendationKind.PLACE
        target = Target(best.node, pending, best.gpus)
    return make_recommendation(
        kind=rec_kind,
        policy=terms.policy,
        target=target,
        summary=(
            f"defragment: move {names}, then {where}{summary_now} to {best.node} GPUs "
            f"{list(best.gpus)} (worst link {best.worst_link})"
        ),
        current=current_state,
        proposed={**_proposed(best, pin, value.net_seconds, start), "defragment": moves},
        evidence=evidence,
        estimated_gain=value.gain + (start.value if start is not None else 0.0),
        gain_model=gain_model + gain_room,
        confidence=0.45 if cross else 0.55,
        risk=Risk.HIGH if cross else Risk.MEDIUM,
        actions=actions,
        claims=claims,
    )
