"""What a placement says about the devices: the device plugin picks them, and where the node
publishes DRA ResourceSlices with locality attributes, the ResourceClaim constraint that pins
the set.

The contract server (tests/kube/fake_apiserver.py) serves ResourceSlices shaped as
``resource.k8s.io/v1`` defines them (k8s.io/api ``resource/v1`` types), each validated with
``kubernetes-validate`` before it is served; the device attributes follow NVIDIA's DRA driver
for GPUs (k8s-dra-driver-gpu: ``index``, ``uuid``, ``productName``) plus the standard
``resource.kubernetes.io/pcieRoot``. The constraint the detail names is put in a ResourceClaim
that must validate too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import validate  # type: ignore[import-untyped]

from tests.kube.fake_apiserver import Running
from toposcope.advisor.rmclients import make_resource_manager
from toposcope.kube.devices import (
    DEVICE_PLUGIN_NOTE,
    PCIE_ROOT,
    locality_groups,
    placement_detail,
)
from toposcope.kube.manager import KubernetesResourceManager
from toposcope.rm import ActionKind, ActionRequest

#: the first version serving resource.k8s.io/v1 (DRA GA)
DRA_VERSION = "1.34"


def gpu_slice(node: str, roots: list[str], *, numa: list[int] | None = None) -> dict[str, Any]:
    """A ResourceSlice of NVIDIA's DRA driver: one GPU per entry of ``roots`` (its PCIe root)."""
    devices = []
    for index, root in enumerate(roots):
        attributes: dict[str, Any] = {
            "index": {"int": index},
            "uuid": {"string": f"GPU-{index:08d}-0000-0000-0000-000000000000"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        }
        if root:
            attributes[PCIE_ROOT] = {"string": root}
        if numa is not None:
            attributes["gpu.nvidia.com/numaNode"] = {"int": numa[index]}
        devices.append({"name": f"gpu-{index}", "attributes": attributes})
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-abcde"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
    validate(body, DRA_VERSION, strict=True)
    return body


def manager_of(config: Path) -> KubernetesResourceManager:
    manager = make_resource_manager("kubernetes", options={"kubernetes_kubeconfig": str(config)})
    assert isinstance(manager, KubernetesResourceManager)
    return manager


def place(config: Path, request_id: str) -> str:
    """Place the gated pod ml/waiting (1 GPU) on gpu-2; the placement's detail."""
    manager = manager_of(config)
    state = manager.apply(ActionRequest(request_id, ActionKind.PLACE, "ml/waiting", "gpu-2"))
    return state.note


def constraint_in(detail: str) -> dict[str, Any]:
    found = re.search(r"spec\.devices\.constraints: (\{[^}]*\})", detail)
    assert found, detail
    constraint: dict[str, Any] = json.loads(found.group(1))
    return constraint


def test_without_dra_the_detail_says_the_device_plugin_picks(config: Path) -> None:
    detail = place(config, "no-dra")
    assert DEVICE_PLUGIN_NOTE in detail
    assert "gpu-2" in detail
    assert "matchAttribute" not in detail


def test_with_dra_the_detail_names_the_pcie_root_constraint(
    apiserver: Running, config: Path
) -> None:
    roots = ["pci0000:00"] * 4 + ["pci0000:80"] * 4
    apiserver.fake.add(gpu_slice("gpu-2", roots))
    apiserver.fake.add(gpu_slice("gpu-1", ["pci0000:00"]))
    detail = place(config, "dra")
    assert DEVICE_PLUGIN_NOTE in detail
    constraint = constraint_in(detail)
    assert constraint == {"matchAttribute": PCIE_ROOT}
    assert "has 4 devices" in detail
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "llm-train-gpus", "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4},
                    }
                ],
                "constraints": [constraint],
            }
        },
    }
    validate(claim, DRA_VERSION, strict=True)
    reads = [r for r in apiserver.fake.requests if r.path.endswith("/resourceslices")]
    assert reads and all(r.method == "GET" for r in reads)


def test_a_numa_attribute_serves_when_no_pcie_root_fits() -> None:
    slices = [gpu_slice("gpu-2", ["a", "b", "c", "d"], numa=[0, 0, 1, 1])]
    groups = {g.attribute: g.largest for g in locality_groups(slices, "gpu-2")}
    assert groups == {PCIE_ROOT: 1, "gpu.nvidia.com/numaNode": 2}
    assert locality_groups(slices, "gpu-1") == []


@pytest.mark.parametrize(("wanted", "named"), [(2, "gpu.nvidia.com/numaNode"), (3, "")])
def test_the_constraint_fits_the_request_or_the_detail_says_none_does(
    wanted: int, named: str
) -> None:
    slices = [gpu_slice("gpu-2", ["a", "b", "c", "d"], numa=[0, 0, 1, 1])]
    detail = placement_detail(slices, "gpu-2", wanted)
    if named:
        assert constraint_in(detail) == {"matchAttribute": named}
    else:
        assert "unallocatable" in detail and 'matchAttribute":' not in detail


def test_a_device_without_locality_gives_no_constraint(apiserver: Running, config: Path) -> None:
    apiserver.fake.add(gpu_slice("gpu-2", ["", ""]))
    detail = place(config, "no-locality")
    assert DEVICE_PLUGIN_NOTE in detail and "matchAttribute" not in detail
