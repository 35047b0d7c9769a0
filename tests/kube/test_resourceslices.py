"""A node's DRA devices read through the core API client from the contract server.

The slices are the shapes NVIDIA's DRA driver for GPUs and dra-driver-cpu publish
(tests/fixtures/dra/, sources and licences in each file's header), served in whichever
``resource.k8s.io`` versions a cluster of a given age serves, with field selectors and paging.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import FIXTURES
from tests.kube.fake_apiserver import served_kubeconfig
from tests.kube.fake_dra import DraApiServer
from toposcope.kubeapi.client import KubeApi, KubeApiError, from_kubeconfig
from toposcope.kubeapi.resourceslices import (
    ResourceSliceError,
    devices_of,
    read_node_devices,
    read_slices,
)

DRA = FIXTURES / "dra"
AKS_GPU = "aks-gpupool-15127565-vmss000002"
AKS_MIG = "aks-migpool-68842551-vmss000001"
CPU_NODE = "dra-driver-cpu-worker"


def load(name: str) -> list[dict[str, Any]]:
    """The ResourceSlices of one fixture file (a List or a single object)."""
    document = yaml.safe_load((DRA / name).read_text(encoding="utf-8"))
    return list(document["items"]) if document["kind"] == "List" else [document]


def all_slices() -> list[dict[str, Any]]:
    return load("nvidia-a100-mig.yaml") + load("dra-driver-cpu-grouped.yaml")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[DraApiServer, Path]]:
    fake = DraApiServer(slices=all_slices())
    with served_kubeconfig(fake, tmp_path) as config:
        yield fake, config


def test_a_full_gpu_is_named_by_its_uuid_pci_address_and_pcie_root(
    cluster: tuple[DraApiServer, Path],
) -> None:
    fake, config = cluster
    devices = read_node_devices(from_kubeconfig(config), AKS_GPU)
    (gpu,) = devices.values()
    assert gpu.key == ("gpu.nvidia.com", AKS_GPU, "gpu-1")
    assert (gpu.kind, gpu.uuid, gpu.gpu_uuid) == (
        "gpu",
        "GPU-13719f71-412c-d11e-b236-a262f530a4fc",
        "GPU-13719f71-412c-d11e-b236-a262f530a4fc",
    )
    assert gpu.pci_bus_id == "0001:00:00.0"
    assert gpu.pcie_roots == ("pci0001:00",)
    assert gpu.numa_node is None  # NVIDIA's driver publishes none for a full GPU
    assert gpu.mig_profile == ""
    # the node's slices only: the selector went to the server
    (request,) = [r for r in fake.requests if "resourceslices" in r.path]
    assert request.query["fieldSelector"] == [f"spec.nodeName={AKS_GPU}"]


def test_a_mig_device_names_its_parent_gpu_and_profile(
    cluster: tuple[DraApiServer, Path],
) -> None:
    _, config = cluster
    (mig,) = read_node_devices(from_kubeconfig(config), AKS_MIG).values()
    assert mig.kind == "mig"
    assert mig.gpu_uuid == "GPU-ddf64803-f421-0e5b-883e-cd752de16db7"
    assert mig.uuid.startswith("MIG-")
    assert mig.mig_profile == "1g.10gb"
    assert mig.pci_bus_id == "0001:00:00.0"  # the driver's own pcieBusID of older releases


def test_dra_driver_cpu_groups_carry_the_standard_numa_node_and_several_roots(
    cluster: tuple[DraApiServer, Path],
) -> None:
    _, config = cluster
    devices = read_node_devices(from_kubeconfig(config), CPU_NODE)
    assert {d.name: d.numa_node for d in devices.values()} == {
        "cpudevnuma000": 0,
        "cpudevnuma001": 1,
    }
    group = devices[("dra.cpu", CPU_NODE, "cpudevnuma001")]
    assert group.pcie_roots == ("pci0000:40", "pci0000:50")
    assert group.own("socketID") == 0 and group.own("smtEnabled") is True


@pytest.mark.parametrize(
    ("served", "version"),
    [
        (("v1", "v1beta2", "v1beta1"), "v1"),
        (("v1beta2", "v1beta1"), "v1beta2"),
        (("v1beta1",), "v1beta1"),
        ((), ""),
    ],
)
def test_the_newest_served_version_is_read_and_v1beta1_devices_nest_under_basic(
    tmp_path: Path, served: tuple[str, ...], version: str
) -> None:
    fake = DraApiServer(slices=all_slices(), served=served)
    with served_kubeconfig(fake, tmp_path) as config:
        api = from_kubeconfig(config)
        found, slices = read_slices(api, AKS_MIG)
        devices = read_node_devices(api, AKS_MIG)
    assert found == version
    if not served:
        assert (slices, devices) == ([], {})
        return
    if version == "v1beta1":
        assert "basic" in slices[0]["spec"]["devices"][0]
    (mig,) = devices.values()
    assert mig.mig_profile == "1g.10gb"


def test_pages_are_followed(tmp_path: Path) -> None:
    many = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"s{i}"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 3},
                "devices": [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{i}"}}}],
            },
        }
        for i in range(3)
    ]
    fake = DraApiServer(slices=many, page_size=1)
    with served_kubeconfig(fake, tmp_path) as config:
        devices = read_node_devices(from_kubeconfig(config), "n1")
    assert sorted(d.name for d in devices.values()) == ["gpu-0", "gpu-1", "gpu-2"]
    assert len([r for r in fake.requests if "resourceslices" in r.path]) == 3


def test_bad_names_are_refused_and_bad_values_left_out() -> None:
    base = load("nvidia-a100-mig.yaml")[0]
    base["spec"]["devices"][0]["attributes"]["uuid"] = {"string": "GPU 1; rm -rf"}
    base["spec"]["devices"][0]["attributes"]["bad name!"] = {"string": "x"}
    (device,) = devices_of([base], AKS_GPU).values()
    assert device.uuid == "" and "bad name!" not in device.attributes
    base["spec"]["devices"][0]["name"] = "../etc"
    with pytest.raises(ResourceSliceError, match="device name"):
        devices_of([base], AKS_GPU)


def test_a_bad_node_name_is_refused_before_any_request() -> None:
    with pytest.raises(KubeApiError, match="not a node name"):
        read_slices(KubeApi("http://127.0.0.1:9"), "a/b?c")
