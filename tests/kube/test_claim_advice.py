"""The ResourceClaimTemplate change for a pod whose DRA GPUs are misaligned.

A Deployment's pod holds two GPUs of NVIDIA's DRA driver through a claim made from a template
without constraints; the node's slices (tests/fixtures/dra/gpu-node-1.yaml) put them under
two PCIe roots. The advice, read through the core API client from the contract server, is a
new template with ``matchAttribute: resource.kubernetes.io/pcieRoot`` and a merge patch of the
Deployment; both are validated with kubernetes-validate against the Kubernetes 1.34 schemas
(``resource.k8s.io/v1``, where DRA is GA), and the plan renders as kubectl calls.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.advisor.fakes import FakeServer, Request
from tests.helpers import FIXTURES
from tests.kube.fake_apiserver import merge_patch, served_kubeconfig
from tests.kube.fake_dra import DraApiServer
from toposcope.cli import main
from toposcope.kubeapi.claim_advice import NoChange, Owner, propose
from toposcope.kubeapi.claim_plan import change_plan, proposed_state
from toposcope.kubeapi.claim_reader import advise_pod
from toposcope.kubeapi.client import KubeApiError, from_kubeconfig
from toposcope.kubeapi.resourceslices import NUMA_NODE, PCIE_ROOT, devices_of
from toposcope.rm.plan import HttpStep, WaitStep
from toposcope.rm.plan_script import plan_lines

#: the first release serving resource.k8s.io/v1
KUBERNETES = "1.34"
NS = "research"
NODE = "gpu-node-1"
POD = "llm-train-7d9f8-x2k4q"
CLAIM = f"{POD}-gpus-m4n8s"


def node_slices() -> list[dict[str, Any]]:
    document = yaml.safe_load((FIXTURES / "dra" / "gpu-node-1.yaml").read_text())
    return list(document["items"])


def template(
    name: str = "two-gpus", constraints: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]
    }
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "7", "uid": "t-1"},
        "spec": {"spec": {"devices": devices}},
    }


def claim(devices: list[str], driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": CLAIM, "namespace": NS},
        "spec": template()["spec"]["spec"],
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": driver, "pool": NODE, "device": d}
                        for d in devices
                    ]
                }
            }
        },
    }


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm-train", "namespace": NS, "resourceVersion": "42"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "llm-train"}},
            "template": {
                "metadata": {"labels": {"app": "llm-train"}},
                "spec": {
                    "resourceClaims": [
                        {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                        {"name": "scratch", "resourceClaimTemplateName": "nvme"},
                    ],
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                            "resources": {"claims": [{"name": "gpus"}]},
                        }
                    ],
                },
            },
        },
    }


def pod(owner: str | None = "llm-train-7d9f8") -> dict[str, Any]:
    spec = copy.deepcopy(deployment()["spec"]["template"]["spec"])
    spec["nodeName"] = NODE
    meta: dict[str, Any] = {"name": POD, "namespace": NS}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": "rs-1",
             "controller": True}
        ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": CLAIM}]},
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[DraApiServer, Path]]:
    fake = DraApiServer(slices=node_slices())
    fake.claims[(NS, CLAIM)] = claim(["gpu-0", "gpu-2"])
    fake.templates[(NS, "two-gpus")] = template()
    fake.add(deployment())
    fake.add({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "llm-train-7d9f8", "namespace": NS, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-train", "uid": "d-1",
             "controller": True}]},
        "spec": {"selector": {"matchLabels": {"app": "llm-train"}}},
    })  # fmt: skip
    fake.add(pod())
    with served_kubeconfig(fake, tmp_path) as config:
        yield fake, config


def test_a_pod_with_gpus_under_two_roots_gets_a_validated_template_and_owner_patch(
    cluster: tuple[DraApiServer, Path],
) -> None:
    fake, config = cluster
    advice = advise_pod(from_kubeconfig(config), NS, POD)
    assert advice.skipped == ()
    (change,) = advice.changes
    assert change.constraint == {"matchAttribute": PCIE_ROOT}
    assert change.new_template == "two-gpus-pcieroot"
    body = change.template
    assert validate(body, KUBERNETES, strict=True) == KUBERNETES
    assert body["spec"]["spec"]["devices"]["constraints"] == [{"matchAttribute": PCIE_ROOT}]
    assert (
        body["spec"]["spec"]["devices"]["requests"]
        == template()["spec"]["spec"]["devices"]["requests"]
    )
    assert "resourceVersion" not in body["metadata"] and "uid" not in body["metadata"]
    # the Deployment, patched, is still a valid Deployment pointing the claim at the new template
    assert change.owner is not None and change.owner.kind == "Deployment"
    assert change.owner_patch is not None
    stored = fake.get("deployments", NS, "llm-train")
    assert change.owner_patch["metadata"] == {
        "resourceVersion": stored["metadata"]["resourceVersion"]
    }
    patched = merge_patch(stored, change.owner_patch)
    assert validate(patched, KUBERNETES, strict=True) == KUBERNETES
    assert patched["spec"]["template"]["spec"]["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": "two-gpus-pcieroot"},
        {"name": "scratch", "resourceClaimTemplateName": "nvme"},
    ]
    # the node runs dra-driver-cpu, whose groups publish pcieRoot: the CPUs can join
    assert any("dra-driver-cpu" in note and "publish" in note for note in change.notes)
    assert proposed_state(change)["resource_claim_template"] == body


def test_the_plan_creates_the_template_patches_the_owner_and_waits_for_the_rollout(
    cluster: tuple[DraApiServer, Path],
) -> None:
    _, config = cluster
    (change,) = advise_pod(from_kubeconfig(config), NS, POD).changes
    plan = change_plan(change)
    create, patch, wait = plan.steps
    assert isinstance(create, HttpStep) and isinstance(patch, HttpStep)
    assert (create.method, create.url) == (
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates",
    )
    assert (patch.method, patch.url, patch.content_type) == (
        "PATCH",
        f"/apis/apps/v1/namespaces/{NS}/deployments/llm-train",
        "application/merge-patch+json",
    )
    assert isinstance(wait, WaitStep) and "rollout" in wait.check
    script = "\n".join(plan_lines(plan))
    assert "two-gpus-pcieroot" in script and "kubectl" in script


def test_numa_node_is_proposed_where_devices_publish_no_pcie_root() -> None:
    slices = node_slices()
    for device in slices[1]["spec"]["devices"]:
        del device["attributes"][PCIE_ROOT]
    devices = devices_of(slices, NODE)
    cpus = claim(["cpudevnuma000", "cpudevnuma001"], driver="dra.cpu")
    change = propose(pod(), "gpus", cpus, template(), devices, None)
    assert change.constraint == {"matchAttribute": NUMA_NODE}
    assert validate(change.template, KUBERNETES, strict=True) == KUBERNETES
    # no owner: the template only, and who must recreate the pod
    assert change.owner_patch is None
    assert len(change_plan(change).steps) == 1
    assert any("recreate" in note for note in change.notes)


def test_no_advice_where_it_would_not_help_or_is_there_already() -> None:
    devices = devices_of(node_slices(), NODE)
    owner = Owner("Deployment", "llm-train", deployment())
    # a MIG device and an unknown device: not two devices publishing an attribute
    with pytest.raises(NoChange, match="unallocatable"):
        propose(pod(), "gpus", claim(["gpu-0", "gpu-7"]), template(), devices, owner)
    done = template(constraints=[{"matchAttribute": PCIE_ROOT}])
    with pytest.raises(NoChange, match="already"):
        propose(pod(), "gpus", claim(["gpu-0", "gpu-2"]), done, devices, owner)
    direct = pod()
    direct["spec"]["resourceClaims"][0] = {"name": "gpus", "resourceClaimName": "shared-gpus"}
    with pytest.raises(NoChange, match="not a template"):
        propose(direct, "gpus", claim(["gpu-0", "gpu-2"]), template(), devices, owner)


def test_a_constraint_covers_only_the_requests_whose_devices_publish_it() -> None:
    devices = devices_of(node_slices(), NODE)
    two = template()
    two["spec"]["spec"]["devices"]["requests"].append(
        {"name": "scratch", "exactly": {"deviceClassName": "example.com/nvme"}}
    )
    allocated = claim(["gpu-0", "gpu-2"])
    allocated["status"]["allocation"]["devices"]["results"].append(
        {"request": "scratch", "driver": "example.com", "pool": NODE, "device": "nvme-0"}
    )
    change = propose(pod(), "gpus", allocated, two, devices, None)
    assert change.constraint == {"requests": ["gpus"], "matchAttribute": PCIE_ROOT}
    assert validate(change.template, KUBERNETES, strict=True) == KUBERNETES


def test_names_from_the_caller_are_checked_before_any_request(
    cluster: tuple[DraApiServer, Path],
) -> None:
    fake, config = cluster
    before = len(fake.requests)
    with pytest.raises(KubeApiError, match="not a valid Kubernetes name"):
        advise_pod(from_kubeconfig(config), NS, "../../nodes")
    assert len(fake.requests) == before


def test_the_command_prints_the_plan_for_a_named_pod(
    cluster: tuple[DraApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, config = cluster
    code = main(["kube", "claim-advice", "--pod", f"{NS}/{POD}", "--kubeconfig", str(config)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("#!/bin/sh")
    assert "resourceclaimtemplates" in out and "deployments.apps llm-train" in out
    assert "two-gpus-pcieroot" in out
    assert not list(fake.writes())  # printed, never sent


def test_the_command_finds_misaligned_pods_in_prometheus(
    cluster: tuple[DraApiServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = cluster
    vector = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"namespace": NS, "pod": POD}, "value": [0, "1"]}],
        },
    }

    def route(request: Request) -> tuple[int, bytes]:
        assert request.path == "/api/v1/query"
        return 200, json.dumps(vector).encode()

    with FakeServer(route).run() as prometheus:
        code = main(
            ["kube", "claim-advice", "--prometheus", prometheus.url, "--kubeconfig", str(config),
             "--format", "json"]
        )  # fmt: skip
        (asked,) = prometheus.requests
    assert code == 0
    assert "toposcope_kubelet_device_numa_aligned" in asked.params["query"]
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["pod"] == f"{NS}/{POD}"
    (change,) = entry["changes"]
    assert validate(change["resource_claim_template"], KUBERNETES, strict=True) == KUBERNETES
    assert change["owner"] == {"kind": "Deployment", "name": "llm-train"}


def test_the_command_without_pods_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kube", "claim-advice"]) == 2
    assert "--pod" in capsys.readouterr().err
