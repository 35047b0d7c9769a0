"""Where the objects toposcope changes live in the Kubernetes API, and the requests it sends.

The Kubernetes backend's plans (:mod:`~toposcope.kube.plans`) are made of these requests and
:meth:`toposcope.kube.api.KubeApi.execute` sends exactly them: JSON merge patches of a pod, an
owner or an owner's ``scale``, and a pod's eviction. :func:`parse_path` reads a path back,
accepting only the paths :func:`object_path` makes.
"""

from __future__ import annotations

import re
from typing import Any

from toposcope.rm import ResourceManagerError
from toposcope.rm.plan import HttpStep

#: where each kind toposcope changes lives in the API: (prefix, resource)
API_PATHS = {
    "Pod": ("/api/v1", "pods"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "Notebook": ("/apis/kubeflow.org/v1", "notebooks"),
    "Job": ("/apis/batch/v1", "jobs"),
    "JobSet": ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets"),
    "PyTorchJob": ("/apis/kubeflow.org/v1", "pytorchjobs"),
    "Workload": ("/apis/kueue.x-k8s.io/v1beta2", "workloads"),
    "WorkloadV1beta1": ("/apis/kueue.x-k8s.io/v1beta1", "workloads"),
}
_PATH_RE = re.compile(
    r"(?P<prefix>/api/v1|/apis/[a-z0-9.-]+/v[0-9a-z]+)/namespaces/(?P<ns>[a-z0-9-]+)/"
    r"(?P<resource>[a-z]+)/(?P<name>[a-z0-9.-]+)(?:/(?P<sub>eviction|scale))?"
)
#: a JSON merge patch (RFC 7386), what every patch toposcope sends is
MERGE_PATCH = "application/merge-patch+json"
#: a JSON patch (RFC 6902): only in plans made without the API server, for a person to run
JSON_PATCH = "application/json-patch+json"


def object_path(kind: str, namespace: str, name: str, sub: str = "") -> str:
    """The API path of one object of ``kind`` (a subresource's with ``sub``)."""
    prefix, resource = API_PATHS[kind]
    path = f"{prefix}/namespaces/{namespace}/{resource}/{name}"
    return f"{path}/{sub}" if sub else path


def parse_path(path: str) -> tuple[str, str, str, str]:
    """``(kind, namespace, name, subresource)`` of a path :func:`object_path` made."""
    found = _PATH_RE.fullmatch(path)
    kinds = {where: kind for kind, where in API_PATHS.items()}
    where = (found.group("prefix"), found.group("resource")) if found else None
    if found is None or where not in kinds:
        raise ResourceManagerError(f"not a path toposcope writes: {path[:200]}", 422)
    return kinds[where], found.group("ns"), found.group("name"), found.group("sub") or ""


def patch_step(kind: str, namespace: str, name: str, body: dict[str, Any], what: str) -> HttpStep:
    """A JSON merge patch of one object."""
    path = object_path(kind, namespace, name)
    return HttpStep("PATCH", path, body, "kubernetes", MERGE_PATCH, what)


def json_patch_step(
    kind: str, namespace: str, name: str, operations: list[dict[str, Any]], what: str
) -> HttpStep:
    """A JSON patch (RFC 6902) of one object: its ``test`` operations make the API server
    refuse the whole patch when the object is not as the plan assumed.
    """
    path = object_path(kind, namespace, name)
    return HttpStep("PATCH", path, operations, "kubernetes", JSON_PATCH, what)


def eviction_step(namespace: str, name: str) -> HttpStep:
    """The Eviction (policy/v1) of one pod: its PodDisruptionBudgets hold."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction"}
    body_meta: dict[str, Any] = {**body, "metadata": {"name": name, "namespace": namespace}}
    path = object_path("Pod", namespace, name, "eviction")
    return HttpStep("POST", path, body_meta, "kubernetes", what="evict the pod (budgets hold)")


def scale_step(kind: str, namespace: str, name: str, replicas: int) -> HttpStep:
    """Set an owner's replicas through its ``scale`` subresource."""
    path = object_path(kind, namespace, name, "scale")
    body = {"spec": {"replicas": replicas}}
    return HttpStep("PATCH", path, body, "kubernetes", MERGE_PATCH, f"scale to {replicas}")


__all__ = [
    "API_PATHS",
    "JSON_PATCH",
    "MERGE_PATCH",
    "eviction_step",
    "json_patch_step",
    "object_path",
    "parse_path",
    "patch_step",
    "scale_step",
]
