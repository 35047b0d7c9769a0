"""Data shaping and figures on hand-made Prometheus answers (a fake PromQL API on loopback),
the page components, and ``toposcope dash``'s options."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.dash.conftest import FakeApi, matrix, vector
from tests.procs import free_port
from toposcope.cli import main
from toposcope.dashboards.app import cli, recommendations_page
from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.advisorclient import AdvisorClient, AuditRow
from toposcope.dashboards.app.charts import gpu_heatmap, lines
from toposcope.dashboards.app.cluster_data import load_cluster
from toposcope.dashboards.app.cluster_page import cluster_view
from toposcope.dashboards.app.node_data import load_node_series, load_topology
from toposcope.dashboards.app.prom_frames import NodeIndex
from toposcope.dashboards.app.promclient import PromClient
from toposcope.dashboards.app.recommendation_views import status_of, table_rows
from toposcope.dashboards.app.server import AppSettings, create_app
from toposcope.dashboards.app.sources import Clients
from toposcope.dashboards.app.topology_figure import topology_figure
from toposcope.dashboards.app.workload_data import WorkloadRef, load_workload, load_workloads
from toposcope.promql.results import Vector
from toposcope.topology.model import LinkType

SIM = {"job": "sim", "instance": "n1", "node": "n1"}
HOST = {"job": "host", "instance": "10.0.0.2:9847"}


def answers(query: str) -> dict[str, Any]:
    """What the fake Prometheus answers: two nodes, n1 (2 sockets, 2 GPUs) and a CPU host."""
    if query == q.BUILD_INFO:
        return vector(({**SIM, "hostname": "sim-host"}, 1), ({**HOST, "hostname": "cpu-1"}, 1))
    if query == q.GPU_UP:
        return vector(({**SIM, "gpu": "0"}, 1), ({**SIM, "gpu": "1"}, 0))
    if query.startswith("avg_over_time"):
        return vector(({**SIM, "gpu": "0"}, 0.01), ({**SIM, "gpu": "1"}, 0.9))
    if query.startswith(q.GPU_MEM_USED + " /"):
        return vector(({**SIM, "gpu": "0"}, 0.5), ({**SIM, "gpu": "1"}, "NaN"))
    if query == q.WORKLOAD_GPU:
        return vector(({**SIM, "gpu": "0", "workload": "nb"}, 1))
    if query.startswith("avg by"):
        return vector((SIM, 0.25), (HOST, 1.0))
    if query.startswith(q.WORKLOAD_INFO):
        return vector(({**SIM, "workload": "nb"}, 1), ({**HOST, "workload": "etl"}, 1))
    selected = 'job="sim", instance="n1"' in query
    if not selected:
        return vector()
    table: dict[str, Vector | dict[str, Any]] = {
        q.PACKAGE_INFO: vector(({**SIM, "package": "0"}, 1), ({**SIM, "package": "1"}, 1)),
        q.NUMA_INFO: vector(
            ({**SIM, "numa_node": "0", "package": "0", "cpus": "0-3"}, 1),
            ({**SIM, "numa_node": "1", "package": "1", "cpus": "4-7"}, 1),
        ),
        q.NUMA_MEM_TOTAL: vector(
            ({**SIM, "numa_node": "0"}, 8e9), ({**SIM, "numa_node": "1"}, 8e9)
        ),
        q.NUMA_MEM_USED: vector(({**SIM, "numa_node": "0"}, 2e9)),
        q.GPU_LOCALITY: vector(
            ({**SIM, "gpu": "0", "numa_node": "0"}, 1), ({**SIM, "gpu": "1", "numa_node": "1"}, 1)
        ),
        q.GPU_INFO: vector(({**SIM, "gpu": "0", "numa_node": "0", "modelName": "A100"}, 1)),
        q.GPU_UTIL: vector(({**SIM, "gpu": "0"}, 0.75)),
        q.GPU_LINK: vector(
            ({**SIM, "gpu": "0", "peer_gpu": "1", "link": "SYS"}, 1),
            ({**SIM, "gpu": "1", "peer_gpu": "0", "link": "SYS"}, 1),
        ),
        q.PCI_INFO: vector(
            ({**SIM, "pci_bus_id": "0000:0c:00.0", "numa_node": "1", "class": "0x0207"}, 1)
        ),
        q.WORKLOAD_GPU: vector(({**SIM, "gpu": "0", "workload": "nb"}, 1)),
        q.WORKLOAD_LOCALITY: vector(({**SIM, "resource": "cpu", "workload": "nb"}, 0.5)),
    }  # fmt: skip
    if "mode!~" in query:
        return vector(({**SIM, "numa_node": "0"}, 0.5))
    for name, answer in table.items():
        if query.startswith(name):
            assert isinstance(answer, dict)
            return answer
    return vector()


def prometheus(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
    if path.endswith("query_range"):
        key = "numa_node" if "numa" in params["query"] else "gpu"
        return 200, matrix(({**SIM, key: "0"}, [(100.0, 1.0), (160.0, "NaN"), (220.0, 3.0)]))
    return 200, answers(params["query"])


@pytest.fixture
def prom() -> Any:
    with FakeApi(prometheus) as api:
        yield PromClient(api.url)


def test_node_names_follow_the_advisor_rule(prom: PromClient) -> None:
    index = NodeIndex(prom.query(q.BUILD_INFO))
    assert index.nodes == ["cpu-1", "n1"]  # node label first, else the exporter's hostname
    assert index.name({"job": "host", "instance": "10.0.0.2:9847"}) == "cpu-1"
    assert index.name({"job": "other", "instance": "x:1"}) == "x:1"
    assert index.selector("cpu-1", {"workload": 'a"b'}) == (
        'job="host", instance="10.0.0.2:9847", workload="a\\"b"'
    )
    with pytest.raises(LookupError):
        index.selector("nope")


#: an exporter in a Kubernetes pod: its hostname is the pod's, the node is a target label
POD = {"job": "k8s", "instance": "10.0.0.5:9400", "kubernetes_node": "gpu-07"}


def pod_prometheus(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
    query = params["query"]
    if query == q.BUILD_INFO:
        return 200, vector(({**POD, "hostname": "toposcope-exporter-x7"}, 1))
    if query == q.GPU_UP:
        return 200, vector(({**POD, "gpu": "0"}, 1))
    if query.startswith("avg by"):  # the aggregation keeps job and instance, not the label
        return 200, vector(({"job": POD["job"], "instance": POD["instance"]}, 0.5))
    return 200, vector()


def test_the_node_label_option_is_honoured() -> None:
    with FakeApi(pod_prometheus) as api:
        prom = PromClient(api.url)
        assert load_cluster(prom, "15m").nodes == ("toposcope-exporter-x7",)
        cluster = load_cluster(prom, "15m", "kubernetes_node")
        assert cluster.nodes == ("gpu-07",)
        assert cluster.gpus["node"].tolist() == ["gpu-07"]
        assert cluster.locality["node"].tolist() == ["gpu-07"]
        index = NodeIndex(prom.query(q.BUILD_INFO), "kubernetes_node")
        assert index.selector("gpu-07") == 'job="k8s", instance="10.0.0.5:9400"'
        settings = cli.settings_from_args(parse("--node-label", "kubernetes_node"))
        assert settings.node_label == "kubernetes_node"
        clients = Clients(prom, _closed_advisor(), settings.node_label)
        assert clients.node_index().nodes == ["gpu-07"]
        assert "gpu-07" in str(cluster_view(clients, "15m"))
    assert cli.settings_from_args(parse()).node_label == "auto"
    with pytest.raises(ValueError, match="is neither 'auto' nor a label name"):
        AppSettings(node_label="kubernetes-node")


def test_a_bad_node_label_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["dash", "--node-label", "kubernetes-node"])
    assert exited.value.code == 2
    assert "--node-label: node label 'kubernetes-node' is neither" in capsys.readouterr().err


def test_cluster_shaping_and_heatmap(prom: PromClient) -> None:
    cluster = load_cluster(prom, "15m")
    assert cluster.nodes == ("cpu-1", "n1") and cluster.dropped == 1
    rows = cluster.gpus.set_index("gpu")
    assert rows.loc[0, "holder"] == "nb" and rows.loc[1, "holder"] == ""
    # GPU 0 idles (1 %), GPU 1 is lost: only GPU 0 counts as idle
    assert cluster.idle["gpu"].tolist() == [0]
    assert dict(zip(cluster.locality["node"], cluster.locality["score"], strict=True)) == {
        "cpu-1": 1.0,
        "n1": 0.25,
    }
    heat = gpu_heatmap(cluster, "utilization", "util")
    assert list(heat.data[0].y) == ["n1"] and heat.data[0].text[0] == ["1%", "lost"]
    with pytest.raises(ValueError, match="unknown time range"):
        load_cluster(prom, "2d")


def test_topology_and_its_drawing(prom: PromClient) -> None:
    index = NodeIndex(prom.query(q.BUILD_INFO))
    topo = load_topology(prom, index, "n1")
    assert topo.packages == (0, 1)
    assert [(n.id, n.package, n.cpu_count, n.memory_used) for n in topo.numa] == [
        (0, 0, 4, 2e9), (1, 1, 4, None),
    ]  # fmt: skip
    assert [(g.index, g.numa_node, g.up, g.holders) for g in topo.gpus] == [
        (0, 0, True, ("nb",)), (1, 1, True, ()),
    ]  # fmt: skip
    assert [(link.a, link.b, link.kind) for link in topo.links] == [(0, 1, LinkType.SYS)]
    assert [n.numa_node for n in topo.nics] == [1]
    shapes = [s.name for s in topology_figure(topo, highlight=[1]).layout.shapes]
    for prefix, count in (("package-", 2), ("gpu-", 2), ("nic-", 1), ("link-", 1)):
        assert sum(n.startswith(prefix) for n in shapes) == count, prefix
    assert sorted(n for n in shapes if n.startswith("numa-") and not n.endswith("memory")) == [
        "numa-0",
        "numa-1",
    ]
    chosen = [s for s in topology_figure(topo, highlight=[1]).layout.shapes if s.name == "gpu-1"]
    assert chosen[0].line.width == 5


def test_series_and_workloads(prom: PromClient) -> None:
    index = NodeIndex(prom.query(q.BUILD_INFO))
    series = load_node_series(prom, index, "n1", "15m", now=1000.0)
    assert series.gpu_utilization["value"].tolist() == [1.0, 3.0]  # NaN point dropped
    assert str(series.numa_memory["time"].dt.tz) == "UTC"
    figure = lines(series.numa_cpu, "numa_node", "cpu", label="NUMA", marked={"0"})
    assert figure.data[0].name == "NUMA 0 (GPU-local)"
    refs = load_workloads(prom, index)
    assert [r.key for r in refs] == ["cpu-1/etl", "n1/nb"]
    data = load_workload(prom, index, WorkloadRef.parse("n1/nb"), "1h", now=1000.0)
    assert data.gpus == (0,) and data.gpu_numa == (0,) and data.latest_locality == {"cpu": 0.5}
    with pytest.raises(ValueError):
        WorkloadRef.parse("nodeonly")


def test_empty_states_say_what_is_missing() -> None:
    with FakeApi(lambda m, p, params: (200, vector())) as api:
        out = cluster_view(Clients(PromClient(api.url), _closed_advisor()), "1h")
    text = str(out)
    assert "no toposcope series" in text and "no GPU series in Prometheus" in text
    assert "advisor service is unreachable" in text
    down = cluster_view(
        Clients(PromClient(f"http://127.0.0.1:{free_port()}", timeout=2), _closed_advisor()), "1h"
    )
    assert "Prometheus is unreachable" in str(down[0])


def _closed_advisor() -> AdvisorClient:
    return AdvisorClient(f"http://127.0.0.1:{free_port()}", timeout=2)


def row(
    seq: int, result: str | None, reverts: str | None = None, by: str | None = None
) -> AuditRow:
    return AuditRow.from_json(
        {
            "seq": seq,
            "request_id": f"r{seq}",
            "recommendation_id": "pin-1",
            "kind": "pin",
            "workload": "w",
            "node": "n1",
            "actor": "a",
            "backend": "sim",
            "intent_at": "t",
            "result": result,
            "reverts": reverts,
            "reverted_by": by,
        }
    )


def test_status_from_the_audit_log() -> None:
    assert status_of([]) == "open"
    assert status_of([row(1, "succeeded")]) == "applied"
    assert status_of([row(1, "running")]) == "in progress"
    assert (
        status_of([row(1, "succeeded", by="r2"), row(2, "succeeded", reverts="r1")]) == "reverted"
    )
    assert status_of([row(1, "failed")]) == "failed"
    rows = table_rows([], [row(1, "succeeded")])
    assert rows[0]["summary"] == "no longer in the latest report" and rows[0]["status"] == "applied"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_options_and_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse()
    assert (args.listen, args.prometheus, args.advisor) == (
        "127.0.0.1:9851",
        "http://127.0.0.1:9090",
        "http://127.0.0.1:9849",
    )
    monkeypatch.setenv(cli.TOKEN_ENV, " from-env ")
    assert cli.settings_from_args(parse()).advisor_token == "from-env"
    token = tmp_path / "token"
    token.write_text("from-file\n")
    token.chmod(0o600)
    settings = cli.settings_from_args(parse("--advisor-token-file", str(token)))
    assert settings.advisor_token == "from-file" and "from-file" not in repr(settings)
    # the token never reaches the browser: not in the layout nor in any page skeleton
    app = create_app(settings)
    index = app.server.test_client().get("/", headers={"Host": "127.0.0.1:9851"})
    assert index.status_code == 200
    assert "from-file" not in index.get_data(as_text=True) + str(app.layout) + str(
        recommendations_page.layout(None, "alice")
    )
    (tmp_path / "empty").write_text("")
    (tmp_path / "empty").chmod(0o600)
    bad_config = tmp_path / "web.yml"
    bad_config.write_text("basic_auth_users:\n  alice: plain-text\n")
    for argv, needle in (
        (["--prometheus", "localhost:9090"], "must be an http"),
        (["--advisor-token-file", str(tmp_path / "missing")], "missing: cannot read it"),
        (["--advisor-token-file", str(tmp_path / "empty")], "is empty"),
        (["--timeout", "0"], "--timeout must be positive"),
        (["--listen", "nohost"], "HOST:PORT"),
        (["--web.config.file", str(tmp_path / "missing")], "reading web config file"),
        (["--web.config.file", str(bad_config)], f"{bad_config}:2: basic_auth_users.alice: not"),
        (["--auth.trusted-proxy", "10.0.0.0/8,proxy"], "'proxy' is not an IP address"),
        (["--auth.trusted-user-header", "X-User:"], "not a usable header name"),
        (["--web.allowed-hosts", "http://dash.example/"], "is not HOST or HOST:PORT"),
    ):
        assert main(["dash", *argv]) == 2, argv
        assert needle in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["dash", "--refresh", "2h"])
    assert exited.value.code == 2
    with pytest.raises(ValueError):
        AppSettings(refresh="2h")


def test_cli_access_options(tmp_path: Path) -> None:
    access = cli.settings_from_args(parse()).access
    assert access.allowed_hosts == ("127.0.0.1:9851", "localhost:9851", "[::1]:9851")
    assert not access.authenticates
    assert cli.access_from_args(parse("--listen", "[::1]:8000")).allowed_hosts[0] == "[::1]:8000"
    wildcard = cli.access_from_args(parse("--listen", ":9851")).allowed_hosts
    assert "localhost:9851" in wildcard and len(wildcard) >= 4
    digest = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: '{digest}'\n")
    access = cli.access_from_args(
        parse(
            "--web.config.file", str(web),
            "--auth.trusted-user-header", "X-Forwarded-User",
            "--auth.trusted-proxy", "10.0.0.0/8, fd00::/8",
            "--web.allowed-hosts", "Dash.Example., dash.example:8443,[::1]",
        )
    )  # fmt: skip
    assert access.basic_auth and access.user_header == "X-Forwarded-User"
    assert access.allowed_hosts == ("dash.example", "dash.example:8443", "[::1]")
    assert access.trusted("10.2.3.4") and access.trusted("fd00::5") and not access.trusted("::1")
    assert access.host_allowed("DASH.example:1234") and not access.host_allowed("dash.example@x")
    settings = AppSettings(advisor_token="t", access=access)
    assert "basic-auth users alice" in cli.describe_access(settings)
    assert "X-Forwarded-User" in cli.describe_access(settings)
    assert cli.describe_access(AppSettings(advisor_token="t")) == "read-only: no users configured"
