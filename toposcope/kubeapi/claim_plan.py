"""A :class:`~toposcope.kubeapi.claim_advice.ClaimChange` as data: a plan of API requests,
and the ``proposed`` state of a recommendation.

The plan (:mod:`toposcope.rm.plan` types) creates the new ResourceClaimTemplate, then patches
the owner's pod template to use it (a JSON merge patch guarded by the owner's
``resourceVersion``), then waits for the rollout that recreates the pods; the scheduler
allocates their new claims under the constraint. Without a patchable owner the plan stops
after the template and says who must recreate the pod. Rendered by the dry-run path as
``kubectl`` calls, applied as the same requests.
"""

from __future__ import annotations

from typing import Any

from toposcope.kubeapi.claim_advice import PATCHABLE, ClaimChange, Owner
from toposcope.kubeapi.nri_advice import NriAdvice
from toposcope.rm.models import ActionKind, ActionRequest
from toposcope.rm.plan import HttpStep, Plan, Step, WaitStep

#: the backend named in the plan
BACKEND = "kubernetes"
MERGE_PATCH = "application/merge-patch+json"


def change_request(change: ClaimChange, request_id: str = "dra-alignment") -> ActionRequest:
    """The action the plan stands for: the pod's workload re-placed by a rollout."""
    return ActionRequest(
        request_id=request_id,
        kind=ActionKind.MIGRATE,
        workload=f"{change.namespace}/{change.pod}",
        reason=(
            f"claim {change.claim}: ResourceClaimTemplate {change.new_template} with "
            f"matchAttribute {change.constraint['matchAttribute']}"
        ),
    )


def change_plan(change: ClaimChange, request: ActionRequest | None = None) -> Plan:
    """The ordered requests that carry ``change`` out (see the module docstring)."""
    ns = change.namespace
    steps: list[Step] = [
        HttpStep(
            "POST",
            f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates",
            change.template,
            api="kubernetes",
            what=(
                f"create ResourceClaimTemplate {change.new_template}: {change.old_template} "
                f"with spec.devices.constraints += {change.constraint}"
            ),
        )
    ]
    notes = list(change.notes)
    owner = change.owner
    if owner is not None and change.owner_patch is not None:
        group, plural = PATCHABLE[owner.kind]
        steps.append(
            HttpStep(
                "PATCH",
                f"{group}/namespaces/{ns}/{plural}/{owner.name}",
                change.owner_patch,
                api="kubernetes",
                content_type=MERGE_PATCH,
                what=f"point {owner.kind} {owner.name}'s claim {change.claim} at the new template",
            )
        )
        steps.append(
            WaitStep(
                f"{owner.kind} {owner.name} rolled out: its pods recreated with claims from "
                f"{change.new_template}",
                timeout_s=600.0,
                check=(
                    "kubectl",
                    "-n",
                    ns,
                    "rollout",
                    "status",
                    f"{owner.kind.lower()}/{owner.name}",
                ),
            )
        )
    return Plan(
        request if request is not None else change_request(change),
        BACKEND,
        tuple(steps),
        checked=(
            f"pod {ns}/{change.pod} claim {change.claim} is made from template "
            f"{change.old_template}",
            "every allocated device of the constrained requests publishes "
            f"{change.constraint['matchAttribute']}",
        ),
        notes=tuple(notes),
    )


def nri_plan(advice: NriAdvice, namespace: str, pod: str, owner: Owner | None) -> Plan:
    """The owner patch adding an nri-plugins policy's annotations (refused without a
    patchable owner: a running pod's annotations are read by the policy when it starts).
    """
    request = ActionRequest(
        request_id="nri-pinning",
        kind=ActionKind.PIN,
        workload=f"{namespace}/{pod}",
        reason=f"pin through the {advice.policy} policy's annotations",
    )
    notes = tuple(advice.notes) + tuple(
        f"balloon type to add: {balloon}" for balloon in advice.balloon_types
    )
    if owner is None or owner.kind not in PATCHABLE:
        return Plan(request, BACKEND, notes=notes, refused="no Deployment or StatefulSet to patch")
    group, plural = PATCHABLE[owner.kind]
    version = str((owner.object.get("metadata") or {}).get("resourceVersion") or "")
    step = HttpStep(
        "PATCH",
        f"{group}/namespaces/{namespace}/{plural}/{owner.name}",
        advice.owner_patch(version),
        api="kubernetes",
        content_type=MERGE_PATCH,
        what=f"annotate {owner.kind} {owner.name}'s pods for the {advice.policy} policy",
    )
    return Plan(request, BACKEND, (step,), notes=notes)


def proposed_state(change: ClaimChange) -> dict[str, Any]:
    """The ``proposed`` state of a recommendation for ``change``: the new template's full
    body, the constraint, and the owner's merge patch where there is one.
    """
    proposed: dict[str, Any] = {
        "claim": change.claim,
        "constraint": change.constraint,
        "resource_claim_template": change.template,
    }
    if change.owner is not None and change.owner_patch is not None:
        proposed["owner"] = {"kind": change.owner.kind, "name": change.owner.name}
        proposed["owner_patch"] = change.owner_patch
    return proposed


__all__ = [
    "BACKEND",
    "MERGE_PATCH",
    "change_plan",
    "change_request",
    "nri_plan",
    "proposed_state",
]
