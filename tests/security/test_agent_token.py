"""The agent token goes only to agents the operator allowed, never where a metric label points.

Before the fix, ``--resource-manager agent --rm-url http://{node}:9848/api/v1`` pasted the
node name from scraped labels into the URL: an exporter started with
``--hostname 127.0.0.1:PORT/x?`` received ``Authorization: Bearer <agent token>`` as soon as
the advisor listed workloads (no apply needed). A listener on loopback (the catcher) records
every request; the advisor analyses a cluster whose node label tries to redirect it there.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.advisor.fakes import FakeServer, Request
from toposcope.advisor.rmclients import AgentResourceManager
from toposcope.advisor.rmclients.endpoints import StaticEndpoints, UrlTemplate, parse_url_map
from toposcope.advisor.rmclients.k8s_endpoints import KubernetesEndpoints, node_ips_from_slices
from toposcope.auth.tokens import token_text
from toposcope.cli import main
from toposcope.errors import ConfigError
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError
from toposcope.sim.fsgen import write_workload_tree

TOKEN = "agent-secret-token"
READY = {"ready": True}
NOT_READY = {"ready": False}


def _empty_workloads(request: Request) -> tuple[int, bytes]:
    return 200, json.dumps([]).encode()


def _exporter_scrape(tmp_path: Path, hostname: str) -> Path:
    """The real exporter's output for a host whose ``--hostname`` is ``hostname``."""
    root = tmp_path / "host"
    write_workload_tree(root, workloads=2, seed=3)
    out = io.StringIO()
    argv = ["--log-level", "error", "exporter", "--root", str(root), "--print"]
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--nvml", "fake:pcie-4gpu", "--hostname", hostname]) == 0
    path = tmp_path / "scrape.prom"
    path.write_text(out.getvalue())
    return path


def _token_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent-token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def _advise(scrape: Path, token: Path, *extra: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(
            [
                "--log-level", "error", "advise", "--scrape", scrape.as_uri(),
                "--resource-manager", "agent", "--rm-token-file", str(token), *extra,
            ]
        )  # fmt: skip


def test_a_label_naming_a_listener_does_not_receive_the_token(tmp_path: Path) -> None:
    with FakeServer(_empty_workloads).run() as catcher:
        port = catcher.url.rsplit(":", 1)[1]
        scrape = _exporter_scrape(tmp_path, f"127.0.0.1:{port}/x?")
        code = _advise(scrape, _token_file(tmp_path), "--rm-url", "http://{node}:9848/api/v1")
        assert catcher.requests == []
    assert code == 2  # an agent backend without an allow-list is a configuration error


def test_with_an_allow_list_only_listed_agents_are_called(tmp_path: Path) -> None:
    with FakeServer(_empty_workloads).run() as catcher, FakeServer(_empty_workloads).run() as ok:
        port = catcher.url.rsplit(":", 1)[1]
        scrape = _exporter_scrape(tmp_path, f"127.0.0.1:{port}/x?")
        url_map = tmp_path / "agents.yaml"
        url_map.write_text(f"nodes:\n  gpu-01: {ok.url}/api/v1\n")
        code = _advise(
            scrape, _token_file(tmp_path),
            "--rm-url", "http://{node}:9848/api/v1", "--rm-url-map", str(url_map),
        )  # fmt: skip
        assert catcher.requests == []
    assert code == 0  # the report was made
    assert ok.requests == []  # gpu-01 is not in the metrics, so it was not asked either


def test_the_allowed_agent_of_a_node_gets_the_token_at_its_listed_url(tmp_path: Path) -> None:
    with FakeServer(_empty_workloads).run() as agent:
        scrape = _exporter_scrape(tmp_path, "gpu-01")
        code = _advise(scrape, _token_file(tmp_path), "--rm-url-map", f"gpu-01={agent.url}/api/v1")
        assert [r.path for r in agent.requests] == ["/api/v1/workloads"]
        assert agent.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert code == 0


@pytest.mark.parametrize(
    "node",
    ["127.0.0.1:8000/x?", "evil.example/..", "a b", "node@evil", "-lead", "x" * 300, ""],
)
def test_client_refuses_invalid_or_unlisted_nodes(node: str) -> None:
    agents = StaticEndpoints({})
    manager = AgentResourceManager(agents, [node])
    assert manager.known_nodes == []
    with pytest.raises(ResourceManagerError) as info:
        manager.apply(ActionRequest("r1", ActionKind.PIN, "w", node, [0], [0]))
    assert info.value.status in (400, 403)


def test_unlisted_valid_node_is_forbidden() -> None:
    manager = AgentResourceManager(StaticEndpoints({}), ["gpu-02"])
    with pytest.raises(ResourceManagerError, match="no allowed agent endpoint") as info:
        manager.client("gpu-02")
    assert info.value.status == 403


@pytest.mark.parametrize(
    "template",
    [
        "http://{node}.evil:9848/api/v1",
        "http://x{node}:9848/api/v1",
        "http://{node}@evil:80/api/v1",
        "http://evil/{node}",
        "ftp://{node}:21/",
        "http://{node}:9848/api/v1?next={node}",
    ],
)
def test_templates_must_put_node_in_the_host_slot_only(template: str) -> None:
    with pytest.raises(ConfigError):
        UrlTemplate.parse(template)


def test_template_builds_urls_from_parts() -> None:
    template = UrlTemplate.parse("https://{node}:9848/api/v1")
    assert template.for_host("gpu-01.example") == "https://gpu-01.example:9848/api/v1"
    assert template.for_host("fd00::1") == "https://[fd00::1]:9848/api/v1"
    with pytest.raises(ConfigError):
        template.for_host("127.0.0.1:1/x?")


def test_map_file_with_names_and_per_node_tokens(tmp_path: Path) -> None:
    own = tmp_path / "gpu-02.token"
    own.write_text("per-node\n")
    own.chmod(0o600)
    url_map = tmp_path / "agents.yaml"
    url_map.write_text(
        "nodes:\n"
        "  gpu-01: http://10.0.0.1:9848/api/v1\n"
        f"  gpu-02: {{url: 'https://10.0.0.2:9848/api/v1', token_file: '{own}'}}\n"
    )
    agents = parse_url_map(str(url_map), template=None, token="shared")
    one, two = agents.resolve("gpu-01"), agents.resolve("gpu-02")
    assert one is not None and (one.url, one.token) == ("http://10.0.0.1:9848/api/v1", "shared")
    assert two is not None and two.url == "https://10.0.0.2:9848/api/v1"
    assert token_text(two.token) == "per-node"
    names = tmp_path / "names.yaml"
    names.write_text("template: http://{node}:9848/api/v1\nnodes: [gpu-01, gpu-02]\n")
    listed = parse_url_map(str(names), template=None, token="t")
    assert listed.allowed_nodes() == ["gpu-01", "gpu-02"]
    assert listed.resolve("gpu-03") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: [ok, '127.0.0.1:1/x?']\ntemplate: http://{node}:1/\n", r"nodes\[1\]"),
        ("nodes: {gpu-01: 'http://u:p@h:1/'}\n", "credentials"),
        ("nodes: {gpu-01: 'http://h:1/?a=b'}\n", "query"),
        ("nodes: [gpu-01]\n", "template"),
        ("nodes: {}\n", "no nodes"),
        ("other: 1\nnodes: [a]\n", "unknown key"),
        ("[1, 2\n", "not valid YAML"),
        ("nodes: {gpu-01: {url: 'http://h:1/', extra: 1}}\n", "unknown key"),
    ],
)
def test_bad_map_files_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    url_map = tmp_path / "agents.yaml"
    url_map.write_text(text)
    with pytest.raises(ConfigError, match=message):
        parse_url_map(str(url_map), template=None, token=None)


def test_kubernetes_endpoints_resolve_ready_agent_pods_only() -> None:
    answer = {
        "kind": "EndpointSliceList",
        "items": [
            {
                "endpoints": [
                    {
                        "addresses": ["10.1.0.5"],
                        "nodeName": "gpu-01",
                        "conditions": {"ready": True},
                    },
                    {
                        "addresses": ["10.1.0.6"],
                        "nodeName": "gpu-02",
                        "conditions": {"ready": False},
                    },
                    {"addresses": ["10.1.0.7"], "nodeName": "127.0.0.1:1/x?"},
                    {"addresses": ["evil.example"], "nodeName": "gpu-03"},
                ]
            }
        ],
    }
    paths: list[str] = []

    def fetch(path: str) -> object:
        paths.append(path)
        return answer

    agents = KubernetesEndpoints(
        "toposcope", "toposcope-agent", UrlTemplate.parse("http://{node}:9848/api/v1"), "t", fetch
    )
    endpoint = agents.resolve("gpu-01")
    assert endpoint is not None and endpoint.url == "http://10.1.0.5:9848/api/v1"
    assert agents.resolve("gpu-02") is None and agents.resolve("gpu-03") is None
    assert agents.allowed_nodes() == ["gpu-01"]
    assert len(paths) == 1  # cached for the TTL
    assert "labelSelector=kubernetes.io%2Fservice-name%3Dtoposcope-agent" in paths[0]
    with pytest.raises(ConfigError):
        node_ips_from_slices({"kind": "Status"})
