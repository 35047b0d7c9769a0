"""End to end with Dynamic Resource Allocation: only with ``KUBECONFIG`` and a DRA driver.

Against a real cluster (docs/kubernetes.md: a kind cluster of Kubernetes 1.34+, where DRA is
on by default, with a DRA driver such as kubernetes-sigs/dra-example-driver): the nodes'
ResourceSlices are read through the core API client, a pod claiming two devices of
``TOPOSCOPE_E2E_DEVICE_CLASS`` (default ``gpu.example.com``) through a template is created in
``TOPOSCOPE_E2E_NAMESPACE`` (default ``toposcope-e2e``, which must exist), and once the
scheduler has allocated its claim the advice for it is read; a proposed template is sent to
the API server with ``dryRun=All``, which validates it as it would a real one. Skipped where
no driver publishes devices.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from toposcope.kubeapi.claim_reader import advise_pod
from toposcope.kubeapi.client import KubeApi, KubeApiStatusError, from_kubeconfig
from toposcope.kubeapi.resourceslices import read_slices

pytestmark = pytest.mark.skipif(
    not os.environ.get("KUBECONFIG"), reason="KUBECONFIG is not set: no cluster to test against"
)

#: seconds the scheduler and kubelet get to allocate the claim and start the pod
ALLOCATION_TIMEOUT = 120.0


def _api() -> KubeApi:
    return from_kubeconfig(os.environ["KUBECONFIG"].split(os.pathsep)[0])


def _wait_allocated(api: KubeApi, namespace: str, name: str) -> dict[str, Any]:
    """The pod once its node and every claim are set (polling, bounded)."""
    deadline = time.monotonic() + ALLOCATION_TIMEOUT
    while True:
        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if (pod.get("spec") or {}).get("nodeName") and statuses:
            return dict(pod)
        if time.monotonic() > deadline:
            pytest.fail(f"pod {namespace}/{name} not allocated in {ALLOCATION_TIMEOUT:g} s")
        time.sleep(1.0)


def test_dra_devices_are_read_and_a_claim_gets_advice_the_api_server_accepts() -> None:
    api = _api()
    nodes = [n["metadata"]["name"] for n in api.get("/api/v1/nodes")["items"]]
    published = {node: read_slices(api, node) for node in nodes}
    versions = {version for version, _ in published.values()}
    if versions == {""}:
        pytest.skip("the cluster serves no resource.k8s.io ResourceSlices (DRA off)")
    if not any(slices for _, slices in published.values()):
        pytest.skip("no DRA driver publishes devices on this cluster")
    assert versions <= {"v1", "v1beta2", "v1beta1"}
    if "v1" not in versions:
        pytest.skip("the pod below is written for resource.k8s.io/v1 (Kubernetes 1.34+)")
    namespace = os.environ.get("TOPOSCOPE_E2E_NAMESPACE", "toposcope-e2e")
    device_class = os.environ.get("TOPOSCOPE_E2E_DEVICE_CLASS", "gpu.example.com")
    suffix = uuid.uuid4().hex[:8]
    template = f"toposcope-e2e-two-{suffix}"
    pod = f"toposcope-e2e-dra-{suffix}"
    base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}"
    api.request("POST", f"{base}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": template, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "devices", "exactly": {"deviceClassName": device_class, "count": 2}}]}}},
    })  # fmt: skip
    try:
        api.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {
                "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": template}],
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"claims": [{"name": "devices"}]}}],
            },
        })  # fmt: skip
        _wait_allocated(api, namespace, pod)
        advice = advise_pod(api, namespace, pod)
        assert advice.changes or advice.skipped
        for change in advice.changes:
            assert change.constraint["matchAttribute"].startswith("resource.kubernetes.io/")
            api.request("POST", f"{base}/resourceclaimtemplates?dryRun=All", change.template)
    finally:
        for path in (f"/api/v1/namespaces/{namespace}/pods/{pod}",
                     f"{base}/resourceclaimtemplates/{template}"):  # fmt: skip
            try:
                api.request("DELETE", path)
            except KubeApiStatusError as exc:
                if exc.code != 404:
                    raise
