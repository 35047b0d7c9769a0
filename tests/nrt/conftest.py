"""Fixtures of the NodeResourceTopology tests: the GPU node of the pod-resources fixtures
(its kubelet's answers and its host tree) and the contract server with the NRT resource.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kube.cluster import node
from tests.kube.fake_apiserver import Running, serve
from tests.kube.fake_nrt import NrtApiServer
from tests.podresources.conftest import kubelet, socket_dir
from tests.podresources.server import GPU_NODE, NODE_ROOT, load_answers
from toposcope.host.podresources.client import allocatable_of, containers_of
from toposcope.host.podresources.records import PodResources
from toposcope.topology.model import Topology
from toposcope.topology.sysfs import build_from_sysfs

#: the pod-resources fixtures: the GPU node's kubelet served on a unix socket
__all__ = ["kubelet", "socket_dir"]
NODE = "gpu-1"
#: what configz answers for a node whose kubelet aligns CPUs, memory and GPUs
KUBELET_CONFIG = {
    "kind": "KubeletConfiguration",
    "cpuManagerPolicy": "static",
    "memoryManagerPolicy": "Static",
    "topologyManagerPolicy": "single-numa-node",
    "topologyManagerScope": "pod",
}


@pytest.fixture(scope="session")
def gpu_answer() -> PodResources:
    """The GPU node's kubelet answer (``List`` and ``GetAllocatableResources``) as records."""
    listing, allocatable = load_answers(GPU_NODE)
    return PodResources(containers_of(listing), allocatable_of(allocatable))


@pytest.fixture(scope="session")
def gpu_topology() -> Topology:
    """The GPU node's topology from its host tree: CPUs 0-3 on node 0, 4-7 on node 1."""
    return build_from_sysfs(NODE_ROOT / "sys", NODE_ROOT / "proc")


@pytest.fixture
def apiserver() -> Iterator[Running]:
    """The contract server with node ``gpu-1`` and its kubelet's configuration."""
    fake = NrtApiServer(kubelet_configs={NODE: dict(KUBELET_CONFIG)})
    fake.add(node(NODE))
    running = serve(fake)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def fake(apiserver: Running) -> NrtApiServer:
    """The served contract server itself."""
    assert isinstance(apiserver.fake, NrtApiServer)
    return apiserver.fake
