"""Pod owners and QoS classes from a real HTTP server on loopback that answers like the API
server (a pod list filtered by node, ReplicaSets), through a kubeconfig or a service account.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.advisor.fakes import FakeServer, Request
from tests.helpers import FIXTURES
from tests.workloads.helpers import POD_A, V2HOST, WL_A, WL_B, info_labels, scrape
from toposcope.auth.tokens import token_text
from toposcope.cli import main
from toposcope.config import ExporterConfig, HostPaths, PodOwnerSettings
from toposcope.errors import ConfigError
from toposcope.exporters.collectors import workloads
from toposcope.exporters.context import CollectorContext
from toposcope.host.kube_owners import PodDirectory, pods_from_list
from toposcope.kubeapi.client import KubeApi, KubeApiError, from_kubeconfig, in_cluster

POD_LIST = json.loads((FIXTURES / "kubernetes" / "pods-node-1.json").read_text())
TOKEN = "s3cr3t-token-for-tests"
RS_WEB = {
    "kind": "ReplicaSet",
    "metadata": {
        "name": "web-7d4b9c8f6d",
        "namespace": "shop",
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "controller": True}
        ],
    },
}


class ApiServer:
    """Routes of the loopback stand-in: the pod list of node-1, one readable ReplicaSet."""

    def __init__(self) -> None:
        self.pods: object = POD_LIST
        self.status = 200

    def __call__(self, request: Request) -> tuple[int, bytes]:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return 401, b'{"kind":"Status","code":401}'
        if request.path == "/api/v1/pods":
            if request.params.get("fieldSelector") != "spec.nodeName=node-1":
                return 200, json.dumps({"kind": "PodList", "items": []}).encode()
            return self.status, json.dumps(self.pods).encode()
        if request.path == "/apis/apps/v1/namespaces/shop/replicasets/web-7d4b9c8f6d":
            return 200, json.dumps(RS_WEB).encode()
        return 403, b'{"kind":"Status","code":403,"reason":"Forbidden"}'


@pytest.fixture
def api() -> Iterator[tuple[FakeServer, ApiServer]]:
    routes = ApiServer()
    with FakeServer(routes).run() as server:
        yield server, routes


def kubeconfig(tmp_path: Path, server: str, **user: object) -> Path:
    """A kubeconfig file with one context naming ``server`` and a token user."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user or {"token": TOKEN}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def test_owner_and_qos_reach_the_info_series(
    tmp_path: Path, api: tuple[FakeServer, ApiServer]
) -> None:
    server, _ = api
    settings = PodOwnerSettings("node-1", str(kubeconfig(tmp_path, server.url)))
    config = ExporterConfig(paths=HostPaths.under(V2HOST), pod_owners=settings)
    reg = scrape(workloads.ENTRY.factory(CollectorContext(config)))
    trainer = info_labels(reg, WL_A)
    assert {k: trainer[k] for k in ("owner_kind", "owner_name", "qos_class")} == {
        "owner_kind": "PyTorchJob",
        "owner_name": "trainer",
        "qos_class": "Burstable",
    }
    # names the kubelet did not give come from the same list
    assert (trainer["namespace"], trainer["pod"], trainer["container"]) == (
        "ml",
        "trainer-0",
        "pytorch",
    )
    web = info_labels(reg, WL_B)
    assert (web["owner_kind"], web["owner_name"], web["qos_class"], web["container"]) == (
        "Deployment",
        "web",
        "Guaranteed",
        "nginx",
    )
    assert web["workload_kind"] == "pod"
    lists = [r for r in server.requests if r.path == "/api/v1/pods"]
    assert len(lists) == 1


def test_without_the_flag_no_api_server_is_asked() -> None:
    reg = scrape(workloads.ENTRY.factory(CollectorContext(ExporterConfig(HostPaths.under(V2HOST)))))
    labels = info_labels(reg, WL_A)
    assert (labels["owner_kind"], labels["qos_class"]) == ("", "Burstable")


def test_list_is_refreshed_on_its_interval_and_kept_when_the_server_fails(
    api: tuple[FakeServer, ApiServer],
) -> None:
    server, routes = api
    now = [0.0]
    directory = PodDirectory(
        KubeApi(server.url, TOKEN).get, "node-1", refresh=60, clock=lambda: now[0]
    )
    assert directory.pods()[POD_A].owner_kind == "PyTorchJob"
    now[0] = 30.0
    directory.pods()
    assert len([r for r in server.requests if r.path == "/api/v1/pods"]) == 1
    routes.status = 500
    now[0] = 61.0
    assert directory.pods()[POD_A].owner_name == "trainer"  # stale, not lost
    routes.status = 200
    routes.pods = {"kind": "PodList", "items": []}
    now[0] = 122.0
    assert directory.pods() == {}
    # each ReplicaSet was asked for once, across every list
    asked = [r.path.rpartition("/")[2] for r in server.requests if "replicasets" in r.path]
    assert sorted(asked) == ["canary-5f6c7d8e9a", "web-7d4b9c8f6d"]


def test_replicaset_not_owned_by_a_deployment_or_unreadable_stays_a_replicaset(
    api: tuple[FakeServer, ApiServer],
) -> None:
    server, _ = api
    pods = PodDirectory(KubeApi(server.url, TOKEN).get, "node-1").pods()
    canary = pods["0e0e0e0e-1111-4222-8333-444455556666"]
    assert (canary.owner_kind, canary.owner_name, canary.qos_class) == (
        "ReplicaSet",
        "canary-5f6c7d8e9a",
        "BestEffort",
    )


def test_pod_list_parsing_skips_malformed_items_and_unknown_qos() -> None:
    pods = pods_from_list(POD_LIST)
    assert len(pods) == 4
    static = pods["7a7a7a7a-1111-4222-8333-444455556666"]
    assert (static.owner_kind, static.qos_class) == ("", "")
    with pytest.raises(ConfigError, match="without items"):
        pods_from_list({"kind": "Status"})


def test_a_node_name_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a node name"):
        PodDirectory(lambda path: {}, "node-1&fieldSelector=")


def test_answer_bound_and_errors_are_named(api: tuple[FakeServer, ApiServer]) -> None:
    server, _ = api
    with pytest.raises(KubeApiError, match="answer over 100 bytes"):
        KubeApi(server.url, TOKEN, max_answer=100).get(
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1"
        )
    with pytest.raises(KubeApiError, match="HTTP 401"):
        KubeApi(server.url, "wrong").get("/api/v1/pods")
    with pytest.raises(KubeApiError, match="unreachable"):
        KubeApi("http://127.0.0.1:1", timeout=2).get("/api/v1/pods")


def test_in_cluster_reads_the_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    api = in_cluster(
        tmp_path, environ={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    )
    assert (api.url, token_text(api.token)) == ("https://10.96.0.1:443", TOKEN)
    v6 = in_cluster(tmp_path, environ={"KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert v6.url == "https://[fd00::1]:443"
    with pytest.raises(KubeApiError, match="KUBERNETES_SERVICE_HOST is unset"):
        in_cluster(tmp_path, environ={})
    with pytest.raises(KubeApiError, match="neither a host name"):
        in_cluster(tmp_path, environ={"KUBERNETES_SERVICE_HOST": "evil/x?"})


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"exec": {"command": "aws"}}, "plugins are not supported"),
        ({"auth-provider": {"name": "gcp"}}, "plugins are not supported"),
    ],
)
def test_kubeconfig_plugins_are_refused(
    tmp_path: Path, user: dict[str, object], message: str
) -> None:
    with pytest.raises(KubeApiError, match=message):
        from_kubeconfig(kubeconfig(tmp_path, "https://10.0.0.1:6443", **user))


def test_kubeconfig_token_file_and_bad_files(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text(TOKEN)
    api = from_kubeconfig(kubeconfig(tmp_path, "https://k8s.example:6443", tokenFile="tok"))
    assert (api.url, token_text(api.token)) == ("https://k8s.example:6443", TOKEN)
    assert api.context is not None
    with pytest.raises(KubeApiError, match="cannot read it"):
        from_kubeconfig(tmp_path / "missing")
    (tmp_path / "bad").write_text("current-context: x\ncontexts: []\n")
    with pytest.raises(KubeApiError, match="no context named 'x'"):
        from_kubeconfig(tmp_path / "bad")
    with pytest.raises(KubeApiError, match="must not carry credentials"):
        from_kubeconfig(kubeconfig(tmp_path, "https://u:p@k8s.example"))


def test_cli_bad_kubeconfig_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["exporter", "--root", str(V2HOST), "--nvml", "off", "--print",
         "--kubernetes.pod-owners", "--kubernetes.kubeconfig", str(tmp_path / "none")]
    )  # fmt: skip
    assert code == 2
    assert "cannot read it" in capsys.readouterr().err


def test_cli_kubeconfig_without_the_flag_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["exporter", "--root", str(V2HOST), "--print", "--kubernetes.kubeconfig", "x"])
    assert code == 2
    assert "need --kubernetes.pod-owners" in capsys.readouterr().err
