"""The exporter on the GPU node whose GPUs the kubelet hands out through ResourceClaims.

The in-process kubelet answers ``dynamic_resources`` (tests/fixtures/podresources/
gpu-node-dra.json); with ``--kubernetes.dra-slices`` the exporter resolves each claimed device
through the node's ResourceSlices, served by the contract server in the shapes NVIDIA's DRA
driver and dra-driver-cpu publish (tests/fixtures/dra/gpu-node-1.yaml). The trainer holds a
GPU on its own NUMA node and one on the other: the first is aligned, the second is not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers import FIXTURES
from tests.kube.fake_apiserver import served_kubeconfig
from tests.kube.fake_dra import DraApiServer
from tests.podresources.server import GPU_NODE_DRA, NODE_ROOT, PodResourcesServer
from tests.podresources.test_exporter import Rows, parse, success
from toposcope.cli import main
from toposcope.errors import ConfigError
from toposcope.host.podresources.slices import SliceDirectory
from toposcope.kubeapi.resourceslices import SliceDevice

NODE = "gpu-node-1"
CLAIM = "llm-train-0-gpus-x7k2p"


@pytest.fixture
def dra_kubelet(socket_dir: Path) -> Iterator[PodResourcesServer]:
    with PodResourcesServer(socket_dir / "kubelet.sock", GPU_NODE_DRA) as server:
        yield server


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[DraApiServer, Path]]:
    document = yaml.safe_load((FIXTURES / "dra" / "gpu-node-1.yaml").read_text())
    fake = DraApiServer(slices=document["items"])
    with served_kubeconfig(fake, tmp_path) as config:
        yield fake, config


def scrape(capsys: pytest.CaptureFixture[str], socket: Path, *extra: str) -> Rows:
    code = main(
        ["exporter", "--root", str(NODE_ROOT), "--nvml", "fake:pcie-4gpu",
         "--kubelet.pod-resources-socket", str(socket), *extra, "--print"]
    )  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    return parse(out)


@pytest.fixture
def dra_rows(
    dra_kubelet: PodResourcesServer,
    api: tuple[DraApiServer, Path],
    capsys: pytest.CaptureFixture[str],
) -> Rows:
    """One scrape of the DRA kubelet with the node's ResourceSlices read from the API."""
    _, config = api
    return scrape(
        capsys, dra_kubelet.socket,
        "--kubernetes.dra-slices", "--kubernetes.kubeconfig", str(config),
        "--kubernetes.node-name", NODE,
    )  # fmt: skip


def test_dra_gpus_are_attributed_to_their_pod_with_dcgm_exporters_labels(dra_rows: Rows) -> None:
    rows = dra_rows
    assert success(rows, "kubelet") == 1.0
    held = {
        (labels["pod"], labels["device_id"]): (
            labels["resource"],
            labels["gpu"],
            labels["numa_node"],
        )
        for labels, _ in rows["toposcope_kubelet_device_allocation_info"]
    }
    # the pod's GPUs, as a device-plugin pod's are: the MIG device on its parent GPU 3
    assert held == {
        ("llm-train-0", "gpu-0"): ("gpu.nvidia.com", "0", "0"),
        ("llm-train-0", "gpu-2"): ("gpu.nvidia.com", "2", "1"),
        ("nginx-debug", "gpu-3-mig-1g10gb-19-6"): ("gpu.nvidia.com", "3", ""),
    }
    info = {
        labels["dra_device_name"]: labels for labels, _ in rows["toposcope_kubelet_dra_device_info"]
    }
    assert (info["gpu-0"]["gpu"], info["gpu-0"]["numa_node"]) == ("0", "0")
    assert {k: info["gpu-2"][k] for k in info["gpu-2"] if k.startswith("dra_")} == {
        "dra_claim_namespace": "research",
        "dra_claim_name": CLAIM,
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": NODE,
        "dra_device_name": "gpu-2",
        "dra_mig_profile": "",
        "dra_mig_device_uuid": "",
    }
    assert (info["gpu-2"]["gpu"], info["gpu-2"]["pcie_root"]) == ("2", "pci0000:7a")
    mig = info["gpu-3-mig-1g10gb-19-6"]
    assert (mig["gpu"], mig["dra_mig_profile"], mig["container"]) == ("3", "1g.10gb", "nginx")
    assert mig["dra_mig_device_uuid"] == "MIG-0b1d6f3e-2c4a-5e8b-9a7d-1f2e3d4c5b6a"


def test_a_dra_gpu_off_the_exclusive_cpus_node_is_misaligned_by_slit_distance(
    dra_rows: Rows,
) -> None:
    rows = dra_rows
    aligned = {
        (labels["device_id"], labels["against"]): value
        for labels, value in rows["toposcope_kubelet_device_numa_aligned"]
        if labels["source"] == "dra"
    }
    # trainer: exclusive CPUs 4-7 and cpuset 4-7 on node 1 (the cgroup's cpuset files)
    for against in ("exclusive_cpus", "cpuset_cpus", "cpuset_mems"):
        assert aligned[("gpu-0", against)] == 0.0
        assert aligned[("gpu-2", against)] == 1.0
    distance = {
        (labels["device_id"], labels["against"]): (value, labels["tier"])
        for labels, value in rows["toposcope_kubelet_device_numa_distance"]
    }
    assert distance[("gpu-0", "exclusive_cpus")] == (21.0, "system")
    assert distance[("gpu-2", "exclusive_cpus")] == (10.0, "numa")
    roots = {
        labels["dra_claim_name"]: value
        for labels, value in rows["toposcope_kubelet_dra_claim_pcie_roots"]
    }
    assert roots == {CLAIM: 2.0, "nginx-debug-mig-q2w9r": 1.0}


def test_without_the_slices_dra_devices_are_named_but_not_placed(
    dra_kubelet: PodResourcesServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = scrape(capsys, dra_kubelet.socket)
    names = {
        (labels["dra_device_name"], labels["gpu"], labels["numa_node"])
        for labels, _ in rows["toposcope_kubelet_dra_device_info"]
    }
    assert names == {("gpu-0", "", ""), ("gpu-2", "", ""), ("gpu-3-mig-1g10gb-19-6", "", "")}
    assert "toposcope_kubelet_device_numa_aligned" not in rows


def test_device_plugin_gpus_are_checked_the_same_way(
    kubelet: PodResourcesServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plain fixture: the plugin's GPUs on node 1 with the exclusive CPUs: aligned."""
    rows = scrape(capsys, kubelet.socket)
    aligned = {
        (labels["source"], labels["device_id"][-3:], labels["against"]): value
        for labels, value in rows["toposcope_kubelet_device_numa_aligned"]
    }
    assert aligned[("device_plugin", "d03", "exclusive_cpus")] == 1.0
    assert aligned[("device_plugin", "d04", "cpuset_cpus")] == 1.0
    assert {source for source, _, _ in aligned} == {"device_plugin"}


def test_the_slices_are_read_again_only_when_due_or_a_device_is_unknown() -> None:
    now = [0.0]
    reads: list[int] = []
    gpu = SliceDevice("gpu.nvidia.com", "n", "gpu-0")

    def fetch() -> dict[tuple[str, str, str], SliceDevice]:
        reads.append(1)
        if len(reads) == 3:
            raise ConfigError("API server unreachable")
        return {gpu.key: gpu}

    directory = SliceDirectory(fetch, refresh=60, min_interval=10, clock=lambda: now[0])
    assert directory.devices() == {gpu.key: gpu}
    now[0] = 5
    directory.devices([("gpu.nvidia.com", "n", "gpu-9")])  # unknown, but too soon
    assert len(reads) == 1
    now[0] = 11
    directory.devices([("gpu.nvidia.com", "n", "gpu-9")])  # unknown and allowed
    assert len(reads) == 2
    now[0] = 80
    assert directory.devices() == {gpu.key: gpu}  # the read failed: the last devices kept
    assert len(reads) == 3


def test_a_kubeconfig_without_an_api_option_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["exporter", "--root", str(NODE_ROOT), "--kubernetes.kubeconfig", str(tmp_path),
                 "--print"])  # fmt: skip
    assert code == 2
    assert "--kubernetes.dra-slices" in capsys.readouterr().err


def test_a_dra_mig_device_names_its_parent_gpu_and_gpu_instance(
    dra_kubelet: PodResourcesServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the fake MIG machine: nginx's MIG device is instance 13 (1g.10gb) of GPU 0."""
    document = yaml.safe_load((FIXTURES / "dra" / "gpu-node-1.yaml").read_text())
    mig = document["items"][0]["spec"]["devices"][2]
    mig["attributes"]["parentUUID"] = {"string": "GPU-1f2e3d4c-0001-4a5b-8c7d-9e0f1a2b3c01"}
    mig["attributes"]["uuid"] = {"string": "MIG-7c1d0a9e-dddd-5b2c-9d3e-4f5a6b7c8d03"}
    with served_kubeconfig(DraApiServer(slices=document["items"]), tmp_path) as config:
        code = main(
            ["exporter", "--root", str(NODE_ROOT), "--nvml", "fake:mig",
             "--kubelet.pod-resources-socket", str(dra_kubelet.socket), "--kubernetes.dra-slices",
             "--kubernetes.kubeconfig", str(config), "--kubernetes.node-name", NODE, "--print"]
        )  # fmt: skip
    assert code == 0
    rows = parse(capsys.readouterr()[0])
    (labels,) = [
        labels
        for labels, _ in rows["toposcope_kubelet_dra_device_info"]
        if labels["dra_device_name"] == "gpu-3-mig-1g10gb-19-6"
    ]
    assert (labels["gpu"], labels["GPU_I_ID"], labels["dra_mig_profile"]) == ("0", "13", "1g.10gb")
    assert labels["dra_mig_device_uuid"] == "MIG-7c1d0a9e-dddd-5b2c-9d3e-4f5a6b7c8d03"
    # the same GPU instance is on toposcope_gpu_info, as dcgm-exporter names it
    instances = {
        (g["gpu"], g["GPU_I_ID"], g["GPU_I_PROFILE"]) for g, _ in rows["toposcope_gpu_info"]
    }
    assert ("0", "13", "1g.10gb") in instances
