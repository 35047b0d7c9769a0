"""``toposcope fabric show --kubernetes``: nodes and the Kueue Topology from the API server
(the contract server of tests/kube with Topologies and paged node lists), and exit 2 with a
clear message when the server, Kueue or the Topology is missing.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import holds_any, modules_loaded_by
from tests.kube.fake_apiserver import kubeconfig, served_kubeconfig
from tests.kube.fake_topologies import TopologyApiServer
from toposcope.cli import main
from toposcope.kubeapi.client import KubeApiError, continue_token

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"


@pytest.fixture
def fake() -> TopologyApiServer:
    cluster = TopologyApiServer()
    cluster.add_topology("default", BLOCK, RACK, HOST)
    for index, (block, rack) in enumerate([("b1", "r1"), ("b1", "r2"), ("b2", "r1")]):
        name = f"gpu{index + 1:02d}"
        cluster.add_node(name, {BLOCK: block, RACK: rack, HOST: name, "pool": "gpu"})
    cluster.add_node("control-plane", {HOST: "control-plane"})
    return cluster


@pytest.fixture
def config(fake: TopologyApiServer, tmp_path: Path) -> Iterator[Path]:
    with served_kubeconfig(fake, tmp_path) as path:
        yield path


def show(config: Path, *extra: str) -> list[str]:
    return ["fabric", "show", "--kubernetes", "--kubeconfig", str(config), *extra]


def test_the_nodes_and_the_only_topology_give_the_fabric(
    config: Path, fake: TopologyApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(show(config, "--format", "json")) == 0
    document = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["level"]) for s in document["switches"]] == [
        ("b1", 1), ("b1.r1", 0), ("r2", 0), ("b2", 1), ("b2.r1", 0),
    ]  # fmt: skip
    assert [n["name"] for n in document["nodes"]] == ["gpu01", "gpu02", "gpu03"]
    paths = [r.path for r in fake.requests]
    assert paths == [
        "/apis/kueue.x-k8s.io",
        "/apis/kueue.x-k8s.io/v1beta1/topologies",
        "/api/v1/nodes",
    ]
    assert fake.requests[-1].query["limit"] == ["100"]


def test_only_v1alpha1_served_is_read_in_v1alpha1_and_a_named_topology_by_name(
    config: Path, fake: TopologyApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.served = ("v1alpha1",)
    fake.add_topology("racks", RACK)
    assert main(show(config, "--kueue-topology-name", "racks")) == 0
    out = capsys.readouterr().out
    assert out.startswith("fabric: 2 switches on 1 levels (leaf), 3 nodes, 0 blocks\n"), out
    assert "/apis/kueue.x-k8s.io/v1alpha1/topologies/racks" in [r.path for r in fake.requests]


def test_the_node_selector_is_sent_and_pages_are_followed(
    config: Path, fake: TopologyApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    for index in range(201):
        fake.add_node(f"cpu{index:04d}", {BLOCK: "b9", RACK: "r9", "pool": "cpu"})
    assert main(show(config, "--node-selector", "pool=cpu", "--format", "json")) == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["nodes"]) == 201
    assert {s["name"] for s in document["switches"]} == {"b9", "r9"}
    lists = [r for r in fake.requests if r.path == "/api/v1/nodes"]
    assert len(lists) == 3
    assert all(r.query["labelSelector"] == ["pool=cpu"] for r in lists)
    assert "continue" not in lists[0].query and lists[2].query["continue"] == ["cpu0199"]


@pytest.mark.parametrize(
    ("change", "extra", "message"),
    [
        ("no kueue", (), "does not serve kueue.x-k8s.io: Kueue is not installed"),
        ("", ("--kueue-topology-name", "absent"), "topologies/absent: no Topology named absent"),
        ("two", (), "2 Topology objects (default, other): name one with --kueue-topology-name"),
        ("none", (), "v1beta1/topologies: no Kueue Topology object"),
        ("bad", (), "answer.items[0].spec.levels[0].nodeLabel: 'Not A Label' is not a label key"),
        ("", ("--node-selector", "pool=none"), "fabric: 0 switches"),
        (
            "forbidden",
            (),
            'HTTP 403 Forbidden: User "system:serviceaccount:default:toposcope" '
            "cannot get /api/v1/nodes (toposcope needs list on nodes and get, list on "
            "topologies.kueue.x-k8s.io",
        ),
    ],
)
def test_missing_or_malformed_objects_exit_2_saying_which(
    config: Path,
    fake: TopologyApiServer,
    capsys: pytest.CaptureFixture[str],
    change: str,
    extra: tuple[str, ...],
    message: str,
) -> None:
    if change == "no kueue":
        fake.served = ()
    elif change == "two":
        fake.add_topology("other", RACK)
    elif change == "none":
        fake.topologies.clear()
    elif change == "forbidden":
        fake.forbidden.add("/api/v1/nodes")
    elif change == "bad":
        fake.topologies.clear()
        fake.add_topology("default", "Not A Label")
    code = main(show(config, *extra))
    captured = capsys.readouterr()
    if message.startswith("fabric:"):
        assert code == 0 and captured.out.startswith(message)
        return
    assert code == 2
    assert captured.err.startswith("toposcope fabric: error: "), captured.err
    assert message in captured.err and "Traceback" not in captured.err


def test_an_unreachable_server_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig(f"http://127.0.0.1:{port}"), encoding="utf-8")
    assert main(show(path)) == 2
    err = capsys.readouterr().err
    assert f"Kubernetes API http://127.0.0.1:{port} unreachable" in err, err


def test_no_kubeconfig_and_no_pod_exits_2_saying_what_to_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["fabric", "show", "--kubernetes"]) == 2
    assert "name a kubeconfig with --kubeconfig or $KUBECONFIG" in capsys.readouterr().err


def test_kubeconfig_from_the_environment_is_used(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(config))
    assert main(["fabric", "show", "--kubernetes"]) == 0
    assert "3 nodes" in capsys.readouterr().out


def test_reading_the_api_imports_no_file_reader(config: Path) -> None:
    loaded = modules_loaded_by(show(config))
    assert "toposcope.fabric.kubernetes_api" in loaded
    for absent in (
        "toposcope.fabric.yamlfile",
        "toposcope.fabric.slurmconf",
        "toposcope.fabric.ibnetdiscover",
        "toposcope.advisor",
    ):
        assert not holds_any(loaded, absent), absent


def test_a_pages_continue_token_is_read_and_one_not_a_string_is_refused() -> None:
    assert continue_token({"metadata": {"continue": "c2"}}, "/api/v1/nodes") == "c2"
    assert continue_token({"metadata": {}, "items": []}, "/api/v1/nodes") == ""
    with pytest.raises(KubeApiError, match=r"/api/v1/pods: metadata.continue is not a string"):
        continue_token({"metadata": {"continue": 7}}, "/api/v1/pods")
