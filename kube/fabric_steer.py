"""Steer a pending multi-node job onto the fabric the advisor chose, through Kueue or gates.

The advisor's fabric-placement recommendation (:mod:`toposcope.advisor.policies.
fabric_advice`) names the job as the fabric's Kubernetes jobs are named
(:mod:`toposcope.fabric.kube_jobs`): ``NAMESPACE:KIND:NAME`` with ``KIND`` one of
:data:`JOB_LABELS` (a Kueue pod group is ``KIND`` ``Workload``). :class:`FabricSteerPlanner`
makes its :class:`~toposcope.rm.plan.Plan`, which the backend sends as it is
(:meth:`toposcope.kube.manager.KubernetesResourceManager.steer_fabric`) and
``advise --dry-run --resource-manager kubernetes`` prints:

* **a Kueue job** (its object carries ``kueue.x-k8s.io/queue-name``, and is suspended: Kueue
  has not admitted it): a JSON patch of the job setting the topology annotation
  (:mod:`.fabric_kueue`) on each PodSet's pod template, and a JSON patch of each of its
  pending Workloads setting the same request on every PodSet, both first testing the
  ``resourceVersion`` read, so that a change since is refused whole. Kueue then picks the
  domain itself (best fit at that level), not necessarily the advice's cell.
* **gated pods without Kueue** (pods of the job carrying the ``toposcope.io/placement``
  gate): each pod's required node affinity narrowed to the chosen nodes
  (``kubernetes.io/hostname In [...]``), then the gate removed, as ``place`` does for one
  pod. A job held for a tighter cell keeps its gates (no step).

Without an API server the plan is made from the recommendation and the Topology's levels
given with ``--kube-kueue-levels``; what it could not read is said as ``not checked``.
Running jobs are not moved on Kubernetes (a ``migrate-job`` is refused with the reason).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from toposcope.kube.annotations import PLACEMENT_GATE
from toposcope.kube.fabric_kueue import (
    QUEUE_LABEL,
    TopologyRequest,
    annotation_operations,
    choose_request,
    merge_annotations,
    quota_reserved,
    template_paths,
    to_nodes,
    workload_operations,
)
from toposcope.kube.paths import json_patch_step, patch_step
from toposcope.kube.views import split_workload
from toposcope.report.recommendation import Recommendation, RecommendationKind
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
from toposcope.rm.plan import Plan, Step, refused

if TYPE_CHECKING:
    from toposcope.kube.api import KubeApi

#: the job kinds steered, each with the pod label naming its job (for gated pods)
JOB_LABELS = {
    "Job": "batch.kubernetes.io/job-name",
    "JobSet": "jobset.sigs.k8s.io/jobset-name",
    "PyTorchJob": "training.kubeflow.org/job-name",
    "Workload": "kueue.x-k8s.io/pod-group-name",
}
#: the longest list of Kueue levels (Kueue's own bound)
MAX_LEVELS = 16
_LABEL_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
BACKEND = "kubernetes"


def parse_levels(text: str) -> tuple[str, ...]:
    """``LABEL,LABEL,...`` (a Kueue Topology's ``spec.levels[].nodeLabel``, highest first)
    checked as label keys; a ``ValueError`` naming the first bad one.
    """
    labels = tuple(part.strip() for part in text.split(",") if part.strip())
    if not 0 < len(labels) <= MAX_LEVELS:
        raise ValueError(f"Kueue levels: 1 to {MAX_LEVELS} node labels, comma-separated")
    for label in labels:
        if len(label) > 316 or _LABEL_KEY.fullmatch(label) is None:
            raise ValueError(f"Kueue level {label[:80]!r} is not a node label key")
    if len(set(labels)) != len(labels):
        raise ValueError("Kueue levels: each node label once")
    return labels


def parse_job(workload: str) -> tuple[str, str, str]:
    """``(namespace, kind, name)`` of ``NAMESPACE:KIND:NAME`` (a 400 refusal otherwise)."""
    namespace, kind, name = ([*workload.split(":", 2), "", ""])[:3]
    if kind not in JOB_LABELS:
        raise ResourceManagerError(
            f"workload {workload[:120]!r} is not NAMESPACE:KIND:NAME with KIND one of "
            f"{', '.join(JOB_LABELS)}",
            400,
            "workload",
        )
    split_workload(f"{namespace}/{name}")
    return namespace, kind, name


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _suspended(kind: str, obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    if kind == "PyTorchJob":
        return bool((spec.get("runPolicy") or {}).get("suspend"))
    return bool(spec.get("suspend"))


def _controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    uid = _meta(owner).get("uid")
    return any(
        isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("uid") == uid
        for ref in _meta(obj).get("ownerReferences") or []
    )


def _workload_kind(workload: Mapping[str, Any]) -> str:
    """The kind of :data:`toposcope.kube.paths.API_PATHS` a Workload was read in."""
    return (
        "WorkloadV1beta1" if workload.get("apiVersion") == "kueue.x-k8s.io/v1beta1" else "Workload"
    )


def _request_of(rec: Recommendation) -> ActionRequest:
    """The request a fabric placement stands for (no single node: the job has several)."""
    kind = ActionKind.MIGRATE if rec.kind == RecommendationKind.MIGRATE_JOB else ActionKind.PLACE
    return ActionRequest(f"{rec.id}-0", kind, rec.target.workload or "", None, reason=rec.summary)


def _nodes(rec: Recommendation) -> list[str]:
    nodes = rec.proposed.get("nodes") or []
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise ResourceManagerError("proposed nodes are not a list of node names", 422)
    return list(nodes)


class FabricSteerPlanner:
    """Plans a fabric placement against one API server (``api``; ``None``: offline, ``why``
    says why) with the Kueue levels ``levels`` (empty: read the cluster's only Topology).
    """

    def __init__(self, api: KubeApi | None, why: str = "", levels: Sequence[str] = ()) -> None:
        self.api = api
        self.why = why or "no API server is configured"
        self.levels = tuple(levels)

    def plan(self, rec: Recommendation) -> Plan:
        """The plan of ``rec``; a refusal is the plan's ``refused`` (never raised)."""
        request = _request_of(rec)
        try:
            if request.kind == ActionKind.MIGRATE:
                raise ResourceManagerError(
                    "moving a running multi-node job is not planned on Kubernetes: its pods "
                    "would be recreated by the job controller without a checkpoint contract; "
                    "requeue it through Kueue by hand (its Workload's spec.active: false, "
                    "then true)",
                    409,
                    "kind",
                )
            return self.checked_plan(rec, request)
        except ResourceManagerError as exc:
            return refused(request, BACKEND, str(exc))

    def checked_plan(self, rec: Recommendation, request: ActionRequest) -> Plan:
        """The plan against the API server now (offline without one); refusals raised."""
        namespace, kind, name = parse_job(request.workload)
        if self.api is None:
            return self._offline(rec, request, namespace, kind, name)
        owner: Mapping[str, Any] = {}
        if kind != "Workload":
            try:
                owner = self.api.fabric_object(kind, namespace, name)
            except ResourceManagerError as exc:
                if exc.status != 404:
                    raise
        labels = _meta(owner).get("labels") or {}
        if kind == "Workload" or QUEUE_LABEL in labels:
            return self._kueue(rec, request, namespace, kind, name, owner)
        return self._gated(rec, request, namespace, kind, name)

    # -- Kueue -------------------------------------------------------------------------------

    def _topology_request(self, rec: Recommendation) -> TopologyRequest:
        levels = self.levels or self._read_levels()
        try:
            return choose_request(rec.proposed, levels)
        except ValueError as exc:
            raise ResourceManagerError(str(exc), 409, "node") from None

    def _read_levels(self) -> tuple[str, ...]:
        assert self.api is not None
        found = self.api.topology_levels()
        if len(found) != 1:
            raise ResourceManagerError(
                f"{len(found)} Kueue Topologies: name the levels with --kube-kueue-levels "
                "(the Topology's spec.levels node labels, highest first)",
                409,
                "node",
            )
        return parse_levels(",".join(next(iter(found.values()))))

    def _kueue(
        self,
        rec: Recommendation,
        request: ActionRequest,
        namespace: str,
        kind: str,
        name: str,
        owner: Mapping[str, Any],
    ) -> Plan:
        assert self.api is not None
        if owner and not _suspended(kind, owner):
            raise ResourceManagerError(
                f"{kind} {namespace}/{name} is not suspended: Kueue admitted it already",
                409,
                "workload",
            )
        wanted = self._topology_request(rec)
        if kind == "Workload":
            workloads = [self.api.fabric_object("Workload", namespace, name)]
        else:
            workloads = [
                w
                for w in self.api.fabric_objects("Workload", namespace)
                if _controlled_by(w, owner)
            ]
        for workload in workloads:
            if quota_reserved(workload):
                raise ResourceManagerError(
                    f"Kueue reserved quota for Workload {_meta(workload).get('name')}: its "
                    "PodSets can no longer change",
                    409,
                    "workload",
                )
        steps: list[Step] = []
        what = f"{wanted.annotation}: {wanted.label}"
        if owner:
            operations = [
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": _meta(owner).get("resourceVersion")},
            ]  # fmt: skip
            for path, template in template_paths(kind, owner):
                operations += annotation_operations(path, template, wanted)
            steps.append(
                json_patch_step(
                    kind, namespace, name, operations, f"{kind} {name}'s pod templates: {what}"
                )
            )
        for workload in workloads:
            workload_name = str(_meta(workload).get("name"))
            operations = [
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": _meta(workload).get("resourceVersion")},
                *workload_operations(workload, wanted),
            ]  # fmt: skip
            steps.append(
                json_patch_step(
                    _workload_kind(workload),
                    namespace,
                    workload_name,
                    operations,
                    f"pending Workload {workload_name}: topologyRequest.{wanted.field} "
                    f"{wanted.label}",
                )
            )
        shown = ", ".join(str(_meta(w).get("name")) for w in workloads) or "none yet"
        checked = (
            f"{kind} {namespace}/{name} is Kueue's ({QUEUE_LABEL}) and not admitted; its "
            f"pending Workload(s): {shown}; {wanted.why}",
        )
        return Plan(request, BACKEND, tuple(steps), checked, notes=_kueue_notes(rec, wanted))

    # -- gated pods without Kueue --------------------------------------------------------------

    def _gated(
        self, rec: Recommendation, request: ActionRequest, namespace: str, kind: str, name: str
    ) -> Plan:
        assert self.api is not None
        label = JOB_LABELS[kind]
        pods = [
            p
            for p in self.api.pods_in(namespace)
            if (_meta(p).get("labels") or {}).get(label) == name
            and PLACEMENT_GATE
            in [g.get("name") for g in p.get("spec", {}).get("schedulingGates") or []]
        ]
        if not pods:
            raise ResourceManagerError(
                f"{kind} {namespace}/{name} is not Kueue's ({QUEUE_LABEL}) and none of its pods "
                f"({label}={name}) carries the {PLACEMENT_GATE} gate: nothing to steer",
                409,
                "workload",
            )
        names = sorted(str(_meta(p).get("name")) for p in pods)
        if rec.proposed.get("hold_level"):
            checked = (f"pods {', '.join(names)} carry the {PLACEMENT_GATE} gate",)
            note = (
                f"held for {rec.proposed.get('hold_level')} {rec.proposed.get('hold_cell')}: "
                "the pods keep their gate until a later run places them"
            )
            return Plan(request, BACKEND, (), checked, notes=(note,))
        nodes = _nodes(rec)
        if not nodes:
            raise ResourceManagerError("the advice names no nodes", 422, "node")
        steps: list[Step] = []
        for pod in sorted(pods, key=lambda p: str(_meta(p).get("name"))):
            pod_name = str(_meta(pod).get("name"))
            spec = pod.get("spec", {})
            narrow = {
                "metadata": {"resourceVersion": _meta(pod).get("resourceVersion")},
                "spec": {"affinity": to_nodes(spec.get("affinity"), nodes)},
            }
            left = [g for g in spec.get("schedulingGates") or [] if g.get("name") != PLACEMENT_GATE]
            steps += [
                patch_step(
                    "Pod", namespace, pod_name, narrow,
                    f"narrow pod {pod_name}'s node affinity to {','.join(sorted(nodes))}",
                ),
                patch_step(
                    "Pod", namespace, pod_name, {"spec": {"schedulingGates": left}},
                    f"remove the {PLACEMENT_GATE} gate of pod {pod_name}",
                ),
            ]  # fmt: skip
        checked = (
            f"{kind} {namespace}/{name} is not Kueue's; pods {', '.join(names)} carry the "
            f"{PLACEMENT_GATE} gate",
        )
        return Plan(request, BACKEND, tuple(steps), checked)

    # -- without an API server ---------------------------------------------------------------

    def _offline(
        self, rec: Recommendation, request: ActionRequest, namespace: str, kind: str, name: str
    ) -> Plan:
        unknown: list[str] = []
        steps: list[Step] = []
        wanted: TopologyRequest | None = None
        if not self.levels:
            level = rec.proposed.get("hold_level") or rec.proposed.get("level")
            unknown.append(
                f"the Kueue Topology was not read: {self.why}; give its levels with "
                "--kube-kueue-levels LABEL,... (spec.levels node labels, highest first) to "
                f"name the label for the {level}"
            )
        else:
            try:
                wanted = choose_request(rec.proposed, self.levels)
            except ValueError as exc:
                raise ResourceManagerError(str(exc), 409, "node") from None
        if wanted is not None:
            what = f"{wanted.annotation}: {wanted.label}"
            if kind == "Job":
                unknown.append(
                    f"Job {namespace}/{name} was not read: {self.why}; whether it is Kueue's "
                    f"({QUEUE_LABEL}) and still suspended (the API server refuses a change of "
                    "the template of a Job that started)"
                )
                template = {"metadata": {"annotations": merge_annotations(wanted)}}
                body = {"spec": {"template": template}}
                steps.append(
                    patch_step(kind, namespace, name, body, f"Job {name}'s pod template: {what}")
                )
            else:
                unknown.append(
                    f"{kind} {namespace}/{name} was not read: {self.why}; each of its PodSets' "
                    f"pod templates gets {what} (a JSON patch needs their positions)"
                )
            unknown.append(
                f"its pending Kueue Workload was not read: every PodSet's "
                f"spec.podSets[].topologyRequest.{wanted.field} becomes {wanted.label} "
                "(Kueue does not rebuild a Workload when only an annotation changes)"
            )
        nodes = rec.proposed.get("nodes") or []
        if nodes:
            unknown.append(
                f"if the job is not Kueue's: each of its pods carrying the {PLACEMENT_GATE} gate "
                f"gets node affinity kubernetes.io/hostname In [{','.join(map(str, nodes))}], "
                "then loses the gate"
            )
        notes = _kueue_notes(rec, wanted) if wanted is not None else ()
        return Plan(request, BACKEND, tuple(steps), unknown=tuple(unknown), notes=notes)


def _kueue_notes(rec: Recommendation, wanted: TopologyRequest | None) -> tuple[str, ...]:
    if wanted is None:
        return ()
    cell = rec.proposed.get("hold_cell") or rec.proposed.get("cell")
    return (
        f"Kueue chooses the {wanted.label} domain itself (best fit); the advice's cell was {cell}",
    )


__all__ = ["JOB_LABELS", "FabricSteerPlanner", "parse_job", "parse_levels"]
