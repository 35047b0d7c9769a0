"""Where a pending pod's unallocated claim fits best, from the cluster's slices and claims.

Two nodes publish GPUs through NVIDIA's DRA driver: gpu-node-1 (tests/fixtures/dra/
gpu-node-1.yaml: two free GPUs under two PCIe roots, a MIG device, dra-driver-cpu groups) and
gpu-node-2 (four GPUs, two per root, one of them held by another pod's claim). A pod asking
for two GPUs of the driver's ``gpu.nvidia.com`` class (its DeviceClass as the driver's Helm
chart ships it) fits best under gpu-node-2's second root; the affinity and the constraint of
the advice validate against the Kubernetes 1.34 schemas.
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

from tests.helpers import FIXTURES
from tests.kube.fake_apiserver import kubeconfig, serve
from tests.kube.fake_dra import DraApiServer
from toposcope.cli import main
from toposcope.kubeapi.claim_placement import (
    DeviceFilter,
    Request,
    class_filter,
    placements,
)
from toposcope.kubeapi.claim_reader import advise_pod
from toposcope.kubeapi.client import from_kubeconfig
from toposcope.kubeapi.resourceslices import PCIE_ROOT, cluster_devices

NS = "research"
#: NVIDIA's GPU DeviceClass (NVIDIA/k8s-dra-driver-gpu deployments/helm/.../deviceclass-gpu.yaml)
GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}


def second_node() -> dict[str, Any]:
    devices = [
        {"name": f"gpu-{i}", "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": f"GPU-00000000-0000-0000-0000-0000{i}"},
            PCIE_ROOT: {"string": "pci0000:15" if i < 2 else "pci0000:b0"}}}
        for i in range(4)
    ]  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-node-2-gpu.nvidia.com-q8w2e"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "gpu-node-2",
            "pool": {"name": "gpu-node-2", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def slices() -> list[dict[str, Any]]:
    document = yaml.safe_load((FIXTURES / "dra" / "gpu-node-1.yaml").read_text())
    return [*document["items"], second_node()]


def held_claim() -> dict[str, Any]:
    result = {
        "request": "gpus",
        "driver": "gpu.nvidia.com",
        "pool": "gpu-node-2",
        "device": "gpu-0",
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "other-gpus", "namespace": "default"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def pending_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llm-train-pending", "namespace": NS},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}],
            "containers": [
                {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                 "resources": {"claims": [{"name": "gpus"}]}}
            ],
        },
    }  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Path]:
    fake = DraApiServer(slices=slices())
    fake.claims[("default", "other-gpus")] = held_claim()
    fake.templates[(NS, "two-gpus")] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus", "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}},
    }  # fmt: skip
    fake.classes["gpu.nvidia.com"] = GPU_CLASS
    fake.add(pending_pod())
    running = serve(fake)
    config = tmp_path / "kubeconfig"
    config.write_text(kubeconfig(running.url), encoding="utf-8")
    try:
        yield config
    finally:
        running.stop()


def test_the_drivers_classes_give_driver_and_type() -> None:
    assert class_filter(GPU_CLASS) == DeviceFilter("gpu.nvidia.com", "gpu")
    cpu = {"spec": {"selectors": [{"cel": {"expression": 'device.driver == "dra.cpu"'}}]}}
    assert class_filter(cpu) == DeviceFilter("dra.cpu")
    odd = {"spec": {"selectors": [{"cel": {"expression": "device.driver == 'x.io' && true"}}]}}
    assert class_filter(odd) == DeviceFilter("x.io", "", partial=True)
    assert class_filter({"spec": {"selectors": []}}) is None


def test_a_pending_claim_fits_best_under_one_pcie_root_of_the_node_that_has_one(
    cluster: Path,
) -> None:
    advice = advise_pod(from_kubeconfig(cluster), NS, "llm-train-pending")
    ((claim, ranked),) = advice.placements
    assert claim == "gpus"
    best = ranked[0]
    assert (best.node, best.attribute, best.value) == ("gpu-node-2", PCIE_ROOT, "pci0000:b0")
    assert dict(best.devices) == {"gpus": ("gpu-2", "gpu-3")}
    # gpu-node-1's two free GPUs sit under two roots: the node only, ranked after
    assert [(p.node, p.attribute) for p in ranked[1:]] == [("gpu-node-1", "")]
    pod = copy.deepcopy(pending_pod())
    pod["spec"]["affinity"] = best.pod_affinity()
    assert validate(pod, "1.34", strict=True) == "1.34"
    assert best.constraint() == {"matchAttribute": PCIE_ROOT}


def test_held_devices_are_not_offered_and_a_claim_that_fits_nowhere_says_so() -> None:
    devices, nodes = cluster_devices(slices())
    gpu = {"gpu.nvidia.com": DeviceFilter("gpu.nvidia.com", "gpu")}
    held = [("gpu.nvidia.com", "gpu-node-2", f"gpu-{i}") for i in (1, 2, 3)]
    ranked = placements([Request("gpus", "gpu.nvidia.com", 2)], gpu, devices, held, nodes)
    assert [(p.node, p.attribute) for p in ranked] == [("gpu-node-1", "")]
    assert placements([Request("gpus", "gpu.nvidia.com", 5)], gpu, devices, [], nodes) == []


def test_the_command_prints_the_placement_of_a_pending_pod(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["kube", "claim-advice", "--pod", f"{NS}/llm-train-pending",
                 "--kubeconfig", str(cluster), "--format", "json"])  # fmt: skip
    assert code == 0
    (entry,) = json.loads(capsys.readouterr().out)
    first = entry["placements"]["gpus"][0]
    assert first["node"] == "gpu-node-2" and first["devices"] == {"gpus": ["gpu-2", "gpu-3"]}
    assert first["constraint"] == {"matchAttribute": PCIE_ROOT}
