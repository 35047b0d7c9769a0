"""The pod-resources client against a real gRPC server on a unix socket.

The server speaks the repository's api.proto and answers what a GPU node's kubelet answers
(tests/fixtures/podresources/); the client's records, its handling of older kubelets
(no GetAllocatableResources before 1.21, no memory before 1.22), of a missing socket, of a
hung kubelet and of a kubelet restart are checked here.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.podresources.server import GPU_NODE_121, GPU_NODE_DRA, PodResourcesServer
from toposcope.host.podresources.client import KubeletUnavailable, PodResourcesClient
from toposcope.host.podresources.records import (
    ClaimedDevice,
    ContainerAllocation,
    DeviceAllocation,
    MemoryAllocation,
)

GIB = 1024**3
GPU2 = "GPU-9e7c3a10-cab2-4c55-8d21-6f0a1b2c3d03"
GPU3 = "GPU-9e7c3a10-e1b2-4c55-8d21-6f0a1b2c3d04"


def test_list_gives_typed_records_of_every_container(kubelet: PodResourcesServer) -> None:
    client = PodResourcesClient(str(kubelet.socket))
    trainer, nginx = client.list()
    assert trainer == ContainerAllocation(
        namespace="research",
        pod="llm-train-0",
        container="trainer",
        devices=(
            DeviceAllocation("nvidia.com/gpu", (GPU2,), (1,)),
            DeviceAllocation("nvidia.com/gpu", (GPU3,), (1,)),
        ),
        cpu_ids=(4, 5, 6, 7),
        memory=(
            MemoryAllocation("memory", 16 * GIB, (1,)),
            MemoryAllocation("hugepages-2Mi", 2 * GIB, (1,)),
        ),
    )
    # BestEffort: nothing exclusive, nothing allocated
    assert nginx == ContainerAllocation("default", "nginx-debug", "nginx")
    client.close()


def test_allocatable_resources_per_numa_node(kubelet: PodResourcesServer) -> None:
    answer = PodResourcesClient(str(kubelet.socket)).read()
    assert answer.allocatable is not None
    assert answer.allocatable.cpu_ids == (1, 2, 3, 4, 5, 6, 7)
    assert [d.numa_nodes for d in answer.allocatable.devices] == [(0,), (0,), (1,), (1,)]
    assert {m.memory_type for m in answer.allocatable.memory} == {"memory", "hugepages-2Mi"}
    found = answer.find("research", "llm-train-0", "trainer")
    assert found is not None and found.cpu_ids == (4, 5, 6, 7)
    assert answer.find("research", "llm-train-0", "sidecar") is None
    assert kubelet.calls == ["List", "GetAllocatableResources"]


def test_a_kubelet_before_1_21_has_no_allocatable_call(socket_dir: Path) -> None:
    """UNIMPLEMENTED is an answer, not a failure: None, and the call is not repeated."""
    with PodResourcesServer(socket_dir / "k.sock", allocatable_implemented=False) as server:
        client = PodResourcesClient(str(server.socket))
        first = client.read()
        second = client.read()
    assert first.allocatable is None and second.allocatable is None
    assert len(first.containers) == 2
    assert server.calls == ["List", "GetAllocatableResources", "List"]


def test_a_kubelet_before_1_22_sends_no_memory(socket_dir: Path) -> None:
    with PodResourcesServer(socket_dir / "k.sock", GPU_NODE_121) as server:
        answer = PodResourcesClient(str(server.socket)).read()
    trainer = answer.containers[0]
    assert trainer.memory == ()
    assert trainer.cpu_ids == (4, 5, 6, 7)
    assert answer.allocatable is not None and answer.allocatable.memory == ()


def test_dra_devices_come_from_dynamic_resources(socket_dir: Path) -> None:
    """A 1.34 kubelet: the trainer's GPUs and nginx's MIG device are ResourceClaim devices."""
    with PodResourcesServer(socket_dir / "k.sock", GPU_NODE_DRA) as server:
        trainer, nginx = PodResourcesClient(str(server.socket)).list()
    assert trainer.devices == ()
    assert trainer.dynamic == (
        ClaimedDevice(
            "research",
            "llm-train-0-gpus-x7k2p",
            "gpu.nvidia.com",
            "gpu-node-1",
            "gpu-0",
            ("k8s.gpu.nvidia.com/claim=5f1c0e7a-gpu-0",),
        ),
        ClaimedDevice(
            "research",
            "llm-train-0-gpus-x7k2p",
            "gpu.nvidia.com",
            "gpu-node-1",
            "gpu-2",
            ("k8s.gpu.nvidia.com/claim=5f1c0e7a-gpu-2",),
        ),
    )
    assert [d.key for d in nginx.dynamic] == [
        ("gpu.nvidia.com", "gpu-node-1", "gpu-3-mig-1g10gb-19-6")
    ]
    assert nginx.dynamic[0].share_id == ""


def test_get_answers_one_pod_and_unimplemented_is_remembered(socket_dir: Path) -> None:
    with PodResourcesServer(socket_dir / "k.sock", GPU_NODE_DRA) as server:
        client = PodResourcesClient(str(server.socket))
        (nginx,) = client.get("default", "nginx-debug") or ()
        with pytest.raises(KubeletUnavailable, match="NOT_FOUND"):
            client.get("default", "gone")
    assert nginx.dynamic[0].device == "gpu-3-mig-1g10gb-19-6"
    with PodResourcesServer(socket_dir / "k.sock", get_implemented=False) as old:
        client = PodResourcesClient(str(old.socket))
        assert client.get("default", "nginx-debug") is None
        assert client.get("default", "nginx-debug") is None
    assert old.calls == ["Get"]


def test_a_missing_socket_is_named(socket_dir: Path) -> None:
    client = PodResourcesClient(str(socket_dir / "kubelet.sock"))
    with pytest.raises(KubeletUnavailable, match=r"no kubelet socket at .*kubelet\.sock"):
        client.list()


def test_a_file_that_is_no_socket_is_named(socket_dir: Path) -> None:
    path = socket_dir / "kubelet.sock"
    path.write_text("not a socket")
    with pytest.raises(KubeletUnavailable, match="is not a socket"):
        PodResourcesClient(str(path)).list()


def test_a_hung_kubelet_fails_at_the_deadline(kubelet: PodResourcesServer) -> None:
    kubelet.answer_now.clear()
    client = PodResourcesClient(str(kubelet.socket), timeout=0.2)
    with pytest.raises(KubeletUnavailable, match="DEADLINE_EXCEEDED"):
        client.list()
    kubelet.answer_now.set()
    assert len(client.list()) == 2


def test_a_restarted_kubelet_is_reached_on_the_next_call(socket_dir: Path) -> None:
    socket = socket_dir / "kubelet.sock"
    server = PodResourcesServer(socket).start()
    client = PodResourcesClient(str(socket))
    assert len(client.list()) == 2
    server.stop()
    with pytest.raises(KubeletUnavailable, match="no kubelet socket"):
        client.list()
    # the new kubelet is a 1.20 one: GetAllocatableResources is asked of it anew
    restarted = PodResourcesServer(socket, allocatable_implemented=False).start()
    try:
        answer = client.read()
    finally:
        restarted.stop()
    assert len(answer.containers) == 2 and answer.allocatable is None
    assert restarted.calls == ["List", "GetAllocatableResources"]


def test_a_kubelet_that_died_leaving_its_socket_file_fails_the_call(socket_dir: Path) -> None:
    """The socket file is still there but nobody listens on it: UNAVAILABLE, named."""
    path = socket_dir / "kubelet.sock"
    server = PodResourcesServer(path).start()
    client = PodResourcesClient(str(path))
    assert len(client.list()) == 2
    server.stop()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as orphan:
        orphan.bind(str(path))  # bound, never listening: connections are refused
        with pytest.raises(KubeletUnavailable, match=r"List on .*: UNAVAILABLE"):
            client.list()
