"""GET endpoints: health, nodes and workloads, and JSON answers for unknown routes."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.sim_api.conftest import BASE
from tests.sim_api.fake_rm import FakeResourceManager
from toposcope.rm import NodeView
from toposcope.rm.api import make_api_app


def test_healthz_answers_without_a_token(client: FlaskClient) -> None:
    response = client.get(f"{BASE}/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_nodes_list_every_node_with_its_topology(client: FlaskClient) -> None:
    response = client.get(f"{BASE}/nodes")
    assert response.status_code == 200
    nodes = response.get_json()
    assert [n["name"] for n in nodes] == ["node-a", "node-b"]
    node_a = nodes[0]
    assert node_a["labels"] == {"sim": "true"}
    assert [n["cpus"] for n in node_a["topology"]["numa_nodes"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g["index"] for g in node_a["topology"]["gpus"]] == [0, 1]


def test_one_node_by_name(client: FlaskClient) -> None:
    response = client.get(f"{BASE}/nodes/node-b")
    assert response.status_code == 200
    body = response.get_json()
    assert body["name"] == "node-b"
    assert len(body["topology"]["gpus"]) == 4


def test_unknown_node_is_404_in_the_error_shape(client: FlaskClient) -> None:
    response = client.get(f"{BASE}/nodes/nope")
    assert response.status_code == 404
    assert response.get_json() == {"error": "unknown node 'nope'", "field": None}


def test_workloads_list_with_allocations(client: FlaskClient) -> None:
    response = client.get(f"{BASE}/workloads")
    assert response.status_code == 200
    by_name = {w["name"]: w for w in response.get_json()}
    assert set(by_name) == {"train-a", "infer-b", "idle-c", "queued-d"}
    assert by_name["train-a"] == {
        "name": "train-a",
        "kind": "slurm",
        "state": "running",
        "allocation": {"node": "node-a", "cpus": [0, 1, 2, 3], "mems": [0], "gpus": [0]},
        "gpus_requested": 1,
        "pinned": False,
        "nodes_requested": 1,
    }
    assert by_name["queued-d"]["allocation"] is None


def test_one_workload_by_name_and_unknown_one(client: FlaskClient) -> None:
    assert client.get(f"{BASE}/workloads/infer-b").get_json()["allocation"]["gpus"] == [0, 1]
    response = client.get(f"{BASE}/workloads/ghost")
    assert response.status_code == 404
    assert response.get_json() == {"error": "unknown workload 'ghost'", "field": None}


def test_unknown_route_and_wrong_method_answer_json(client: FlaskClient) -> None:
    missing = client.get(f"{BASE}/gpus")
    assert missing.status_code == 404
    assert set(missing.get_json()) == {"error", "field"}
    wrong = client.delete(f"{BASE}/nodes")
    assert wrong.status_code == 405
    assert wrong.get_json()["field"] is None
    assert "GET" in wrong.headers["Allow"]


def test_prefix_is_a_parameter(rm: FakeResourceManager) -> None:
    client = make_api_app(rm, token=None, prefix="/v1/").test_client()
    assert client.get("/v1/healthz").get_json() == {"status": "ok"}
    assert client.get("/v1/openapi.json").get_json()["paths"].keys() >= {"/v1/nodes"}
    assert client.get(f"{BASE}/healthz").status_code == 404


def test_a_resource_manager_failure_is_a_json_500(rm: FakeResourceManager) -> None:
    class Broken(FakeResourceManager):
        def nodes(self) -> list[NodeView]:
            raise RuntimeError("backend exploded")

    app = make_api_app(Broken(), token=None)
    response = app.test_client().get(f"{BASE}/nodes")
    assert response.status_code == 500
    assert set(response.get_json()) == {"error", "field"}
    assert "exploded" not in response.get_json()["error"]
