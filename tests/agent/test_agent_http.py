"""``toposcope agent`` over real HTTP: authentication, and a pin through the API for real."""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.agent.conftest import Child, allowed_cpus, cpus_allowed
from toposcope.advisor.applying import Applier
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.recommendations import make_recommendation
from toposcope.advisor.rmclients import AgentResourceManager, HttpResourceManager
from toposcope.advisor.rmclients.endpoints import parse_url_map
from toposcope.agent import cli as agent_cli
from toposcope.cpulist import format_cpulist
from toposcope.report.recommendation import RecommendationKind, Risk, Target
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError

TOKEN = "agent-s3cret"


def agent_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="toposcope agent")
    agent_cli.add_arguments(parser)
    return parser.parse_args(["--listen", "127.0.0.1:0", "--hostname", "n1", *argv])


def serve(args: argparse.Namespace) -> Iterator[str]:
    server, _ = agent_cli.build_server(args)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/api/v1"
    finally:
        server.shutdown()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def agent(token_file: Path) -> Iterator[str]:
    yield from serve(agent_args("--token-file", str(token_file)))


@pytest.fixture
def agent_without_token() -> Iterator[str]:
    yield from serve(agent_args())


def post(url: str, body: Mapping[str, object], token: str | None) -> tuple[int, dict[str, object]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_defaults_to_loopback() -> None:
    parser = argparse.ArgumentParser()
    agent_cli.add_arguments(parser)
    args = parser.parse_args([])
    assert args.listen == "127.0.0.1:9848"
    assert args.token_file is None


@pytest.mark.parametrize(
    ("token", "status", "message"),
    [
        (None, 401, "missing Authorization"),
        ("wrong", 403, "not valid"),
    ],
)
def test_state_changes_need_the_token(
    agent: str, child: Child, token: str | None, status: int, message: str
) -> None:
    before = cpus_allowed(child.pid)
    body = {"request_id": "a1", "kind": "pin", "workload": child.workload, "cpus": [0]}
    code, answer = post(f"{agent}/actions", body, token)
    assert code == status
    assert message in str(answer["error"])
    assert cpus_allowed(child.pid) == before


def test_without_a_token_file_every_change_is_refused(
    agent_without_token: str, child: Child
) -> None:
    body = {"request_id": "a1", "kind": "pin", "workload": child.workload, "cpus": [0]}
    code, answer = post(f"{agent_without_token}/actions", body, TOKEN)
    assert code == 403
    assert "--token-file" in str(answer["error"])
    with urllib.request.urlopen(f"{agent_without_token}/nodes", timeout=10) as response:
        [node] = json.loads(response.read())  # reads stay open
    assert node["name"] == "n1"


def test_pin_and_revert_through_the_api(agent: str, child: Child) -> None:
    start = cpus_allowed(child.pid)
    client = HttpResourceManager(agent, TOKEN, timeout=10)
    state = client.apply(ActionRequest("p1", ActionKind.PIN, child.workload, "n1", [0]))
    assert set(cpus_allowed(child.pid).values()) == {"0"}
    assert client.action("p1") == state
    code, _ = post(
        f"{agent}/actions",
        {"request_id": "p1", "kind": "pin", "workload": child.workload, "node": "n1", "cpus": [0]},
        TOKEN,
    )
    assert code == 200  # a repeat: nothing done again
    assert state.before is not None
    client.apply(
        ActionRequest("revert-p1", ActionKind.PIN, child.workload, "n1", state.before.cpus)
    )
    assert cpus_allowed(child.pid) == start
    with pytest.raises(ResourceManagerError) as refused:
        client.apply(ActionRequest("x", ActionKind.PLACE, child.workload, "n1", gpus=[0]))
    assert refused.value.status == 400


def test_the_advisor_applies_and_reverts_through_the_agent(
    agent: str, child: Child, tmp_path: Path
) -> None:
    """The advisor's agent backend end to end: the node's listed agent, audit log, revert."""
    node = "gpu-01"
    rec = make_recommendation(
        kind=RecommendationKind.PIN,
        policy="numa-pinning",
        target=Target(node, child.workload),
        summary="pin to CPU 0",
        current={},
        proposed={"numa_node": 0, "mems": [0]},
        evidence=[],
        estimated_gain=0.3,
        gain_model="test",
        confidence=0.9,
        risk=Risk.LOW,
        actions=[
            ActionRequest("", ActionKind.PIN, child.workload, node, [0], [0]),
            ActionRequest("", ActionKind.MIGRATE_MEMORY, child.workload, node, mems=[0]),
        ],
    )
    port = urllib.parse.urlsplit(agent).port
    agents = parse_url_map(f"{node}=http://127.0.0.1:{port}/api/v1", template=None, token=TOKEN)
    manager = AgentResourceManager(agents, [node])
    audit = AuditLog(tmp_path / "audit.sqlite")
    applier = Applier(manager, audit, actor="test@host", backend="agent")
    [outcome] = applier.apply([rec])
    assert outcome.result == "applied", outcome.detail
    assert set(cpus_allowed(child.pid).values()) == {"0"}
    assert [e.result for e in audit.entries(rec.id)] == ["succeeded", "succeeded"]
    outcomes = applier.revert(rec.id)
    assert [o.result for o in outcomes] == ["reverted", "reverted"]
    assert set(cpus_allowed(child.pid).values()) == {format_cpulist(allowed_cpus())}
