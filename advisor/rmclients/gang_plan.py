"""The ``sim`` backend's plan for a fabric-placement move of a running multi-node job.

A ``migrate-job`` recommendation of ``fabric-placement`` names the job and the nodes of the
tighter cell (``proposed["nodes"]``); the contract's action names one node, so the
simulator takes the whole move on its own route, ``POST {url}/gang-moves``
(:mod:`toposcope.sim.gang_api`): every part onto one of the nodes, at once, paying the
gang's checkpoint-restore once. The plan is that one request; its ``request`` (a
``migrate`` of the job to the first node, request id ``<rec id>-0``) is what the audit log
records. Names are checked before they reach a body: a job or node name the contract would
refuse, or a recommendation without nodes, is a refusal.
"""

from __future__ import annotations

from toposcope.identity.names import is_node_name
from toposcope.report.recommendation import Recommendation, RecommendationKind
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
from toposcope.rm.plan import HttpStep, Plan, refused
from toposcope.rm.validation import check_request

#: the fabric-placement recommendation kinds the simulator carries out whole
FABRIC_KINDS = (RecommendationKind.MIGRATE_JOB,)
#: the simulator's route for a whole-gang move, under ``/api/v1``
GANG_MOVES = "/gang-moves"


def gang_plan(rec: Recommendation, url: str) -> Plan:
    """``POST {url}/gang-moves`` moving ``rec``'s job onto ``rec.proposed["nodes"]``, or a
    refusal saying why not (see the module docstring).
    """
    nodes = [str(n) for n in rec.proposed.get("nodes") or []]
    job = rec.target.workload or ""
    first = nodes[0] if nodes and is_node_name(nodes[0]) else None
    request = ActionRequest(
        f"{rec.id}-0", ActionKind.MIGRATE, job, first, reason=rec.summary[:1000]
    )
    if rec.kind not in FABRIC_KINDS:
        why = f"the simulator moves running multi-node jobs whole; a {rec.kind} is not one"
        return refused(request, "sim", why)
    bad = [n for n in nodes if not is_node_name(n)]
    if not nodes or bad:
        return refused(request, "sim", f"no valid nodes to move {job!r} onto: {bad or nodes}")
    try:
        check_request(request)
    except ResourceManagerError as exc:
        return refused(request, "sim", f"job {job[:80]!r}: {exc}")
    body = {
        "request_id": request.request_id,
        "job": job,
        "nodes": nodes,
        "reason": request.reason,
    }
    step = HttpStep(
        "POST",
        f"{url}{GANG_MOVES}",
        body,
        what=f"move every part of {job} onto {','.join(nodes)} at once",
    )
    return Plan(request, "sim", (step,))


__all__ = ["FABRIC_KINDS", "GANG_MOVES", "gang_plan"]
