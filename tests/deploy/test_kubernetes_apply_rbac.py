"""deploy/kubernetes/components/apply-with-kubernetes: valid, least privilege, and enough.

The ClusterRole validates against the Kubernetes schemas (``kubernetes-validate``, strict),
grants no delete, no wildcard and no secrets, and covers every verb the ``kubernetes``
backend uses against the contract server (tests/kube).
"""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.deploy.rbac import granted, rbac_documents
from tests.helpers import REPO

COMPONENT = REPO / "deploy" / "kubernetes" / "components" / "apply-with-kubernetes"
KUBERNETES_VERSION = "1.29"
#: (api group, resource, verb) the backend needs (docs/kubernetes.md)
NEEDED = {
    ("", "pods", "list"), ("", "pods", "get"), ("", "pods", "patch"),
    ("", "pods/eviction", "create"), ("", "nodes", "list"),
    ("apps", "replicasets", "get"), ("apps", "deployments", "patch"),
    ("apps", "statefulsets", "patch"), ("apps", "deployments", "list"),
    ("apps", "deployments/scale", "get"), ("apps", "deployments/scale", "update"),
    ("apps", "statefulsets/scale", "update"), ("kubeflow.org", "notebooks", "patch"),
    ("resource.k8s.io", "resourceslices", "list"),
    ("kueue.x-k8s.io", "topologies", "list"), ("kueue.x-k8s.io", "workloads", "list"),
    ("kueue.x-k8s.io", "workloads", "patch"), ("batch", "jobs", "patch"),
    ("jobset.x-k8s.io", "jobsets", "patch"), ("kubeflow.org", "pytorchjobs", "patch"),
}  # fmt: skip


def _documents() -> list[dict[str, Any]]:
    return rbac_documents(COMPONENT / "advisor-kubernetes-rbac.yaml")


def test_the_rbac_validates_and_binds_the_advisor() -> None:
    docs = _documents()
    for doc in docs:
        validate(doc, KUBERNETES_VERSION, strict=True)
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "toposcope-advisor", "namespace": "toposcope"}
    ]
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text(encoding="utf-8"))
    assert component["kind"] == "Component"
    assert component["resources"] == ["advisor-kubernetes-rbac.yaml"]


def test_the_role_is_least_privilege_and_enough() -> None:
    (role,) = [d for d in _documents() if d["kind"] == "ClusterRole"]
    rules = granted(role)
    assert rules >= NEEDED
    assert not {v for _, _, v in rules} & {"delete", "deletecollection", "*", "escalate"}
    assert not {r for _, r, _ in rules} & {"secrets", "*", "pods/exec"}
    assert {g for g, _, _ in rules} <= {
        "", "apps", "kubeflow.org", "resource.k8s.io", "kueue.x-k8s.io", "batch",
        "jobset.x-k8s.io",
    }  # fmt: skip
