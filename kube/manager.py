"""Kubernetes as a resource-manager backend: ``--resource-manager kubernetes``.

Every change goes through the API server's own mechanisms, each write sent with
``?dryRun=All`` first (:mod:`.api`). Checking, the repeat rule and the action states are the
contract's (:class:`~toposcope.rm.base.BaseResourceManager`). What each action does:

* ``migrate`` (defragmentation) evicts the pod through the Eviction API (``policy/v1``), so
  PodDisruptionBudgets hold: a budget that allows no disruption now is a retry-later refusal
  (429), several matching budgets a refusal. Only pods the descheduler's default evictor
  would evict (:mod:`.evictable`) and that opted in are evicted, within the per-run, per-node
  and per-namespace limits (:mod:`.options`). Then the owner's pod template (a Deployment,
  through the pod's ReplicaSet, or a StatefulSet) is steered to the target node by narrowing
  its node affinity (:mod:`.undo`), recorded on the owner. The eviction is irreversible; the
  revert removes the steering. On a Deployment or StatefulSet the template change also rolls
  its other pods, which is why only opted-in workloads move.
* ``place`` a pending pod that carries the ``toposcope.io/placement`` scheduling gate: its
  node affinity is narrowed to the node (allowed while gated), then the gate is removed. The
  device plugin picks the device ids on the node (NVIDIA's is topology-aware); where the node
  publishes DRA ResourceSlices with locality attributes, the placement's detail
  (:meth:`KubernetesResourceManager.detail`, logged) names the ResourceClaim constraint that
  pins the set (:mod:`.devices`). Kubernetes does not let a gate be added back, so a
  placement cannot be undone.
* ``release`` idle GPUs of an owner that opted in (``toposcope.io/release-idle: "true"``):
  a Deployment or StatefulSet is scaled to zero (the revert scales it back to the recorded
  replicas); a Kubeflow Notebook gets ``kubeflow-resource-stopped`` (the revert removes it).
  A bare pod is never deleted.
* ``unplace`` (the advisor's revert) restores what the owner's ``toposcope.io/undo`` record
  says: the template's affinity, the replicas, the running notebook.
* a fabric placement of a pending multi-node job (the advisor's ``fabric-placement``,
  :meth:`KubernetesResourceManager.steer_fabric`): Kueue's topology annotation on the job's
  pod templates and its pending Workload, or node affinity to the chosen nodes for gated
  pods without Kueue (:mod:`.fabric_steer`).
* ``pin`` and ``migrate-memory`` are refused with the kubelet settings that do it: toposcope
  never rewrites a Guaranteed pod's cpuset, which the kubelet's CPU manager reconciles.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from typing import Any

from toposcope.errors import ConfigError
from toposcope.kube.annotations import KUBEFLOW_STOPPED, PLACEMENT_GATE, UNDO
from toposcope.kube.api import SCALABLE, KubeApi, client_from
from toposcope.kube.fabric_steer import FabricSteerPlanner
from toposcope.kube.kueue_pending import MAX_GPUS, gated_jobs, pending_jobs
from toposcope.kube.options import KubeLimits, kueue_levels_from, limits_from
from toposcope.kube.plans import KUBELET_ADVICE, STEERABLE, KubePlanner
from toposcope.kube.undo import SCALE, STEER, STOP, UndoRecord, record_of
from toposcope.kube.views import node_view, split_workload, workload_view
from toposcope.report.recommendation import Recommendation
from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    Allocation,
    BaseResourceManager,
    NodeView,
    ResourceManagerError,
    RetryLaterError,
    WorkloadState,
    WorkloadView,
)
from toposcope.rm.plan import Plan, PlanHints

LOG = logging.getLogger("toposcope.kube")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata", {})
    return meta


def _gpus(topology: dict[str, object]) -> int:
    value = topology.get("gpus", 0)
    return value if isinstance(value, int) else 0


class KubernetesResourceManager(BaseResourceManager):
    """The resource-manager contract over one cluster's API server (module docstring).

    ``api`` is ``None`` when no API server could be configured (``why`` says why): such a
    backend only plans (``--dry-run``), from the action and the report alone.
    """

    def __init__(
        self,
        api: KubeApi | None,
        limits: KubeLimits | None = None,
        why: str = "",
        kueue_levels: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self._api = api
        self.limits = limits or KubeLimits()
        self.planner = KubePlanner(api, why)
        self.fabric_planner = FabricSteerPlanner(api, why, kueue_levels)
        self._ids = itertools.count(1)
        self._evicted: Counter[str] = Counter()

    @property
    def api(self) -> KubeApi:
        """The API server (a 503 refusal where none is configured)."""
        if self._api is None:
            raise ResourceManagerError(f"Kubernetes cannot be asked: {self.planner.why}", 503)
        return self._api

    def nodes(self) -> list[NodeView]:
        """Every node, with its labels and allocatable GPUs."""
        return [v for v in map(node_view, self.api.nodes()) if v is not None]

    def workloads(self) -> list[WorkloadView]:
        """Every pod: running ones on their node, pending ones with their GPU request; each
        pending multi-node job of Kueue, which has no pods yet, and each multi-node job whose
        pods wait behind the placement gate, as one (:mod:`.kueue_pending`).
        """
        listed = self.api.pods()
        pods = [v for v in map(workload_view, listed) if v is not None]
        try:
            kueue = self.api.fabric_objects("Workload", "*")
        except ResourceManagerError as exc:
            LOG.warning("Kueue Workloads not read: %s", exc)
            kueue = []
        gated = any(
            g.get("name") == PLACEMENT_GATE
            for p in listed
            for g in p.get("spec", {}).get("schedulingGates") or []
        )
        if not kueue and not gated:
            return pods
        largest = max((_gpus(n.topology) for n in self.nodes()), default=0)
        jobs = gated_jobs(listed, largest)
        grouped = {pod for _, members in jobs.values() for pod in members}
        together = [
            WorkloadView(
                name, "kubernetes", WorkloadState.PENDING, None, gpus_requested=min(gpus, MAX_GPUS)
            )
            for name, (gpus, _) in sorted(jobs.items())
        ]
        alone = [v for v in pods if v.name not in grouped]
        return alone + together + pending_jobs(kueue, largest)

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """What :meth:`apply` would do now (see :mod:`~toposcope.kube.plans`)."""
        return self.planner.plan(request, hints)

    def plan_fabric(self, recommendation: Recommendation) -> Plan:
        """What :meth:`steer_fabric` would do now for a fabric-placement recommendation
        (:mod:`~toposcope.kube.fabric_steer`); a refusal is the plan's ``refused``.
        """
        return self.fabric_planner.plan(recommendation)

    def steer_fabric(self, recommendation: Recommendation) -> ActionState:
        """Apply a fabric-placement recommendation: its plan against the API server now,
        each request sent as planned (dry run first). A refusal is a
        :class:`ResourceManagerError`; the change cannot be undone by toposcope (Kueue may
        have admitted the job, the scheduler bound the pods).
        """
        plan = self.fabric_planner.plan(recommendation)
        if plan.refused:
            raise ResourceManagerError(plan.refused, 409, "workload")
        self._execute(plan)
        note = "; ".join(plan.notes)
        return self._state(plan.request, irreversible=True, note=note)

    def _state(self, request: ActionRequest, **kwargs: Any) -> ActionState:
        action_id = f"kube-{next(self._ids):06d}"
        return ActionState(action_id, request, ActionStatus.SUCCEEDED, **kwargs)

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Plan one checked, new request against the API server now, then send exactly the
        plan's requests (see the module docstring for each kind).
        """
        kind = ActionKind(request.kind)
        if kind in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            raise ResourceManagerError(f"{kind.value} is refused: {KUBELET_ADVICE}", 400, "kind")
        namespace, name = split_workload(request.workload)
        plan = self.planner.checked_plan(request, namespace, name)
        target = request.node or ""
        if kind is ActionKind.MIGRATE:
            node = str(self.api.pod(namespace, name).get("spec", {}).get("nodeName") or "")
            self._check_limits(namespace, node)
            self._execute(plan)
            for key in ("", f"node:{node}", f"namespace:{namespace}"):
                self._evicted[key] += 1
            return self._state(
                request, before=Allocation(node), after=Allocation(target), irreversible=True
            )
        if kind is ActionKind.PLACE:
            self._execute(plan)
            note = "; ".join(plan.notes)
            LOG.info("pod %s: %s", request.workload, note)
            return self._state(
                request, before=None, after=Allocation(target), irreversible=True, note=note
            )
        node = str(self.api.pod(namespace, name).get("spec", {}).get("nodeName") or "")
        self._execute(plan)
        before = Allocation(node) if node else None
        return self._state(request, before=before, after=None, irreversible=False)

    def _execute(self, plan: Plan) -> None:
        for step in plan.steps:
            self.api.execute(step)

    def _check_limits(self, namespace: str, node: str) -> None:
        limits = self.limits
        for key, most, what in (
            ("", limits.evictions, "this run"),
            (f"node:{node}", limits.per_node, f"node {node}"),
            (f"namespace:{namespace}", limits.per_namespace, f"namespace {namespace}"),
        ):
            if self._evicted[key] >= most:
                raise RetryLaterError(
                    f"migrate refused: {most} eviction(s) at most for {what} "
                    "(--kube-max-evictions*); a later run may move it",
                    "workload",
                )

    def _unplace(self, request: ActionRequest) -> ActionState:
        """Undo what an owner's record says toposcope did for the workload (module doc)."""
        namespace, _ = split_workload(request.workload)
        for kind in (*STEERABLE, "Notebook"):
            for owner in self.api.owners(kind, namespace):
                record = record_of(owner)
                if record is not None and record.workload == request.workload:
                    self._undo(kind, owner, record)
                    return self._state(request, irreversible=False)
        raise ResourceManagerError(
            f"nothing of toposcope's is recorded for {request.workload}: a placement cannot be "
            "undone on Kubernetes (a scheduling gate cannot be added back; delete the pod to "
            "let it be scheduled anew)",
            409,
            "workload",
        )

    def _undo(self, kind: str, owner: dict[str, Any], record: UndoRecord) -> None:
        namespace, name = _meta(owner).get("namespace", ""), str(_meta(owner).get("name"))
        body: dict[str, Any] = {
            "metadata": {
                "resourceVersion": _meta(owner).get("resourceVersion"),
                "annotations": {UNDO: None},
            }
        }
        if record.action == STEER:
            body["spec"] = {"template": {"spec": {"affinity": record.affinity}}}
        if record.action == STOP:
            body["metadata"]["annotations"][KUBEFLOW_STOPPED] = None
        if record.action == SCALE and kind in SCALABLE:
            self.api.scale(kind, namespace, name, record.replicas or 0)
            owner = self.api.owner(kind, namespace, name)
            body["metadata"]["resourceVersion"] = _meta(owner).get("resourceVersion")
        self.api.patch(kind, namespace, name, body)


def kubernetes_resource_manager(**options: object) -> KubernetesResourceManager:
    """The backend the ``--kubeconfig``/``--kube-*`` options describe (the entry point the
    advisor loads); the API server is not asked yet. With ``plan_only`` (``--dry-run``), a
    configuration that cannot be loaded gives a backend that plans offline.
    """
    kubeconfig = options.get("kubernetes_kubeconfig")
    context = options.get("kubernetes_context")
    timeout = options.get("kubernetes_timeout") or 30.0
    try:
        client = client_from(
            str(kubeconfig) if kubeconfig else None,
            str(context) if context else None,
            float(timeout) if isinstance(timeout, int | float) else 30.0,
        )
    except ConfigError as exc:
        if not options.get("plan_only"):
            raise
        return KubernetesResourceManager(
            None, limits_from(dict(options)), str(exc), kueue_levels_from(dict(options))
        )
    return KubernetesResourceManager(
        KubeApi(client), limits_from(dict(options)), kueue_levels=kueue_levels_from(dict(options))
    )
