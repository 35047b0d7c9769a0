"""What the Kubernetes backend will do for an action: its plan (:mod:`toposcope.rm.plan`).

:class:`KubePlanner` reads the pod and its owner, checks the action against them (the pod
opted in, its owner is one toposcope steers, nothing of toposcope's is still recorded on it)
and lists the API requests the backend (:mod:`~toposcope.kube.manager`) will send, in order:
merge patches of the pod or its owner, an eviction, a patch of the owner's ``scale``. The
backend sends exactly these (each ``?dryRun=All`` first: :mod:`~toposcope.kube.api`);
``advise --dry-run --resource-manager kubernetes`` prints them as ``kubectl`` lines.

Without an API server (no kubeconfig, or none reachable) the plan is made from the action and
the report alone, and says what it could not read. A pin is always refused: the kubelet owns
a pod's cpuset; the plan's notes carry the kubelet settings and the pod spec change that give
the pod its CPUs next to its GPUs.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from toposcope.kube.annotations import KUBEFLOW_STOPPED, PLACEMENT_GATE, RELEASE_IDLE, UNDO, truthy
from toposcope.kube.api import KubeApi
from toposcope.kube.devices import placement_detail
from toposcope.kube.evictable import migration_blockers, owner_references
from toposcope.kube.paths import eviction_step, json_patch_step, patch_step, scale_step
from toposcope.kube.undo import SCALE, STEER, STOP, UndoRecord, narrowed, record_of
from toposcope.kube.views import gpus_requested, node_view, split_workload
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
from toposcope.rm.plan import Plan, PlanHints, Step, refused

#: why pins are refused, and the kubelet settings that pin instead
KUBELET_ADVICE = (
    "toposcope never rewrites a pod's cpuset on Kubernetes (the kubelet's CPU manager "
    "reconciles it). Give the pod Guaranteed QoS with whole CPUs and set the kubelet's "
    "cpuManagerPolicy: static, memoryManagerPolicy: Static and topologyManagerPolicy: "
    "single-numa-node (or restricted), so that the kubelet puts its CPUs, memory and GPUs on "
    "one NUMA node (it rejects the pod with TopologyAffinityError when it cannot)"
)
#: the kubelet configuration (KubeletConfiguration fields) that pins a Guaranteed pod
KUBELET_SETTINGS = {
    "cpuManagerPolicy": "static",
    "memoryManagerPolicy": "Static",
    "topologyManagerPolicy": "single-numa-node",
}
#: owner kinds whose pod template toposcope steers
STEERABLE = ("Deployment", "StatefulSet")


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata", {})
    return meta


def pod_of(request: ActionRequest, hints: PlanHints | None) -> tuple[str, str]:
    """The pod's ``(namespace, name)``: the workload's own ``namespace/pod`` name, else the
    pod the report's metrics name for it (400 when neither is a valid pod name).
    """
    hint = (hints or PlanHints()).of(request)
    if "/" not in request.workload and hint.namespace and hint.pod:
        return split_workload(f"{hint.namespace}/{hint.pod}")
    return split_workload(request.workload)


def guaranteed_patch(cpus: int, container: str) -> dict[str, Any]:
    """The merge patch of an owner's pod template giving ``container`` ``cpus`` whole CPUs
    with requests equal to limits (memory too must have them equal for Guaranteed QoS).
    """
    resources = {"requests": {"cpu": str(cpus)}, "limits": {"cpu": str(cpus)}}
    containers = [{"name": container, "resources": resources}]
    return {"spec": {"template": {"spec": {"containers": containers}}}}


def pin_notes(request: ActionRequest, namespace: str, pod: str, container: str) -> tuple[str, ...]:
    """The kubelet settings and, for a pin, the pod spec change (reviewed by a person) that
    pin the pod.
    """
    kubelet = (
        f"kubelet configuration of node {request.node}: "
        f"{json.dumps(KUBELET_SETTINGS, sort_keys=True)} (drain the node, remove "
        "/var/lib/kubelet/cpu_manager_state and memory_manager_state, restart the kubelet)"
    )
    if request.kind != ActionKind.PIN:
        return (kubelet,)
    change = guaranteed_patch(max(1, len(request.cpus)), container or "CONTAINER")
    return (
        kubelet,
        f"pod {namespace}/{pod}: Guaranteed QoS with whole CPUs: requests equal to limits "
        f"for cpu and memory in every container; merge patch of its owner's template: "
        f"{json.dumps(change, sort_keys=True)}",
    )


class KubePlanner:
    """Plans against one API server (``api``; ``None``: none configured, ``why`` says why)."""

    backend = "kubernetes"

    def __init__(self, api: KubeApi | None, why: str = "") -> None:
        self.api = api
        self.why = why or "no API server is configured"

    def plan(self, request: ActionRequest, hints: PlanHints | None = None) -> Plan:
        """The plan, a refusal as ``Plan.refused``; made offline without an API server."""
        try:
            namespace, name = pod_of(request, hints)
        except ResourceManagerError as exc:
            return refused(request, self.backend, str(exc))
        kind = ActionKind(request.kind)
        if kind in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            container = (hints or PlanHints()).of(request).container
            notes = pin_notes(request, namespace, name, container)
            return refused(request, self.backend, KUBELET_ADVICE, notes=notes)
        if self.api is not None:
            try:
                return self.checked_plan(request, namespace, name)
            except ResourceManagerError as exc:
                if exc.status != 503:
                    return refused(request, self.backend, str(exc))
                return self._offline(
                    request, namespace, name, f"the API server was not reachable ({exc})"
                )
        return self._offline(request, namespace, name, self.why)

    def checked_plan(self, request: ActionRequest, namespace: str, name: str) -> Plan:
        """The plan against what the API server says now; a refusal raised."""
        kind = ActionKind(request.kind)
        if kind in (ActionKind.PIN, ActionKind.MIGRATE_MEMORY):
            raise ResourceManagerError(f"{kind.value} is refused: {KUBELET_ADVICE}", 400, "kind")
        if kind is ActionKind.PLACE:
            return self._place(request, namespace, name)
        if kind is ActionKind.MIGRATE:
            return self._migrate(request, namespace, name)
        return self._release(request, namespace, name)

    def _api(self) -> KubeApi:
        if self.api is None:
            raise ResourceManagerError(f"Kubernetes cannot be asked: {self.why}", 503)
        return self.api

    # -- owners ----------------------------------------------------------------------------

    def controller(self, obj: dict[str, Any], namespace: str) -> tuple[str, dict[str, Any]]:
        """The kind and object of the controller owning ``obj`` (a ReplicaSet's Deployment)."""
        refs = [r for r in owner_references(obj) if r.get("controller")] or owner_references(obj)
        if not refs:
            return "", {}
        kind, name = str(refs[0].get("kind", "")), str(refs[0].get("name", ""))
        if kind not in ("ReplicaSet", *STEERABLE, "Notebook"):
            return kind, {}
        owner = self._api().owner(kind, namespace, name)
        if kind == "ReplicaSet":
            above, found = self.controller(owner, namespace)
            return (above, found) if found else (kind, {})
        return kind, owner

    @staticmethod
    def _check_unrecorded(kind: str, owner: dict[str, Any]) -> None:
        record = record_of(owner)
        if record is not None:
            raise ResourceManagerError(
                f"{kind} {_meta(owner).get('name')} still carries toposcope's change "
                f"{record.request_id} ({record.action} for {record.workload}); revert it first",
                409,
                "workload",
            )

    # -- each kind ---------------------------------------------------------------------------

    def _migrate(self, request: ActionRequest, namespace: str, name: str) -> Plan:
        pod = self._api().pod(namespace, name)
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
        kind, owner = self.controller(pod, namespace)
        if kind not in STEERABLE or not owner:
            raise ResourceManagerError(
                f"pod {request.workload} is owned by {kind or 'nothing'}: toposcope steers only "
                f"{' and '.join(STEERABLE)} pods",
                409,
                "workload",
            )
        self._check_unrecorded(kind, owner)
        spec = owner.get("spec", {}).get("template", {}).get("spec", {})
        record = UndoRecord(
            request.request_id, request.workload, STEER, target, spec.get("affinity")
        )
        owner_name = str(_meta(owner).get("name"))
        steer = {
            "metadata": {
                "resourceVersion": _meta(owner).get("resourceVersion"),
                "annotations": {UNDO: record.to_annotation()},
            },
            "spec": {"template": {"spec": {"affinity": narrowed(record.affinity, target)}}},
        }
        checked = (
            f"pod {namespace}/{name} runs on {node}, opted in and may be evicted; its owner is "
            f"{kind} {owner_name}, with nothing of toposcope's recorded",
        )
        steps = (
            eviction_step(namespace, name),
            patch_step(
                kind, namespace, owner_name, steer, f"steer {kind} {owner_name} to {target}"
            ),
        )
        return Plan(request, self.backend, steps, checked, notes=(_rolls(kind, owner_name),))

    def _place(self, request: ActionRequest, namespace: str, name: str) -> Plan:
        api = self._api()
        pod = api.pod(namespace, name)
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
        if target not in {v.name for v in map(node_view, api.nodes()) if v is not None}:
            raise ResourceManagerError(f"unknown node {target!r}", 404, "node")
        detail = placement_detail(self._slices(target), target, gpus_requested(pod))
        narrow = {
            "metadata": {"resourceVersion": _meta(pod).get("resourceVersion")},
            "spec": {"affinity": narrowed(spec.get("affinity"), target)},
        }
        left = [g for g in spec.get("schedulingGates") or [] if g.get("name") != PLACEMENT_GATE]
        steps = (
            patch_step(
                "Pod", namespace, name, narrow, f"narrow the pod's node affinity to {target}"
            ),
            patch_step(
                "Pod",
                namespace,
                name,
                {"spec": {"schedulingGates": left}},
                f"remove the {PLACEMENT_GATE} gate",
            ),
        )
        checked = (
            f"pod {namespace}/{name} carries the {PLACEMENT_GATE} gate; node {target} exists",
        )
        return Plan(request, self.backend, steps, checked, notes=(detail,))

    def _slices(self, node: str) -> list[dict[str, Any]]:
        """``node``'s DRA ResourceSlices; none when they cannot be read."""
        try:
            return self._api().resource_slices(node)
        except ResourceManagerError:
            return []

    def _release(self, request: ActionRequest, namespace: str, name: str) -> Plan:
        pod = self._api().pod(namespace, name)
        kind, owner = self.controller(pod, namespace)
        if kind == "StatefulSet" and owner:
            above, notebook = self.controller(owner, namespace)
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
        node = str(pod.get("spec", {}).get("nodeName") or "")
        version = _meta(owner).get("resourceVersion")
        checked = (f'{kind} {owner_name} owns pod {name} and opted in ({RELEASE_IDLE}: "true")',)
        if kind == "Notebook":
            record = UndoRecord(request.request_id, request.workload, STOP, node)
            stopped = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            annotations = {UNDO: record.to_annotation(), KUBEFLOW_STOPPED: stopped}
            body = {"metadata": {"resourceVersion": version, "annotations": annotations}}
            step = patch_step(kind, namespace, owner_name, body, f"stop notebook {owner_name}")
            return Plan(request, self.backend, (step,), checked)
        replicas = int(owner.get("spec", {}).get("replicas", 1) or 0)
        record = UndoRecord(request.request_id, request.workload, SCALE, node, replicas=replicas)
        body = {
            "metadata": {"resourceVersion": version, "annotations": {UNDO: record.to_annotation()}}
        }
        steps: tuple[Step, ...] = (
            patch_step(
                kind, namespace, owner_name, body, f"record {replicas} replicas for the revert"
            ),
            scale_step(kind, namespace, owner_name, 0),
        )
        return Plan(request, self.backend, steps, checked)

    # -- without an API server ---------------------------------------------------------------

    def _offline(self, request: ActionRequest, namespace: str, name: str, why: str) -> Plan:
        kind = ActionKind(request.kind)
        target = request.node or ""
        if kind is ActionKind.PLACE:
            narrow = {"spec": {"affinity": narrowed(None, target)}}
            gate = {"name": PLACEMENT_GATE}
            steps: tuple[Step, ...] = (
                patch_step(
                    "Pod", namespace, name, narrow, f"narrow the pod's node affinity to {target}"
                ),
                json_patch_step(
                    "Pod",
                    namespace,
                    name,
                    [
                        {"op": "test", "path": "/spec/schedulingGates", "value": [gate]},
                        {"op": "remove", "path": "/spec/schedulingGates"},
                    ],
                    f"remove the {PLACEMENT_GATE} gate, only if it is the pod's one gate",
                ),
            )
            unknown = (
                f"the pod was not read: {why}; its own node affinity (the first patch replaces "
                "its required node selector terms; the API server refuses it once the pod is "
                "scheduled) and its scheduling gates (the second patch tests that "
                f"{PLACEMENT_GATE} is the only one)",
            )
            return Plan(request, self.backend, steps, unknown=unknown)
        if kind is ActionKind.MIGRATE:
            unknown = (
                f"the pod's owner was not read: {why}; toposcope evicts only an opted-in pod of a "
                f"Deployment or StatefulSet, together with steering the owner's template to "
                f"{target} (node affinity kubernetes.io/hostname In [{target}]): without the "
                "owner there is no step to print",
            )
            return Plan(request, self.backend, (), unknown=unknown)
        unknown = (
            f"the pod's owner was not read: {why}; toposcope scales an opted-in "
            f'({RELEASE_IDLE}: "true") Deployment or StatefulSet to 0 replicas, or stops a '
            "Kubeflow Notebook, and never deletes a bare pod",
        )
        return Plan(request, self.backend, (), unknown=unknown)


def _rolls(kind: str, name: str) -> str:
    return f"changing the template of {kind} {name} also rolls its other pods onto the node"


__all__ = [
    "KUBELET_ADVICE",
    "KUBELET_SETTINGS",
    "STEERABLE",
    "KubePlanner",
    "guaranteed_patch",
    "pin_notes",
    "pod_of",
]
