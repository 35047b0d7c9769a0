"""The agent's plan: what the advisor's client sends is the plan, and the printed plan works.

A real ``toposcope agent`` serves this host on loopback. The advisor's agent client plans a
pin (one ``POST /actions``) and carries it out; the agent's record of the action holds the
request it received, which is the plan's body. The same plan printed as ``advise --dry-run``
prints it, run by bash (``curl``, the token in ``$TOKEN``), pins a second child the same way.
Kinds a node agent refuses are refusals in the plan, never calls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.conftest import Child, cpus_allowed, running_child
from tests.agent.test_agent_http import TOKEN, agent_args, serve
from toposcope.advisor.rmclients import AgentResourceManager, HttpResourceManager
from toposcope.advisor.rmclients.endpoints import parse_url_map
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError, to_json
from toposcope.rm.plan import HttpStep
from toposcope.rm.plan_script import plan_lines


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[str]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    yield from serve(agent_args("--token-file", str(token)))


@pytest.fixture
def second_child() -> Iterator[Child]:
    with running_child() as started:
        yield started


def agents(url: str) -> AgentResourceManager:
    endpoints = parse_url_map(f"n1={url}", template=None, token=TOKEN)
    return AgentResourceManager(endpoints, ["n1"], timeout=10)


def test_the_client_sends_its_plan_and_the_agent_receives_it(agent: str, child: Child) -> None:
    client = agents(agent)
    request = ActionRequest("plan-1", ActionKind.PIN, child.workload, "n1", [0], reason="plan")
    plan = client.plan(request)
    (step,) = plan.steps
    assert isinstance(step, HttpStep) and step.url == f"{agent}/actions"
    assert step.method == "POST" and step.body == to_json(request)
    client.apply(request)
    received = HttpResourceManager(agent, TOKEN, timeout=10).action("plan-1").request
    assert to_json(received) == step.body
    assert set(cpus_allowed(child.pid).values()) == {"0"}


def test_kinds_the_agent_refuses_are_never_sent(agent: str, child: Child) -> None:
    client = agents(agent)
    request = ActionRequest("plan-2", ActionKind.MIGRATE, child.workload, "n1", gpus=[0])
    plan = client.plan(request)
    assert plan.steps == () and "not supported on a single host" in plan.refused
    with pytest.raises(ResourceManagerError) as refused:
        client.apply(request)
    assert refused.value.status == 400
    with pytest.raises(ResourceManagerError) as unknown:
        HttpResourceManager(agent, TOKEN, timeout=10).action("plan-2")
    assert unknown.value.status == 404  # the agent never saw it


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_the_printed_plan_pins_through_curl(agent: str, second_child: Child) -> None:
    request = ActionRequest("plan-3", ActionKind.PIN, second_child.workload, "n1", [0])
    script = "set -eu\n" + "\n".join(plan_lines(agents(agent).plan(request))) + "\n"
    done = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "succeeded"
    assert set(cpus_allowed(second_child.pid).values()) == {"0"}
    received = HttpResourceManager(agent, TOKEN, timeout=10).action("plan-3").request
    assert received == request
