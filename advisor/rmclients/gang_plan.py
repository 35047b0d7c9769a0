"""The ``sim`` backend's plan for a fabric-placement move of a running multi-node job.

A ``migrate-job`` recommendation of ``fabric-placement`` names the job and the nodes of the
tighter cell (``proposed["nodes"]``); the contract's action names one node, so the
simulator takes the whole move on its own route, ``POST {url}/gang-moves``
(:mod:`toposcope.sim.gang_api`): every part onto one of the nodes, at once, paying the
gang's checkpoint-restore once. The plan is that one request; its ``request`` (a
``migrate`` of the job to the first node, request id ``<rec id>-0``) is what the audit log
records. Names are checked before they reach a body: a job or node name the contract would
refuse, or a recommendation without nodes, is a refusal.

A recommendation that moves parts onto other GPUs of their own nodes (nic-affinity's move of
NIC-far ranks) names each part's place in ``proposed["places"]``, one per node in the order
of ``nodes`` (``gpus``, ``cpus`` as a CPU list, ``mems``; ``null`` for a part left as it
is); the body carries them as the route's ``places``, each checked as numbers first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toposcope.cpulist import parse_cpulist
from toposcope.identity.names import is_node_name
from toposcope.report.recommendation import Recommendation, RecommendationKind
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
from toposcope.rm.plan import HttpStep, Plan, refused
from toposcope.rm.validation import check_request

#: the fabric-placement recommendation kinds the simulator carries out whole
FABRIC_KINDS = (RecommendationKind.MIGRATE_JOB,)
#: the simulator's route for a whole-gang move, under ``/api/v1``
GANG_MOVES = "/gang-moves"
#: the policies whose moves without contract actions the simulator carries out whole:
#: running multi-node jobs' moves, and job-migration's exchange of two jobs' GPUs
GANG_POLICIES = ("fabric-placement", "nic-affinity", "job-migration")
#: the largest GPU, CPU or NUMA index a place may name
_MAX_INDEX = 65_535


def _indexes(value: object, what: str) -> list[int]:
    """A list of small non-negative integers, or :class:`ValueError` naming ``what``."""
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= _MAX_INDEX for i in value
    ):
        raise ValueError(f"{what} is not a list of indexes")
    return list(value)


def places_of(
    proposed: Mapping[str, Any], nodes: Sequence[str]
) -> list[dict[str, list[int]] | None]:
    """The body's ``places`` from ``proposed["places"]`` (empty when it names none);
    :class:`ValueError` when one is malformed or they do not follow ``nodes``.
    """
    given = proposed.get("places")
    if not given:
        return []
    if not isinstance(given, list) or len(given) != len(nodes):
        raise ValueError(f"places must be one per node ({len(nodes)})")
    out: list[dict[str, list[int]] | None] = []
    for node, place in zip(nodes, given, strict=True):
        if place is None:
            out.append(None)
            continue
        if not isinstance(place, dict) or place.get("node") != node:
            raise ValueError(f"the place for {node} does not name it")
        cpus = place.get("cpus", "")
        if not isinstance(cpus, str):
            raise ValueError(f"the CPUs for {node} are not a CPU list")
        try:
            cpu_list = list(parse_cpulist(cpus)) if cpus else []
        except ValueError as exc:
            raise ValueError(f"the CPUs for {node}: {exc}") from None
        gpus = _indexes(place.get("gpus"), f"the GPUs for {node}")
        if not gpus:
            raise ValueError(f"the place for {node} names no GPU")
        mems = _indexes(place.get("mems", []), f"the memory nodes for {node}")
        out.append({"gpus": gpus, "cpus": cpu_list, "mems": mems})
    return out


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
    try:
        places = places_of(rec.proposed, nodes)
    except ValueError as exc:
        return refused(request, "sim", f"job {job[:80]!r}: {exc}")
    body: dict[str, Any] = {
        "request_id": request.request_id,
        "job": job,
        "nodes": nodes,
        "reason": request.reason,
    }
    what = f"move every part of {job} onto {','.join(nodes)} at once"
    if places:
        body["places"] = places
        gpus = "; ".join(f"{n} GPUs {p['gpus']}" for n, p in zip(nodes, places, strict=True) if p)
        what = f"move the parts of {job} at once: {gpus}"
    step = HttpStep("POST", f"{url}{GANG_MOVES}", body, what=what)
    return Plan(request, "sim", (step,))


__all__ = ["FABRIC_KINDS", "GANG_MOVES", "GANG_POLICIES", "gang_plan", "places_of"]
