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
* ``pin`` and ``migrate-memory`` are refused with the kubelet settings that do it: toposcope
  never rewrites a Guaranteed pod's cpuset, which the kubelet's CPU manager reconciles.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from toposcope.kube.annotations import KUBEFLOW_STOPPED, PLACEMENT_GATE, RELEASE_IDLE, UNDO, truthy
from toposcope.kube.api import SCALABLE, KubeApi, client_from
from toposcope.kube.devices import placement_detail
from toposcope.kube.evictable import migration_blockers, owner_references
from toposcope.kube.options import KubeLimits, limits_from
from toposcope.kube.undo import SCALE, STEER, STOP, UndoRecord, narrowed, record_of
from toposcope.kube.views import gpus_requested, node_view, split_workload, workload_view
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
    WorkloadView,
)

LOG = logging.getLogger("toposcope.kube")

#: why pins are refused, and the kubelet settings that pin instead
KUBELET_ADVICE = (
    "toposcope never rewrites a pod's cpuset on Kubernetes (the kubelet's CPU manager "
    "reconciles it). Give the pod Guaranteed QoS with whole CPUs and set the kubelet's "
    "cpuManagerPolicy: static, memoryManagerPolicy: Static and topologyManagerPolicy: "
    "single-numa-node (or restricted), so that the kubelet puts its CPUs, memory and GPUs on "
    "one NUMA node (it rejects the pod with TopologyAffinityError when it cannot)"
)
#: owner kinds whose pod template toposcope steers
STEERABLE = ("Deployment", "StatefulSet")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata", {})
    return meta


class KubernetesResourceManager(BaseResourceManager):
    """The resource-manager contract over one cluster's API server (module docstring)."""

    def __init__(self, api: KubeApi, limits: KubeLimits | None = None) -> None:
        super().__init__()
        self.api = api
        self.limits = limits or KubeLimits()
        self._ids = itertools.count(1)
        self._evicted: Counter[str] = Counter()

    def nodes(self) -> list[NodeView]:
        """Every node, with its labels and allocatable GPUs."""
        return [v for v in map(node_view, self.api.nodes()) if v is not None]

    def workloads(self) -> list[WorkloadView]:
        """Every pod: running ones on their node, pending ones with their GPU request."""
        return [v for v in map(workload_view, self.api.pods()) if v is not None]

    def _state(self, request: ActionRequest, **kwargs: Any) -> ActionState:
        action_id = f"kube-{next(self._ids):06d}"
        return ActionState(action_id, request, ActionStatus.SUCCEEDED, **kwargs)

    def _carry_out(self, request: ActionRequest) -> ActionState:
        """Do one checked, new request (see the module docstring for each kind)."""
        kind = ActionKind(request.kind)
        if kind in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            raise ResourceManagerError(f"{kind.value} is refused: {KUBELET_ADVICE}", 400, "kind")
        namespace, name = split_workload(request.workload)
        if kind is ActionKind.PLACE:
            return self._place(request, namespace, name)
        if kind is ActionKind.MIGRATE:
            return self._migrate(request, namespace, name)
        return self._release(request, namespace, name)

    # -- owners ----------------------------------------------------------------------------

    def _controller(self, obj: dict[str, Any], namespace: str) -> tuple[str, dict[str, Any]]:
        """The kind and object of the controller owning ``obj`` (a ReplicaSet's Deployment)."""
        refs = [r for r in owner_references(obj) if r.get("controller")] or owner_references(obj)
        if not refs:
            return "", {}
        kind, name = str(refs[0].get("kind", "")), str(refs[0].get("name", ""))
        if kind not in ("ReplicaSet", *STEERABLE, "Notebook"):
            return kind, {}
        owner = self.api.owner(kind, namespace, name)
        if kind == "ReplicaSet":
            above, found = self._controller(owner, namespace)
            return (above, found) if found else (kind, {})
        return kind, owner

    def _check_unrecorded(self, kind: str, owner: dict[str, Any]) -> None:
        record = record_of(owner)
        if record is not None:
            raise ResourceManagerError(
                f"{kind} {_meta(owner).get('name')} still carries toposcope's change "
                f"{record.request_id} ({record.action} for {record.workload}); revert it first",
                409,
                "workload",
            )

    # -- migrate ----------------------------------------------------------------------------

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

    def _migrate(self, request: ActionRequest, namespace: str, name: str) -> ActionState:
        pod = self.api.pod(namespace, name)
        node = str(pod.get("spec", {}).get("nodeName") or "")
        target = request.node or ""
        if pod.get("status", {}).get("phase") != "Running" or not node:
            raise ResourceManagerError(f"pod {request.workload} is not running", 409, "workload")
        if node == target:
            raise ResourceManagerError(f"pod {request.workload} runs on {target}", 409, "node")
        blockers = migration_blockers(pod)
        if blockers:
            raise ResourceManagerError(
                f"pod {request.workload} is not evicted: {'; '.join(blockers)}", 409, "workload"
            )
        kind, owner = self._controller(pod, namespace)
        if kind not in STEERABLE or not owner:
            raise ResourceManagerError(
                f"pod {request.workload} is owned by {kind or 'nothing'}: toposcope steers only "
                f"{' and '.join(STEERABLE)} pods",
                409,
                "workload",
            )
        self._check_unrecorded(kind, owner)
        self._check_limits(namespace, node)
        template_spec = owner.get("spec", {}).get("template", {}).get("spec", {})
        record = UndoRecord(
            request.request_id, request.workload, STEER, target, template_spec.get("affinity")
        )
        self.api.evict(namespace, name)
        for key in ("", f"node:{node}", f"namespace:{namespace}"):
            self._evicted[key] += 1
        self.api.patch(
            kind,
            namespace,
            str(_meta(owner).get("name")),
            {
                "metadata": {
                    "resourceVersion": _meta(owner).get("resourceVersion"),
                    "annotations": {UNDO: record.to_annotation()},
                },
                "spec": {"template": {"spec": {"affinity": narrowed(record.affinity, target)}}},
            },
        )
        return self._state(
            request, before=Allocation(node), after=Allocation(target), irreversible=True
        )

    # -- place ------------------------------------------------------------------------------

    def _place(self, request: ActionRequest, namespace: str, name: str) -> ActionState:
        pod = self.api.pod(namespace, name)
        spec = pod.get("spec", {})
        gates = [g.get("name") for g in spec.get("schedulingGates") or []]
        if PLACEMENT_GATE not in gates:
            raise ResourceManagerError(
                f"pod {request.workload} has no {PLACEMENT_GATE} scheduling gate: it did not opt "
                "in to placement, or it was placed already",
                409,
                "workload",
            )
        target = request.node or ""
        if target not in {v.name for v in self.nodes()}:
            raise ResourceManagerError(f"unknown node {target!r}", 404, "node")
        detail = placement_detail(self._slices(target), target, gpus_requested(pod))
        version = _meta(pod).get("resourceVersion")
        self.api.patch(
            "Pod",
            namespace,
            name,
            {
                "metadata": {"resourceVersion": version},
                "spec": {"affinity": narrowed(spec.get("affinity"), target)},
            },
        )
        fresh = self.api.pod(namespace, name)
        left = [
            g
            for g in fresh.get("spec", {}).get("schedulingGates") or []
            if g.get("name") != PLACEMENT_GATE
        ]
        self.api.patch(
            "Pod",
            namespace,
            name,
            {
                "metadata": {"resourceVersion": _meta(fresh).get("resourceVersion")},
                "spec": {"schedulingGates": left},
            },
        )
        LOG.info("pod %s: %s", request.workload, detail)
        return self._state(
            request, before=None, after=Allocation(target), irreversible=True, note=detail
        )

    def _slices(self, node: str) -> list[dict[str, Any]]:
        """``node``'s DRA ResourceSlices; none when they cannot be read (said in the log)."""
        try:
            return self.api.resource_slices(node)
        except ResourceManagerError as exc:
            LOG.warning("no DRA advice for node %s: %s", node, exc)
            return []

    # -- release and unplace ----------------------------------------------------------------

    def _release(self, request: ActionRequest, namespace: str, name: str) -> ActionState:
        pod = self.api.pod(namespace, name)
        node = str(pod.get("spec", {}).get("nodeName") or "")
        kind, owner = self._controller(pod, namespace)
        if kind == "StatefulSet" and owner:
            above, notebook = self._controller(owner, namespace)
            if above == "Notebook" and notebook:
                kind, owner = above, notebook
        if not owner:
            raise ResourceManagerError(
                f"pod {request.workload} has no Deployment, StatefulSet or Notebook owner: "
                "toposcope never deletes a bare pod",
                409,
                "workload",
            )
        owner_name = str(_meta(owner).get("name"))
        if not truthy((_meta(owner).get("annotations") or {}).get(RELEASE_IDLE)):
            raise ResourceManagerError(
                f'{kind} {owner_name} did not opt in ({RELEASE_IDLE}: "true")', 409, "workload"
            )
        self._check_unrecorded(kind, owner)
        version = _meta(owner).get("resourceVersion")
        before = Allocation(node) if node else None
        if kind == "Notebook":
            record = UndoRecord(request.request_id, request.workload, STOP, node)
            stopped = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            annotations = {UNDO: record.to_annotation(), KUBEFLOW_STOPPED: stopped}
            self.api.patch(
                kind,
                namespace,
                owner_name,
                {"metadata": {"resourceVersion": version, "annotations": annotations}},
            )
            return self._state(request, before=before, after=None, irreversible=False)
        replicas = int(owner.get("spec", {}).get("replicas", 1) or 0)
        record = UndoRecord(request.request_id, request.workload, SCALE, node, replicas=replicas)
        annotations = {UNDO: record.to_annotation()}
        self.api.patch(
            kind,
            namespace,
            owner_name,
            {"metadata": {"resourceVersion": version, "annotations": annotations}},
        )
        self.api.scale(kind, namespace, owner_name, 0)
        return self._state(request, before=before, after=None, irreversible=False)

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
    advisor loads); the API server is not asked yet.
    """
    kubeconfig = options.get("kubernetes_kubeconfig")
    context = options.get("kubernetes_context")
    timeout = options.get("kubernetes_timeout") or 30.0
    client = client_from(
        str(kubeconfig) if kubeconfig else None,
        str(context) if context else None,
        float(timeout) if isinstance(timeout, int | float) else 30.0,
    )
    return KubernetesResourceManager(KubeApi(client), limits_from(dict(options)))
