"""deploy/kubernetes/components/publish-nrt: valid, least privilege, enough, and wired.

The ClusterRole validates against the Kubernetes schemas (``kubernetes-validate``, strict),
grants no delete and no wildcard, and covers every request the NRT publisher makes against
the contract server (tests/nrt); the component turns the flag and the token on in the
exporter's DaemonSet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.deploy.rbac import granted, rbac_documents
from tests.deploy.test_kubernetes import _overlay
from tests.helpers import REPO

COMPONENT = REPO / "deploy" / "kubernetes" / "components" / "publish-nrt"
KUBERNETES_VERSION = "1.29"
GROUP = "topology.node.k8s.io"
#: (api group, resource, verb) the publisher needs: read, create and update its object, read
#: the Node, and GET the kubelet's /configz through the node proxy
NEEDED = {
    (GROUP, "noderesourcetopologies", "get"), (GROUP, "noderesourcetopologies", "create"),
    (GROUP, "noderesourcetopologies", "update"), ("", "nodes", "get"),
    ("", "nodes/proxy", "get"),
}  # fmt: skip


def _documents() -> list[dict[str, Any]]:
    return rbac_documents(COMPONENT / "exporter-nrt-rbac.yaml")


def test_the_rbac_validates_and_binds_the_exporter() -> None:
    docs = _documents()
    for doc in docs:
        validate(doc, KUBERNETES_VERSION, strict=True)
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "toposcope-exporter", "namespace": "toposcope"}
    ]
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text(encoding="utf-8"))
    assert component["kind"] == "Component"
    assert component["resources"] == ["exporter-nrt-rbac.yaml"]


def test_the_role_is_least_privilege_and_enough() -> None:
    (role,) = [d for d in _documents() if d["kind"] == "ClusterRole"]
    rules = granted(role)
    assert rules >= NEEDED
    assert not {v for _, _, v in rules} & {"delete", "deletecollection", "patch", "*"}
    assert {r for _, r, _ in rules} <= {"noderesourcetopologies", "nodes", "nodes/proxy"}
    assert {v for _, r, v in rules if r.startswith("nodes")} == {"get"}


def test_the_component_turns_publishing_on_in_the_exporter(tmp_path: Path) -> None:
    docs = _overlay(tmp_path, "publish-nrt")
    (exporter,) = [
        d
        for d in docs
        if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "toposcope-exporter"
    ]
    spec = exporter["spec"]["template"]["spec"]
    assert "--kubernetes.publish-nrt" in spec["containers"][0]["args"]
    assert spec["automountServiceAccountToken"] is True
    validate(exporter, KUBERNETES_VERSION, strict=True)
    assert exporter["kind"] == "DaemonSet"
    assert {d["metadata"]["name"] for d in docs if d["kind"].startswith("ClusterRole")} >= {
        "toposcope-exporter-nrt"
    }
