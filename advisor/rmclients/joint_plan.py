"""The ``sim`` backend's plan for a joint re-placement of running jobs (fabric-placement's
swap of multi-node jobs between cells, :mod:`toposcope.advisor.policies.fabric_swaps`).

The recommendation's ``proposed["jobs"]`` names every job, each part's node and GPUs (and,
for a part pinned next to its new GPUs, its CPUs and memory nodes there); the
plan is one ``POST {url}/gang-moves`` with the simulator's multi-job body
(:class:`toposcope.sim.gang_swaps.JointMove`), which the simulator carries out at once or
refuses whole. Its ``request`` (a ``migrate`` of the first job to its first node, request id
``<rec id>-0``) is what the audit log records; the step's text lists every part's move, so
that ``advise --dry-run`` prints what apply sends. Every name and index is checked before it
reaches the body: a malformed recommendation is a refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toposcope.identity.names import is_node_name
from toposcope.report.recommendation import Recommendation, RecommendationKind
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
from toposcope.rm.plan import HttpStep, Plan, refused
from toposcope.rm.validation import check_request

#: the simulator's route for moves of whole jobs, under ``/api/v1``
GANG_MOVES = "/gang-moves"
#: the largest GPU index a part may name
_MAX_GPU = 1023
#: the largest CPU or NUMA node index a part may name
_MAX_INDEX = 65_535
#: the most jobs one joint move may name (the simulator's own bound)
MAX_JOBS = 256


def is_joint(rec: Recommendation) -> bool:
    """Whether ``rec`` is a joint move of several jobs (``proposed["joint"]``)."""
    return rec.kind == RecommendationKind.MIGRATE_JOB and rec.proposed.get("joint") is True


def joint_jobs(rec: Recommendation) -> list[dict[str, Any]]:
    """The checked jobs of the body: ``[{job, parts: [{part, node, gpus}]}]``;
    :class:`ValueError` saying what is malformed.
    """
    given = rec.proposed.get("jobs")
    if not isinstance(given, list) or not 0 < len(given) <= MAX_JOBS:
        raise ValueError(f"proposed jobs are not a list of 1 to {MAX_JOBS} jobs")
    jobs: list[dict[str, Any]] = []
    for entry in given:
        if not isinstance(entry, Mapping):
            raise ValueError("a proposed job is not an object")
        job = _name(entry.get("job"), "job")
        parts = entry.get("parts")
        if not isinstance(parts, list) or not parts:
            raise ValueError(f"job {job[:80]!r} lists no parts")
        jobs.append({"job": job, "parts": [_part(job, p) for p in parts]})
    return jobs


def _name(value: object, what: str) -> str:
    """A workload name the contract accepts, else :class:`ValueError`."""
    if not isinstance(value, str):
        raise ValueError(f"a {what} name is not text")
    try:
        check_request(ActionRequest("check", ActionKind.MIGRATE, value, "node"))
    except ResourceManagerError as exc:
        raise ValueError(f"{what} {value[:80]!r}: {exc}") from None
    return value


def _part(job: str, value: object) -> dict[str, Any]:
    """One part's place, checked."""
    if not isinstance(value, Mapping):
        raise ValueError(f"a part of {job[:80]!r} is not an object")
    part = _name(value.get("part"), "part")
    node = value.get("node")
    if not isinstance(node, str) or not is_node_name(node):
        raise ValueError(f"part {part[:80]!r} has no valid node")
    gpus = value.get("gpus")
    if (
        not isinstance(gpus, list)
        or not gpus
        or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus)
        or not all(0 <= g <= _MAX_GPU for g in gpus)
    ):
        raise ValueError(f"part {part[:80]!r} has no valid GPU list")
    place: dict[str, Any] = {"part": part, "node": node, "gpus": list(gpus)}
    for name in ("cpus", "mems"):  # a part pinned next to its new GPUs names both
        listed = value.get(name)
        if listed is None or listed == []:
            continue
        if not isinstance(listed, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= _MAX_INDEX for i in listed
        ):
            raise ValueError(f"part {part[:80]!r} has no valid {name} list")
        place[name] = list(listed)
    return place


def joint_plan(rec: Recommendation, url: str) -> Plan:
    """``POST {url}/gang-moves`` moving every job of ``rec`` at once, or a refusal saying why
    not (see the module docstring).
    """
    first_job = ""
    first_node = None
    listed = rec.proposed.get("jobs")
    if isinstance(listed, list) and listed and isinstance(listed[0], Mapping):
        first_job = str(listed[0].get("job") or "")
        parts = listed[0].get("parts")
        if isinstance(parts, list) and parts and isinstance(parts[0], Mapping):
            node = parts[0].get("node")
            first_node = node if isinstance(node, str) and is_node_name(node) else None
    request = ActionRequest(
        f"{rec.id}-0",
        ActionKind.MIGRATE,
        first_job or rec.target.workload or "",
        first_node,
        reason=rec.summary[:1000],
    )
    if not is_joint(rec):
        return refused(request, "sim", f"{rec.id} is not a joint move of several jobs")
    try:
        jobs = joint_jobs(rec)
    except ValueError as exc:
        return refused(request, "sim", str(exc))
    body = {"request_id": request.request_id, "jobs": jobs, "reason": request.reason}
    moves = "; ".join(
        f"{j['job']}: "
        + ", ".join(f"{p['part']} to {p['node']} GPUs {p['gpus']}" for p in j["parts"])
        for j in jobs
    )
    step = HttpStep("POST", f"{url}{GANG_MOVES}", body, what=f"move at once: {moves}")
    return Plan(request, "sim", (step,))


__all__ = ["GANG_MOVES", "MAX_JOBS", "is_joint", "joint_jobs", "joint_plan"]
