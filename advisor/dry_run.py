"""``toposcope advise --dry-run``: the plans of a report, as one shell script.

Every backend makes the plan it would carry out (:mod:`toposcope.rm.plan`): the resource-
manager API (``sim``, ``agent``, ``dry-run``) and ``systemd`` here
(:mod:`~toposcope.advisor.rmclients.plans`), ``slurm`` and ``kubernetes`` in their own parts,
loaded by name and told to plan only, so that a dry run works from the report alone when the
cluster cannot be reached (each plan then says, as a comment, what it could not check). The
script (:func:`render_dry_run`) names each recommendation, then its actions' plans
(:func:`toposcope.rm.plan_script.plan_lines`); a fabric placement of a multi-node job (no
action: it names several nodes) is planned whole by a backend that can
(:class:`FabricPlanner`: Kubernetes' Kueue annotations or gated pods' affinity); a
nic-affinity ``config`` is printed in the backend's terms, never applied (:func:`nic_lines`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol, runtime_checkable

from toposcope.advisor.model import ClusterModel
from toposcope.advisor.nic_advice import AdviceError, config_lines
from toposcope.advisor.rmclients import backend_names, make_resource_manager
from toposcope.advisor.rmclients.gang_plan import GANG_POLICIES
from toposcope.advisor.rmclients.plans import AGENT_URL, SIM_URL, ApiPlanner, SystemdPlanner
from toposcope.errors import UsageError
from toposcope.report.recommendation import Recommendation, RecommendationKind, Report
from toposcope.rm import ActionRequest, ResourceManagerError
from toposcope.rm.plan import AGENT_KINDS, Plan, PlanHints, Planner, WorkloadHints, refused
from toposcope.rm.plan_script import comment, plan_lines

#: backends that only print plans (``--dry-run``); they apply nothing themselves
PRINT_ONLY = ("systemd",)
#: backends without a plan: one host's changes are system calls, not commands
NO_PLAN = ("local",)


def dry_run_backends() -> tuple[str, ...]:
    """Every backend ``--dry-run`` can print the plans of."""
    return (*(n for n in backend_names() if n not in NO_PLAN), *PRINT_ONLY)


def planner_for(backend: str, rm_url: str | None, options: Mapping[str, object]) -> Planner:
    """The planner of ``backend``; ``options`` are a registered backend's (``--slurm-*``).

    Nothing is asked of the cluster here: a registered backend is built with ``plan_only``.
    """
    if backend in ("dry-run", "agent"):
        return ApiPlanner(rm_url or AGENT_URL, backend, AGENT_KINDS)
    if backend == "sim":
        return ApiPlanner(rm_url or SIM_URL, backend, None)
    if backend == "systemd":
        return SystemdPlanner()
    if backend not in dry_run_backends():
        raise UsageError(
            f"--dry-run has no plan for --resource-manager {backend} "
            f"(it has for {', '.join(dry_run_backends())})"
        )
    manager = make_resource_manager(backend, options={**options, "plan_only": True})
    if not isinstance(manager, Planner):
        raise UsageError(f"--resource-manager {backend} cannot say what it would do (--dry-run)")
    return manager


class GuardedPlanner:
    """A planner whose refusals raised while planning (a node the agent allow-list does not
    name) become the plan's refusal, so that one action cannot stop the script.
    """

    def __init__(self, inner: Planner, backend: str) -> None:
        self.inner = inner
        self.backend = backend

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """The inner planner's plan, or the refusal it raised."""
        try:
            return self.inner.plan(request, hints)
        except ResourceManagerError as exc:
            return refused(request, self.backend, str(exc))


@runtime_checkable
class FabricPlanner(Protocol):
    """A backend that plans a fabric placement of a pending multi-node job (a
    ``fabric-placement`` recommendation without actions: it names several nodes).
    """

    def plan_fabric(self, recommendation: Recommendation) -> Plan:
        """The plan; a refusal is its ``refused`` (never raised)."""
        ...


def _fabric_placement(rec: Recommendation, planner: object) -> bool:
    """A fabric placement the planner plans whole: a ``place``, or its own ``fabric_kinds``
    (the simulator's gang moves, of fabric-placement or nic-affinity).
    """
    kinds = getattr(planner, "fabric_kinds", (RecommendationKind.PLACE,))
    policies = getattr(planner, "gang_policies", GANG_POLICIES[:1])
    return rec.policy in policies and rec.kind in kinds


def nic_lines(rec: Recommendation, backend: str) -> list[str]:
    """A nic-affinity recommendation's environment in ``backend``'s terms (a ``config``:
    printed, never applied); a report whose names fail their check gets a comment instead.
    """
    try:
        return config_lines(rec.proposed, backend)
    except (AdviceError, KeyError) as exc:
        return [comment(f"nic-affinity advice not printed: {exc}")]


def hints_from(model: ClusterModel) -> PlanHints:
    """What the metrics say about each workload (pod, namespace, container, cgroup)."""
    return PlanHints(
        {w.key: WorkloadHints(w.namespace, w.pod, w.container, w.cgroup) for w in model.workloads}
    )


def render_dry_run(report: Report, backend: str, planner: Planner, hints: PlanHints) -> str:
    """The script applying ``report`` through ``backend``: for each recommendation (by gain)
    a comment naming it, then the plan of each of its actions.
    """
    count = len(report.recommendations)
    lines = [
        "#!/bin/sh",
        comment(
            f"toposcope advise --dry-run: {count} recommendation(s) for "
            f"--resource-manager {backend}; review before running"
        ),
        "set -eu",
    ]
    for rec in report.by_gain():
        lines += ["", comment(f"{rec.id}: {rec.summary}")]
        if (
            not rec.actions
            and isinstance(planner, FabricPlanner)
            and _fabric_placement(rec, planner)
        ):
            lines += plan_lines(planner.plan_fabric(rec))
        elif (
            not rec.actions
            and rec.policy == "nic-affinity"
            and rec.kind == RecommendationKind.CONFIG
        ):
            lines += nic_lines(rec, backend)
        elif not rec.actions:
            lines.append(comment("advice for a person: no action to run"))
        for action in rec.actions:
            request = action if action.node else replace(action, node=rec.target.node)
            lines += plan_lines(planner.plan(request, hints))
    return "\n".join(lines) + "\n"


__all__ = [
    "NO_PLAN",
    "PRINT_ONLY",
    "FabricPlanner",
    "GuardedPlanner",
    "dry_run_backends",
    "hints_from",
    "nic_lines",
    "planner_for",
    "render_dry_run",
]
