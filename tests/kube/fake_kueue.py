"""The contract server with Kueue Workloads and the jobs Kueue admits: batch Jobs, JobSets,
PyTorchJobs.

Only what :mod:`toposcope.kube.fabric_steer` relies on, each rule from its upstream source:

* **JSON patch**: :func:`tests.kube.fake_apiserver.json_patch`; a failed patch is 422 and
  nothing changes.
* **Structural schemas** (``apiextensions-apiserver``): a patched JobSet, PyTorchJob or
  Workload is
  validated against its CRD's published schema (``tests/fixtures/kube/crds``) with unknown
  fields refused, as ``fieldValidation=Strict`` does; a patched Job, and every pod template
  as a Pod, with kubernetes-validate. A body that fails is 422 and kept in ``invalid``.
* **Suspended jobs** (KEP-2926 "mutable scheduling directives", ``pkg/apis/batch/
  validation``; JobSet ``pkg/webhooks/jobset_webhook.go``): a pod template changes only while
  the job is suspended (a PyTorchJob's ``spec.runPolicy.suspend``).
* **Workload PodSets** (kueue ``pkg/webhooks/workload_webhook.go`` ``ValidateWorkloadUpdate``):
  immutable once the Workload has the ``QuotaReserved`` condition. Workloads are served in
  one version (:attr:`KueueApiServer.workload_version`; ``v1beta1`` as Kueue before 0.15) and
  checked against the ``v1beta2`` schema (the fields used here are the same in both).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from kubernetes_validate import ValidationError, validate  # type: ignore[import-untyped]

from tests.helpers import FIXTURES
from tests.kube.fake_apiserver import KUBERNETES_VERSION, ApiFailure, json_patch, merge_patch
from tests.kube.fake_topologies import TopologyApiServer
from toposcope.kube.fabric_kueue import quota_reserved

_ROUTE = re.compile(
    r"^/apis/(?:batch/v1|jobset\.x-k8s\.io/v1alpha2|kubeflow\.org/v1|kueue\.x-k8s\.io/(?P<kv>v1beta[12]))"
    r"(?:/namespaces/(?P<ns>[a-z0-9-]+))?/(?P<plural>jobs|jobsets|pytorchjobs|workloads)"
    r"(?:/(?P<name>[a-z0-9.-]+))?$"
)
KINDS = {
    "jobs": ("batch/v1", "Job"),
    "jobsets": ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    "pytorchjobs": ("kubeflow.org/v1", "PyTorchJob"),
    "workloads": ("kueue.x-k8s.io/v1beta2", "Workload"),
}
SCHEMAS = {
    "JobSet": "jobset.x-k8s.io_jobsets.v1alpha2.json",
    "PyTorchJob": "kubeflow.org_pytorchjobs.v1.json",
    "Workload": "kueue.x-k8s.io_workloads.v1beta2.json",
}


def strict(schema: Any) -> Any:
    """An OpenAPI schema of a CRD as JSON Schema that refuses unknown fields (an object with
    ``properties`` and neither ``additionalProperties`` nor preserved unknown fields).
    """
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    result = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in result
        and "additionalProperties" not in result
        and not result.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


def crd_schema(kind: str) -> dict[str, Any]:
    """The strict JSON Schema of ``kind`` (``JobSet``, ``Workload``) from its fixture."""
    loaded: dict[str, Any] = json.loads((FIXTURES / "kube" / "crds" / SCHEMAS[kind]).read_text())
    schema: dict[str, Any] = strict(loaded)
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a Job, a JobSet or a Workload."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "Job":
        return [spec.get("template") or {}]
    if obj["kind"] == "PyTorchJob":
        return [r.get("template") or {} for _, r in sorted(spec["pytorchReplicaSpecs"].items())]
    if obj["kind"] == "JobSet":
        return [
            (j["template"].get("spec") or {}).get("template") or {} for j in spec["replicatedJobs"]
        ]
    return [p.get("template") or {} for p in spec.get("podSets") or []]


@dataclass
class KueueApiServer(TopologyApiServer):
    """:class:`TopologyApiServer` with Jobs, JobSets and Workloads (module docstring)."""

    served: tuple[str, ...] = ("v1beta2", "v1beta1")
    #: the one version Workloads are served in (``v1beta1``: Kueue before 0.15)
    workload_version: str = "v1beta2"
    jobs: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    def add_job(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a Job, JobSet or Workload with a new resourceVersion and uid."""
        plural = next(p for p, (_, kind) in KINDS.items() if kind == obj["kind"])
        meta = obj.setdefault("metadata", {})
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", f"uid-{self.version}")
        self.check(obj)
        self.jobs[(plural, meta["namespace"], meta["name"])] = obj
        return obj

    def check(self, obj: dict[str, Any]) -> None:
        """Validate ``obj`` as the API server would (module docstring); 422 otherwise."""
        what = f"{obj['kind']} {obj['metadata'].get('name')}"
        try:
            if obj["kind"] in SCHEMAS:
                jsonschema.validate(obj, crd_schema(obj["kind"]))
            else:
                validate(obj, KUBERNETES_VERSION, strict=True)
            for template in pod_templates(obj):
                pod = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(template)}
                validate(pod, KUBERNETES_VERSION, strict=True)
        except (jsonschema.ValidationError, ValidationError) as exc:
            self.invalid.append(f"{what}: {str(exc)[:500]}")
            raise ApiFailure(422, "Invalid", f"{what} does not validate: {exc}") from None

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        found = _ROUTE.match(path)
        if found is None:
            return super()._route(method, path, query, body)
        plural, ns, name = found["plural"], found["ns"], found["name"]
        if found["kv"] is not None and found["kv"] != self.workload_version:
            raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
        api_version, kind = KINDS[plural]
        if name is None and method == "GET":
            items = [
                o
                for (p, n, _), o in sorted(self.jobs.items())
                if p == plural and (ns is None or n == ns)
            ]
            meta = {"resourceVersion": str(self.version)}
            return 200, {"apiVersion": api_version, "kind": f"{kind}List", "metadata": meta,
                         "items": items}  # fmt: skip
        if ns is None:
            raise ApiFailure(404, "NotFound", f"the server could not find {path}")
        key = (plural, ns, name or "")
        if key not in self.jobs:
            raise ApiFailure(404, "NotFound", f'{plural} "{name}" not found')
        if method == "GET":
            return 200, self.jobs[key]
        if method != "PATCH":
            raise ApiFailure(405, "MethodNotAllowed", method)
        stored = self.jobs[key]
        result = json_patch(stored, body) if isinstance(body, list) else merge_patch(stored, body)
        result["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        self._check_change(stored, result)
        self.check(result)
        if query.get("dryRun") != ["All"]:
            self.version += 1
            result["metadata"]["resourceVersion"] = str(self.version)
            self.jobs[key] = result
        return 200, result

    @staticmethod
    def _check_change(old: dict[str, Any], new: dict[str, Any]) -> None:
        if old["kind"] == "Workload":
            if quota_reserved(old) and old["spec"]["podSets"] != new["spec"]["podSets"]:
                raise ApiFailure(422, "Invalid", "spec.podSets: field is immutable")
            return
        suspended = (old["spec"].get("runPolicy") or old["spec"]).get("suspend")
        if pod_templates(old) != pod_templates(new) and not suspended:
            raise ApiFailure(
                422, "Invalid", "spec.template: field is immutable while the job is not suspended"
            )
