"""The advisor's HTTP client reads answers with the same models the server writes them with.

Over real HTTP on loopback: the client's view equals the backend's, an action id with a
``/`` survives the trip, refusals keep the server's status and field, and an answer in any
other shape (the old ``{"nodes": [...]}`` object, a CPU number below 0) is refused as a
connection problem naming what is wrong, instead of being guessed at.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.advisor.fakes import Answer, FakeServer, Request
from tests.sim_api.conftest import TOKEN
from tests.sim_api.fake_rm import FakeResourceManager
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.rmclients.http import HttpResourceManager
from toposcope.rm import ActionKind, ActionRequest, ResourceManagerError


@pytest.fixture
def client(server: str) -> HttpResourceManager:
    return HttpResourceManager(server, TOKEN, timeout=10)


def test_the_client_sees_what_the_backend_has(client: HttpResourceManager) -> None:
    backend = FakeResourceManager()
    assert client.nodes() == backend.nodes()
    assert client.workloads() == backend.workloads()


def test_an_action_round_trip_with_a_slash_in_its_request_id(client: HttpResourceManager) -> None:
    request = ActionRequest("rec-9/0", ActionKind.PIN, "train-a", "node-a", [1, 0])
    state = client.apply(request)
    assert state.request == request
    assert state.after is not None and state.after.cpus == [1, 0]
    assert client.apply(ActionRequest("rec-9/0", ActionKind.PIN, "train-a", "node-a", [0, 1]))
    assert client.action("rec-9/0") == state
    with pytest.raises(ResourceManagerError) as conflict:
        client.apply(ActionRequest("rec-9/0", ActionKind.PIN, "train-a", "node-a", [2]))
    assert (conflict.value.status, conflict.value.field) == (409, "request_id")


def test_a_refusal_keeps_the_servers_status_and_field(client: HttpResourceManager) -> None:
    with pytest.raises(ResourceManagerError) as refused:
        client.apply(ActionRequest("bad", ActionKind.PIN, "train-a", "node_a", [0]))
    assert (refused.value.status, refused.value.field) == (422, "node")
    assert "is not a host name" in str(refused.value)


@pytest.fixture
def odd_server() -> Iterator[FakeServer]:
    def route(request: Request) -> Answer:
        if request.path.endswith("/nodes"):
            return 200, json.dumps({"nodes": []}).encode()
        allocation = {"node": "n1", "cpus": [-1], "mems": [], "gpus": []}
        workload = {"name": "w", "kind": "job", "state": "running", "allocation": allocation}
        return 200, json.dumps([workload]).encode()

    with FakeServer(route).run() as server:
        yield server


@pytest.mark.parametrize(
    ("read", "words"),
    [
        ("nodes", "GET /nodes: Input should be a valid list"),
        ("workloads", "GET /workloads: 0.allocation.cpus.0"),
    ],
)
def test_an_answer_the_api_does_not_define_is_refused(
    odd_server: FakeServer, read: str, words: str
) -> None:
    client = HttpResourceManager(odd_server.url, TOKEN, timeout=10)
    with pytest.raises(AdvisorConnectionError) as refused:
        getattr(client, read)()
    assert words in str(refused.value)
    assert odd_server.url in str(refused.value)
