"""The ``dra-slices`` kustomize Component: the exporter's flag, its token, and list-only RBAC on
ResourceSlices, each object valid for Kubernetes 1.34 (where resource.k8s.io/v1 is served).
"""

from __future__ import annotations

from pathlib import Path

from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.deploy.test_kubernetes import _overlay


def test_the_exporter_reads_resource_slices_with_a_list_only_role(tmp_path: Path) -> None:
    built = _overlay(tmp_path, "dra-slices")
    (exporter,) = [
        d
        for d in built
        if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "toposcope-exporter"
    ]
    pod = exporter["spec"]["template"]["spec"]
    assert "--kubernetes.dra-slices" in pod["containers"][0]["args"]
    assert pod["automountServiceAccountToken"] is True
    (role,) = [d for d in built if d["kind"] == "ClusterRole" and "dra" in d["metadata"]["name"]]
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]}
    ]
    (binding,) = [
        d for d in built if d["kind"] == "ClusterRoleBinding" and "dra" in d["metadata"]["name"]
    ]
    assert binding["subjects"][0]["name"] == pod.get("serviceAccountName", "toposcope-exporter")
    for document in (exporter, role, binding):
        validate(document, "1.34", strict=True)
