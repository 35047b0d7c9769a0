"""Create-or-update of the NodeResourceTopology against the contract server (tests/kube).

Every object written is validated by the server against the CRD schema copy, with strict
field validation; ``fake.invalid`` lists any body that failed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.kube.fake_apiserver import Running
from tests.kube.fake_nrt import NrtApiServer
from tests.nrt.conftest import KUBELET_CONFIG, NODE
from toposcope.exporters.nrt.builder import NodeRef, build_nrt
from toposcope.exporters.nrt.kubeletconfig import from_kubelet_config
from toposcope.exporters.nrt.writer import NrtWriter, Outcome
from toposcope.host.podresources.records import PodResources
from toposcope.kubeapi.client import KubeApi, KubeApiStatusError
from toposcope.topology.model import Topology

CONFIGZ = from_kubelet_config(KUBELET_CONFIG, "configz")


def body_for(writer: NrtWriter, topology: Topology, answer: PodResources) -> dict[str, Any]:
    return build_nrt(topology, answer, CONFIGZ, NodeRef(NODE, writer.node_uid(NODE))).body


def nrt_writes(fake: NrtApiServer) -> list[str]:
    return [r.method for r in fake.writes() if "noderesourcetopologies" in r.path]


def test_create_then_nothing_then_update_with_the_resource_version(
    apiserver: Running, fake: NrtApiServer, gpu_topology: Topology, gpu_answer: PodResources
) -> None:
    writer = NrtWriter(KubeApi(apiserver.url))
    body = body_for(writer, gpu_topology, gpu_answer)
    assert writer.write(body) is Outcome.CREATED
    stored = fake.nrt(NODE)
    assert stored is not None
    assert stored["zones"] == body["zones"]
    assert (
        stored["metadata"]["ownerReferences"][0]["uid"]
        == fake.get("nodes", "", NODE)["metadata"]["uid"]
    )
    assert writer.write(body) is Outcome.UNCHANGED
    stored["metadata"]["labels"]["team"] = "infra"  # added by someone else: kept
    fewer = PodResources(gpu_answer.containers[1:], gpu_answer.allocatable)
    version = stored["metadata"]["resourceVersion"]
    assert writer.write(body_for(writer, gpu_topology, fewer)) is Outcome.UPDATED
    (put,) = [r for r in fake.writes() if r.method == "PUT"]
    assert put.body["metadata"]["resourceVersion"] == version
    assert put.query["fieldManager"] == ["toposcope-exporter"]
    updated = fake.nrt(NODE)
    assert updated is not None
    assert updated["metadata"]["labels"]["team"] == "infra"
    assert _fingerprint(updated) != _fingerprint(body)  # the fingerprint moved
    assert nrt_writes(fake) == ["POST", "PUT"]
    assert fake.invalid == []


class RacingServer(NrtApiServer):
    """Another client updates the object once, between our read and our write."""

    races = 1

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        if method == "PUT" and self.races:
            self.races -= 1
            stored = self.nrt(NODE)
            assert stored is not None
            self._store(("noderesourcetopologies", "", NODE), copy.deepcopy(stored), False)
        return super()._route(method, path, query, body)


def test_a_conflict_is_read_again_and_retried_once(
    gpu_topology: Topology, gpu_answer: PodResources
) -> None:
    from tests.kube.cluster import node
    from tests.kube.fake_apiserver import serve

    fake = RacingServer(kubelet_configs={})
    fake.add(node(NODE))
    running = serve(fake)
    try:
        writer = NrtWriter(KubeApi(running.url))
        body = body_for(writer, gpu_topology, gpu_answer)
        assert writer.write(body) is Outcome.CREATED
        fewer = PodResources(gpu_answer.containers[1:], gpu_answer.allocatable)
        assert writer.write(body_for(writer, gpu_topology, fewer)) is Outcome.UPDATED
        assert nrt_writes(fake) == ["POST", "PUT", "PUT"]
        fake.races = 2  # a conflict again after the retry: given up, with the server's word
        with pytest.raises(KubeApiStatusError, match="HTTP 409") as caught:
            writer.write(body)
        assert caught.value.code == 409
        assert "modified" in caught.value.message
    finally:
        running.stop()


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ({"managedFields": [{"manager": "nfd-topology-updater", "operation": "Update"}]},
         "'nfd-topology-updater'"),
        ({"managedFields": [{"manager": "resource-topology-exporter", "operation": "Update"}],
          "labels": {"app.kubernetes.io/managed-by": "toposcope"}},
         "'resource-topology-exporter'"),
        ({"labels": {"app.kubernetes.io/managed-by": "nri-resource-policy-topology-aware"}},
         "app.kubernetes.io/managed-by='nri-resource-policy-topology-aware'"),
        ({}, "no app.kubernetes.io/managed-by"),
    ],
)  # fmt: skip
def test_another_writers_object_is_left_alone(
    apiserver: Running,
    fake: NrtApiServer,
    gpu_topology: Topology,
    gpu_answer: PodResources,
    metadata: dict[str, Any],
    why: str,
) -> None:
    theirs = {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": NODE, **metadata},
        "zones": [{"name": "node-0", "type": "Node"}],
    }
    fake.add_nrt(copy.deepcopy(theirs))
    writer = NrtWriter(KubeApi(apiserver.url))
    assert writer.write(body_for(writer, gpu_topology, gpu_answer)) is Outcome.REFUSED
    assert why in writer.refusal
    assert nrt_writes(fake) == []
    stored = fake.nrt(NODE)
    assert stored is not None
    assert stored["zones"] == theirs["zones"]


def test_errors_name_the_request_and_the_servers_message(apiserver: Running) -> None:
    writer = NrtWriter(KubeApi(apiserver.url))
    with pytest.raises(KubeApiStatusError, match=r'HTTP 404 .*nodes "gpu-9" not found'):
        writer.node_uid("gpu-9")
    body = {"apiVersion": "topology.node.k8s.io/v1alpha2", "kind": "NodeResourceTopology",
            "metadata": {"name": NODE}, "zones": [{"name": "node-0", "type": "Node",
                                                    "resources": [{"name": "cpu"}]}]}  # fmt: skip
    with pytest.raises(KubeApiStatusError, match=r"HTTP 422 .*'allocatable' is a required"):
        writer.write(body)


def _fingerprint(nrt: dict[str, Any]) -> str:
    """The pods fingerprint attribute of a NodeResourceTopology."""
    values = [a["value"] for a in nrt["attributes"] if a["name"] == "nodeTopologyPodsFingerprint"]
    assert len(values) == 1
    return str(values[0])
