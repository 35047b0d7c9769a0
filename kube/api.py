"""The API server, through lightkube: reads, and writes that always run ``dryRun=All`` first.

:class:`KubeApi` is the only code that talks to the API server. Objects come back as plain
JSON dicts (what the rules in :mod:`.evictable` and :mod:`.undo` read). Every write is sent
twice: first with ``?dryRun=All`` (the API server runs admission, validation and the
PodDisruptionBudget check and persists nothing), then for real. Answers are mapped onto the
resource-manager contract's refusals by :func:`api_errors`:

* 429 (an eviction a PodDisruptionBudget blocks, cause ``DisruptionBudget``; or API priority
  and fairness throttling) -> :class:`~toposcope.rm.errors.RetryLaterError`;
* 500 on an eviction (several budgets match the pod: the API server refuses to choose) ->
  409, refused;
* 404, 409 (a ``resourceVersion`` conflict: the object changed since it was read), 422 -> the
  same status; 401/403 -> 403 naming the missing permission (see ``deploy/kubernetes``);
* an API server that cannot be reached -> 503.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, Client, ConfigError, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment, ReplicaSet, StatefulSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.resources.resource_v1beta1 import ResourceSlice as ResourceSliceV1beta1
from lightkube.resources.resource_v1beta2 import ResourceSlice as ResourceSliceV1beta2
from lightkube.types import PatchType

from toposcope.errors import ConfigError as ToposcopeConfigError
from toposcope.kube.annotations import FIELD_MANAGER
from toposcope.kube.paths import JSON_PATCH, MERGE_PATCH, parse_path
from toposcope.rm import ResourceManagerError, RetryLaterError
from toposcope.rm.plan import HttpStep, Step

#: the Kubeflow notebook custom resource (kubeflow.org/v1 Notebook)
Notebook = create_namespaced_resource("kubeflow.org", "v1", "Notebook", "notebooks")

#: the multi-node jobs and Kueue Workloads a fabric placement steers (:mod:`.fabric_steer`)
FABRIC_KINDS: dict[str, Any] = {
    "Job": Job,
    "JobSet": create_namespaced_resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    "PyTorchJob": create_namespaced_resource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
    "Workload": create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads"),
    "WorkloadV1beta1": create_namespaced_resource(
        "kueue.x-k8s.io", "v1beta1", "Workload", "workloads"
    ),
}
#: the kind read instead where the API server does not serve one (Kueue before 0.15 serves
#: Workloads in ``v1beta1`` only)
OLDER = {"Workload": "WorkloadV1beta1"}
#: Kueue's cluster-scoped Topology in the versions read, newest first
TOPOLOGIES: tuple[Any, ...] = tuple(
    create_global_resource("kueue.x-k8s.io", version, "Topology", "topologies")
    for version in ("v1beta2", "v1beta1")
)

#: owner kinds toposcope reads and patches, by the ``kind`` of an owner reference
OWNER_KINDS: dict[str, Any] = {
    "ReplicaSet": ReplicaSet,
    "Deployment": Deployment,
    "StatefulSet": StatefulSet,
    "Notebook": Notebook,
}
#: kinds with a scale subresource toposcope may scale
SCALABLE: dict[str, Any] = {"Deployment": Deployment, "StatefulSet": StatefulSet}
#: the DRA ResourceSlice versions read, newest first (v1 is GA in 1.34, v1beta1 from 1.32)
RESOURCE_SLICES: tuple[Any, ...] = (ResourceSlice, ResourceSliceV1beta2, ResourceSliceV1beta1)


def _causes(error: ApiError) -> list[str]:
    details = error.status.details
    return [c.reason or "" for c in (details.causes or [])] if details is not None else []


@contextlib.contextmanager
def api_errors(what: str) -> Iterator[None]:
    """Turn the API server's refusals while doing ``what`` into the contract's (module doc)."""
    try:
        yield
    except ApiError as exc:
        code = exc.status.code or exc.response.status_code
        message = f"{what}: {exc.status.message or exc.status.reason or code}"
        if code == 429:
            blocked = "DisruptionBudget" in _causes(exc)
            header = exc.response.headers.get("Retry-After", "")
            after = float(header) if header.isdigit() else None
            why = " (a PodDisruptionBudget allows no disruption now)" if blocked else ""
            raise RetryLaterError(f"{message}{why}; try again later", retry_after_s=after) from None
        if code == 500 and "eviction" in what:
            raise ResourceManagerError(
                f"{message} (several PodDisruptionBudgets match the pod; the API server "
                "evicts none: fix the budgets)",
                409,
            ) from None
        if code in (401, 403):
            raise ResourceManagerError(
                f"{message} (the service account lacks this permission: see the advisor's "
                "ClusterRole in deploy/kubernetes)",
                403,
            ) from None
        raise ResourceManagerError(message, code if code in (404, 409, 422) else 502) from None
    except httpx2.HTTPError as exc:
        raise ResourceManagerError(f"{what}: API server unreachable: {exc}", 503) from None


def client_from(kubeconfig: str | None, context: str | None, timeout: float) -> Client:
    """A client from ``kubeconfig`` (else ``$KUBECONFIG``, the in-cluster service account,
    ``~/.kube/config``); :class:`~toposcope.errors.ConfigError` when none is usable.
    """
    try:
        config = KubeConfig.from_file(Path(kubeconfig)) if kubeconfig else KubeConfig.from_env()
        single = config.get(context_name=context)
        if single is None:
            raise ToposcopeConfigError(f"kubeconfig has no context {context or '(current)'}")
        return Client(single, timeout=httpx2.Timeout(timeout), field_manager=FIELD_MANAGER)
    except (ConfigError, OSError, ValueError, KeyError) as exc:
        where = kubeconfig or "$KUBECONFIG, the in-cluster service account or ~/.kube/config"
        raise ToposcopeConfigError(
            f"cannot load the Kubernetes configuration {where}: {exc}"
        ) from None


def _plain(obj: Any) -> dict[str, Any]:
    data: dict[str, Any] = obj.to_dict()
    return data


class KubeApi:
    """The reads and writes the ``kubernetes`` backend needs (see the module docstring)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def pods(self) -> list[dict[str, Any]]:
        """Every pod of every namespace."""
        with api_errors("list pods"):
            return [_plain(p) for p in self.client.list(Pod, namespace="*")]

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        """One pod."""
        with api_errors(f"get pod {namespace}/{name}"):
            return _plain(self.client.get(Pod, name, namespace=namespace))

    def nodes(self) -> list[dict[str, Any]]:
        """Every node."""
        with api_errors("list nodes"):
            return [_plain(n) for n in self.client.list(Node)]

    def owner(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """An owner object (:data:`OWNER_KINDS`)."""
        with api_errors(f"get {kind} {namespace}/{name}"):
            return _plain(self.client.get(OWNER_KINDS[kind], name, namespace=namespace))

    def owners(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Every owner of ``kind`` in ``namespace`` (none when the kind is not served)."""
        try:
            with api_errors(f"list {kind} in {namespace}"):
                return [_plain(o) for o in self.client.list(OWNER_KINDS[kind], namespace=namespace)]
        except ResourceManagerError as exc:
            if exc.status == 404:  # the custom resource is not installed
                return []
            raise

    def fabric_object(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """One job or Kueue Workload of :data:`FABRIC_KINDS` (a Workload in ``v1beta1``
        where ``v1beta2`` has none: :data:`OLDER`).
        """
        try:
            with api_errors(f"get {kind} {namespace}/{name}"):
                return _plain(self.client.get(FABRIC_KINDS[kind], name, namespace=namespace))
        except ResourceManagerError as exc:
            if exc.status != 404 or kind not in OLDER:
                raise
            return self.fabric_object(OLDER[kind], namespace, name)

    def fabric_objects(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Every object of ``kind`` (:data:`FABRIC_KINDS`) in ``namespace`` (``*``: all);
        none when the kind is not served (Kueue or the job controller not installed; a
        Workload is then read in the older version of :data:`OLDER`).
        """
        try:
            with api_errors(f"list {kind} in {namespace}"):
                found = self.client.list(FABRIC_KINDS[kind], namespace=namespace)
                return [_plain(o) for o in found]
        except ResourceManagerError as exc:
            if exc.status != 404:
                raise
            return self.fabric_objects(OLDER[kind], namespace) if kind in OLDER else []

    def topology_levels(self) -> dict[str, list[str]]:
        """Each Kueue Topology's name and its levels' node labels (highest first), from the
        newest version served; none where Kueue serves no Topology.
        """
        for resource in TOPOLOGIES:
            try:
                with api_errors("list Kueue Topologies"):
                    found = [_plain(t) for t in self.client.list(resource)]
            except ResourceManagerError as exc:
                if exc.status == 404:
                    continue
                raise
            return {
                str(t.get("metadata", {}).get("name")): [
                    str(level.get("nodeLabel"))
                    for level in (t.get("spec") or {}).get("levels") or []
                    if isinstance(level, dict)
                ]
                for t in found
            }
        return {}

    def pods_in(self, namespace: str) -> list[dict[str, Any]]:
        """Every pod of ``namespace``."""
        with api_errors(f"list pods in {namespace}"):
            return [_plain(p) for p in self.client.list(Pod, namespace=namespace)]

    def json_patch(self, kind: str, namespace: str, name: str, operations: list[Any]) -> None:
        """A JSON patch (RFC 6902) of a pod, job or Workload, dry run first; its ``test``
        operations make the API server refuse it when the object changed since it was read.
        """
        resource = Pod if kind == "Pod" else FABRIC_KINDS.get(kind) or OWNER_KINDS[kind]
        self._send_patch(resource, namespace, name, operations, PatchType.JSON, f"patch {kind}")

    def _send_patch(
        self, resource: Any, namespace: str, name: str, body: Any, patch_type: PatchType, what: str
    ) -> None:
        """``body`` as a ``patch_type`` patch of ``namespace/name``, dry run first (a refusal
        stops it before anything changes); errors name ``what`` and the object.
        """
        for dry in (True, False):
            with api_errors(f"{what} {namespace}/{name}"):
                self.client.patch(
                    resource, name, body, namespace=namespace, patch_type=patch_type, dry_run=dry
                )

    def resource_slices(self, node: str) -> list[dict[str, Any]]:
        """The DRA ResourceSlices of ``node``, from the newest version the API server serves;
        none where it serves none (DRA off: 404). Other refusals are raised (403: RBAC).
        """
        for resource in RESOURCE_SLICES:
            try:
                with api_errors(f"list ResourceSlices of node {node}"):
                    found = self.client.list(resource, fields={"spec.nodeName": node})
                    return [
                        s for s in map(_plain, found) if s.get("spec", {}).get("nodeName") == node
                    ]
            except ResourceManagerError as exc:
                if exc.status != 404:
                    raise
        return []

    def evict(self, namespace: str, name: str) -> None:
        """``POST pods/{name}/eviction`` (policy/v1), dry run first."""
        body = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=namespace))
        for dry in (True, False):
            with api_errors(f"eviction of pod {namespace}/{name}"):
                self.client.create(body, name, namespace=namespace, dry_run=dry)

    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        """A JSON merge patch (RFC 7386) of a pod or owner, dry run first. ``body`` should
        hold ``metadata.resourceVersion`` so that a change since it was read is a 409.
        """
        resource = Pod if kind == "Pod" else OWNER_KINDS[kind]
        self._send_patch(resource, namespace, name, body, PatchType.MERGE, f"patch {kind}")

    def patch_scale(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        """A JSON merge patch of an owner's ``scale`` subresource, dry run first."""
        resource = SCALABLE[kind].Scale
        self._send_patch(resource, namespace, name, body, PatchType.MERGE, f"scale {kind}")

    def execute(self, step: Step) -> None:
        """Send one planned request (:mod:`~toposcope.kube.plans`): a merge patch of a pod, an
        owner or an owner's scale, a JSON patch of a pod, a job or a Kueue Workload
        (:mod:`~toposcope.kube.fabric_steer`), or a pod's eviction; anything else is refused
        unsent.
        """
        if not isinstance(step, HttpStep) or step.api != "kubernetes":
            raise ResourceManagerError(f"not a Kubernetes request: {step}", 422)
        kind, namespace, name, sub = parse_path(step.url)
        body = step.body if isinstance(step.body, dict) else {}
        if step.method == "POST" and sub == "eviction":
            self.evict(namespace, name)
        elif step.method == "PATCH" and sub == "scale" and kind in SCALABLE:
            self.patch_scale(kind, namespace, name, body)
        elif step.method == "PATCH" and not sub and step.content_type == MERGE_PATCH:
            self.patch(kind, namespace, name, body)
        elif step.method == "PATCH" and not sub and step.content_type == JSON_PATCH:
            if not isinstance(step.body, list):
                raise ResourceManagerError(f"a JSON patch is a list: {step.url}", 422)
            self.json_patch(kind, namespace, name, step.body)
        else:
            raise ResourceManagerError(
                f"not a request toposcope sends: {step.method} {step.url}", 422
            )

    def scale(self, kind: str, namespace: str, name: str, replicas: int) -> int:
        """Set the replicas through the scale subresource (dry run first); the old count."""
        resource = SCALABLE[kind].Scale
        with api_errors(f"get the scale of {kind} {namespace}/{name}"):
            scale = self.client.get(resource, name, namespace=namespace)
        old = int(scale.spec.replicas or 0)
        scale.spec.replicas = replicas
        for dry in (True, False):
            with api_errors(f"scale {kind} {namespace}/{name} to {replicas}"):
                self.client.replace(scale, name, namespace=namespace, dry_run=dry)
        return old


__all__ = [
    "FABRIC_KINDS",
    "OWNER_KINDS",
    "RESOURCE_SLICES",
    "SCALABLE",
    "KubeApi",
    "api_errors",
    "client_from",
]
