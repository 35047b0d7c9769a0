"""A small GPU cluster for the contract server: nodes, owners, pods and budgets as JSON."""

from __future__ import annotations

from typing import Any

from tests.kube.fake_apiserver import FakeApiServer

GPU = {"nvidia.com/gpu": "1"}


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }  # fmt: skip


def template(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "trainer:1",
                                 "resources": {"limits": GPU}}]},
    }  # fmt: skip


def deployment(name: str, *, migratable: bool = True, release: bool = False) -> dict[str, Any]:
    labels = {"app": name}
    pod_annotations = {"toposcope.io/migratable": "true"} if migratable else {}
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if release:
        meta["annotations"] = {"toposcope.io/release-idle": "true"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": template(labels, pod_annotations)},
    }  # fmt: skip


def replicaset(owner: str) -> dict[str, Any]:
    labels = {"app": owner}
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": f"{owner}-rs", "namespace": "ml", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner, "uid": "u",
             "controller": True}]},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": template(labels, {})},
    }  # fmt: skip


def pod(
    name: str,
    owner: str | None,
    *,
    node_name: str | None = "gpu-1",
    kind: str = "ReplicaSet",
    migratable: bool = True,
    gated: bool = False,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "labels": {"app": owner or name}}
    if migratable:
        meta["annotations"] = {"toposcope.io/migratable": "true"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": owner if kind != "ReplicaSet"
             else f"{owner}-rs", "uid": "u", "controller": True}]  # fmt: skip
    body: dict[str, Any] = {
        "containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": GPU}}],
        **spec,
    }
    if node_name:
        body["nodeName"] = node_name
    if gated:
        body["schedulingGates"] = [{"name": "toposcope.io/placement"}]
    phase = "Running" if node_name else "Pending"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body,
            "status": {"phase": phase}}  # fmt: skip


def budget(name: str, app: str, allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed},
    }  # fmt: skip


def cluster() -> FakeApiServer:
    """Two GPU nodes and the workloads every contract test starts from."""
    fake = FakeApiServer()
    for name in ("gpu-1", "gpu-2"):
        fake.add(node(name))
    for name, release in (("train", False), ("blocked", False), ("notebook", True)):
        fake.add(deployment(name, release=release))
        fake.add(replicaset(name))
    fake.add(pod("train-a", "train"))
    fake.add(pod("blocked-a", "blocked"))
    fake.add(budget("blocked", "blocked", 0))
    fake.add(pod("notebook-a", "notebook"))
    fake.add(pod("bare", None))
    fake.add(pod("scratch", "train", volumes=[{"name": "s", "emptyDir": {"medium": "Memory"}}]))
    fake.add(pod("daemon", "agent", kind="DaemonSet"))
    fake.add(pod("shy", "train", migratable=False))
    fake.add(pod("waiting", "train", node_name=None, gated=True))
    fake.add(pod("ungated", "train", node_name=None))
    return fake
