"""The NodeResourceTopology builder: zones, SLIT costs, resources per zone, attributes.

Inputs are measurements from fixtures: the pod-resources GPU node (its kubelet's answers and
its host tree) and a real machine's sysfs from the hwloc corpus for a non-uniform SLIT.
Every object built is checked against the CRD schema copy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.helpers import HWLOC_LINUX, extract_snapshot
from tests.kube.fake_nrt import nrt_schema
from tests.nrt.conftest import KUBELET_CONFIG, NODE
from tests.topology.conftest import BUILDER_READS
from toposcope.exporters.nrt.builder import NodeRef, NotMeasured, build_nrt
from toposcope.exporters.nrt.fingerprint import pods_fingerprint
from toposcope.exporters.nrt.kubeletconfig import (
    TopologyManagerConfig,
    from_kubelet_config,
)
from toposcope.host.podresources.records import (
    Allocatable,
    ContainerAllocation,
    MemoryAllocation,
    PodResources,
)
from toposcope.topology.model import Topology
from toposcope.topology.sysfs import build_from_sysfs

GIB = 1024**3
REF = NodeRef(NODE, "uid-node-1")
CONFIGZ = from_kubelet_config(KUBELET_CONFIG, "configz")


def resources(body: dict[str, Any], zone: str) -> dict[str, tuple[str, str, str]]:
    (found,) = [z for z in body["zones"] if z["name"] == zone]
    return {
        r["name"]: (r["capacity"], r["allocatable"], r["available"]) for r in found["resources"]
    }


def valid(body: dict[str, Any]) -> dict[str, Any]:
    jsonschema.Draft7Validator(nrt_schema()).validate(body)
    return body


def test_the_gpu_node_zones_hold_what_its_kubelet_and_sysfs_measure(
    gpu_topology: Topology, gpu_answer: PodResources
) -> None:
    built = build_nrt(gpu_topology, gpu_answer, CONFIGZ, REF)
    body = valid(built.body)
    assert [z["name"] for z in body["zones"]] == ["node-0", "node-1"]
    assert {z["type"] for z in body["zones"]} == {"Node"}
    assert body["zones"][0]["costs"] == [
        {"name": "node-0", "value": 10},
        {"name": "node-1", "value": 21},
    ]
    # CPU 0 is reserved; the trainer holds CPUs 4-7 and GPUs 2-3 (node 1) exclusively
    assert resources(body, "node-0") == {
        "cpu": ("4", "3", "3"),
        "hugepages-2Mi": (str(4 * GIB), str(4 * GIB), str(4 * GIB)),
        "nvidia.com/gpu": ("2", "2", "2"),
    }
    assert resources(body, "node-1") == {
        "cpu": ("4", "4", "0"),
        "hugepages-2Mi": (str(4 * GIB), str(4 * GIB), str(2 * GIB)),
        "nvidia.com/gpu": ("2", "2", "0"),
    }
    # the fixture's kubelet claims more memory per node than its sysfs has: not written
    assert sum("memory left out of node-" in note for note in built.notes) == 2


def test_memory_per_zone_is_allocatable_minus_what_containers_hold(
    gpu_topology: Topology, gpu_answer: PodResources
) -> None:
    bigger = dataclasses.replace(
        gpu_topology,
        numa_nodes=tuple(
            dataclasses.replace(n, memory_bytes=64 * GIB) for n in gpu_topology.numa_nodes
        ),
    )
    body = valid(build_nrt(bigger, gpu_answer, CONFIGZ, REF).body)
    assert resources(body, "node-0")["memory"] == (str(64 * GIB), "32212254720", "32212254720")
    assert resources(body, "node-1")["memory"] == (
        str(64 * GIB),
        "33285996544",
        str(33285996544 - 16 * GIB),
    )


def test_attributes_are_the_kubelets_settings_and_the_pods_fingerprint(
    gpu_topology: Topology, gpu_answer: PodResources
) -> None:
    body = build_nrt(gpu_topology, gpu_answer, CONFIGZ, REF).body
    assert body["attributes"] == [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "pod"},
        {
            "name": "nodeTopologyPodsFingerprint",
            "value": pods_fingerprint([("research", "llm-train-0"), ("default", "nginx-debug")]),
        },
        {"name": "nodeTopologyPodsFingerprintMethod", "value": "all"},
    ]
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "uid-node-1"}
    ]
    assert body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "toposcope"}


def test_settings_the_kubelet_does_not_state_are_left_out(
    gpu_topology: Topology, gpu_answer: PodResources
) -> None:
    unstated = TopologyManagerConfig(None, None, "kubelet.yaml")
    built = build_nrt(gpu_topology, gpu_answer, unstated, REF)
    assert [a["name"] for a in valid(built.body)["attributes"]] == [
        "nodeTopologyPodsFingerprint",
        "nodeTopologyPodsFingerprintMethod",
    ]
    assert "topologyManagerPolicy left out: kubelet.yaml does not state it" in built.notes


def test_costs_are_a_real_machines_slit(tmp_path: Path) -> None:
    root = extract_snapshot(HWLOC_LINUX / "16ia64-8n2s.tar.bz2", tmp_path, only=BUILDER_READS)
    topology = build_from_sysfs(root / "sys", root / "proc")
    body = valid(build_nrt(topology, PodResources((), Allocatable()), CONFIGZ, REF).body)
    assert len(body["zones"]) == 8
    zone1 = body["zones"][1]
    assert zone1["name"] == "node-1"
    assert [c["value"] for c in zone1["costs"]] == [25, 10, 25, 25, 29, 29, 29, 29]
    assert [c["name"] for c in zone1["costs"]] == [f"node-{i}" for i in range(8)]
    # without CPU or memory manager allocations nothing else is measured, so nothing is written
    assert all(z["resources"] == [] for z in body["zones"])


def test_memory_a_container_holds_across_nodes_is_left_out(
    gpu_topology: Topology, gpu_answer: PodResources
) -> None:
    spread = ContainerAllocation(
        "ml", "big-0", "main", memory=(MemoryAllocation("hugepages-2Mi", 6 * GIB, (0, 1)),)
    )
    answer = PodResources((*gpu_answer.containers, spread), gpu_answer.allocatable)
    built = build_nrt(gpu_topology, answer, CONFIGZ, REF)
    assert "hugepages-2Mi" not in resources(valid(built.body), "node-0")
    assert any(n.startswith("hugepages-2Mi left out: a container's") for n in built.notes)


def test_a_kubelet_without_allocatable_resources_gives_nothing_to_write(
    gpu_topology: Topology, gpu_answer: PodResources
) -> None:
    with pytest.raises(NotMeasured, match="GetAllocatableResources"):
        build_nrt(gpu_topology, PodResources(gpu_answer.containers, None), CONFIGZ, REF)
