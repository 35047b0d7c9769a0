"""Applying a fabric placement of a pending multi-node job: one audited call of the backend.

A ``fabric-placement`` recommendation for a pending multi-node job has no action (it names
several nodes, a contract action one). A backend that steers such jobs
(:class:`FabricSteerer`: Slurm's ``ReqNodeList``/``Switches``, Kubernetes' Kueue annotations
or gated pods' affinity) carries it out whole. :func:`steer` does what the applier does for
an action: the same skip rules (unreachable, already applied, failed before, limits), the
intent in the audit log under the plan's request before the call, the answer after it.
Automatic apply never gets here: its rules refuse a recommendation without actions.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol, runtime_checkable

from toposcope.advisor.applying.ledger import ActionLedger
from toposcope.advisor.audit import FAILED, RETRY_LATER, SUCCEEDED, AuditLog
from toposcope.report.advisor_api import Outcome
from toposcope.report.recommendation import Recommendation, RecommendationKind
from toposcope.rm import ActionState, ResourceManagerError, is_retry_later
from toposcope.rm.plan import Plan

#: the policy whose placements of pending multi-node jobs are applied whole
FABRIC_POLICY = "fabric-placement"


@runtime_checkable
class FabricSteerer(Protocol):
    """A backend that plans and applies a fabric placement of a pending multi-node job."""

    def plan_fabric(self, recommendation: Recommendation) -> Plan:
        """The plan; a refusal is its ``refused``."""
        ...

    def steer_fabric(self, recommendation: Recommendation) -> ActionState:
        """Carry the plan out; a refusal raised as :class:`ResourceManagerError`."""
        ...


def steers(manager: object, rec: Recommendation) -> bool:
    """Whether ``rec`` is a fabric placement without actions that ``manager`` applies whole:
    a pending job's ``place``, or the kinds the backend names in ``fabric_kinds`` instead
    (the simulator: a running job's ``migrate-job``, every part moved at once), of
    fabric-placement or of the other policies the backend names in ``gang_policies`` (the
    simulator: nic-affinity's moves onto other GPUs of the same nodes,
    :data:`~toposcope.advisor.rmclients.gang_plan.GANG_POLICIES`).
    """
    kinds = getattr(manager, "fabric_kinds", (RecommendationKind.PLACE,))
    policies = getattr(manager, "gang_policies", (FABRIC_POLICY,))
    return (
        not rec.actions
        and rec.policy in policies
        and rec.kind in kinds
        and isinstance(manager, FabricSteerer)
    )


def skip_reason(audit: AuditLog, request_id: str) -> str:
    """Why a steer already recorded under ``request_id`` is not sent again, or ``""``."""
    entry = audit.entry(request_id)
    if entry is None:
        return ""
    if entry.state == SUCCEEDED:
        return "already applied"
    if entry.state == FAILED:
        return f"failed before ({request_id}: {entry.error})"
    return ""


def steer(
    manager: FabricSteerer,
    rec: Recommendation,
    audit: AuditLog,
    ledger: ActionLedger,
    *,
    actor: str,
    backend: str,
    counts: Counter[tuple[str, str]],
) -> Outcome:
    """Apply ``rec`` through ``manager`` with its intent and answer in ``audit``."""
    node = rec.target.node
    plan = manager.plan_fabric(rec)
    request = plan.request
    audit.record_intent(rec.id, request, actor=actor, backend=backend, before=None)
    try:
        if plan.refused:
            raise ResourceManagerError(plan.refused, 409, "workload")
        state = manager.steer_fabric(rec)
    except ResourceManagerError as exc:
        result = RETRY_LATER if is_retry_later(exc) else FAILED
        audit.record_result(request.request_id, result, error=str(exc))
        counts[(str(rec.kind), result)] += 1
        return Outcome(rec.id, node, result, f"{request.request_id}: {exc}")
    if ledger.record(request.request_id, state) == FAILED:
        counts[(str(rec.kind), FAILED)] += 1
        return Outcome(rec.id, node, FAILED, f"{request.request_id}: {state.error or 'failed'}")
    counts[(str(rec.kind), "applied")] += 1
    detail = f"1 steer ({len(plan.steps)} step(s))"
    if state.note:
        detail += f"; {request.request_id}: {state.note}"
    return Outcome(rec.id, node, "applied", detail, (state,))


__all__ = ["FABRIC_POLICY", "FabricSteerer", "skip_reason", "steer", "steers"]
