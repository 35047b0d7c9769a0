"""End to end against a real cluster: only when ``KUBECONFIG`` is set (docs/kubernetes.md).

It reads the cluster through the backend, then places a gated pod of its own in the
namespace ``TOPOSCOPE_E2E_NAMESPACE`` (default ``toposcope-e2e``, which must exist) and
checks that the API server accepted the narrowed affinity and the gate's removal.
"""

from __future__ import annotations

import os
import uuid

import pytest

from toposcope.advisor.rmclients import make_resource_manager
from toposcope.rm import ActionKind, ActionRequest

pytestmark = pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"), reason="KUBECONFIG is not set: no cluster to test against"
)


def test_a_real_cluster_lists_nodes_and_places_a_gated_pod() -> None:
    from lightkube import Client
    from lightkube.models.core_v1 import Container, PodSchedulingGate, PodSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod

    namespace = os.environ.get("TOPOSCOPE_E2E_NAMESPACE", "toposcope-e2e")
    manager = make_resource_manager("kubernetes", options={})
    nodes = [n.name for n in manager.nodes()]
    assert nodes
    name = f"toposcope-e2e-{uuid.uuid4().hex[:8]}"
    client = Client()
    spec = PodSpec(
        containers=[Container(name="pause", image="registry.k8s.io/pause:3.9")],
        schedulingGates=[PodSchedulingGate(name="toposcope.io/placement")],
    )
    client.create(Pod(metadata=ObjectMeta(name=name, namespace=namespace), spec=spec))
    try:
        state = manager.apply(
            ActionRequest("e2e", ActionKind.PLACE, f"{namespace}/{name}", nodes[0])
        )
        assert state.status == "succeeded"
        placed = client.get(Pod, name, namespace=namespace)
        assert placed.spec is not None and not placed.spec.schedulingGates
    finally:
        client.delete(Pod, name, namespace=namespace)
