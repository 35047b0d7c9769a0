"""POST /actions and GET /actions/{id}: each kind, refusals mapped to statuses, idempotency."""

from __future__ import annotations

import threading
from typing import Any

from flask.testing import FlaskClient

from tests.sim_api.conftest import AUTH, BASE
from tests.sim_api.fake_rm import FakeResourceManager


def post(client: FlaskClient, body: dict[str, Any]) -> Any:
    return client.post(f"{BASE}/actions", json=body, headers=AUTH)


def test_pin_is_accepted_with_the_action_state_and_its_location(
    client: FlaskClient, rm: FakeResourceManager
) -> None:
    body = {
        "request_id": "rec-1/0",
        "kind": "pin",
        "workload": "train-a",
        "cpus": [4, 5, 6, 7],
        "mems": [1],
        "reason": "GPU 0 is local to NUMA node 1",
    }
    response = post(client, body)
    assert response.status_code == 202
    state = response.get_json()
    assert state == {
        "id": "act-1",
        "request": {"node": None, "gpus": [], **body},
        "status": "succeeded",
        "before": {"node": "node-a", "cpus": [0, 1, 2, 3], "mems": [0], "gpus": [0]},
        "after": {"node": "node-a", "cpus": [4, 5, 6, 7], "mems": [1], "gpus": [0]},
        "error": "",
        "cost_seconds": 0.0,
        "irreversible": None,
        "note": "",
    }
    assert response.headers["Location"] == f"{BASE}/actions/act-1"
    workload = client.get(f"{BASE}/workloads/train-a").get_json()
    assert workload["pinned"] is True
    assert workload["allocation"]["cpus"] == [4, 5, 6, 7]
    assert rm.applied == 1


def test_get_action_returns_the_stored_state(client: FlaskClient) -> None:
    created = post(
        client, {"request_id": "m-1", "kind": "migrate-memory", "workload": "train-a", "mems": [1]}
    )
    assert created.status_code == 202
    fetched = client.get(created.headers["Location"])
    assert fetched.status_code == 200
    assert fetched.get_json() == created.get_json()


def test_get_unknown_action_is_404(client: FlaskClient) -> None:
    response = client.get(f"{BASE}/actions/act-999")
    assert response.status_code == 404
    assert response.get_json() == {"error": "unknown action 'act-999'", "field": None}


def test_place_migrate_and_release(client: FlaskClient, rm: FakeResourceManager) -> None:
    place = post(
        client,
        {
            "request_id": "p",
            "kind": "place",
            "workload": "queued-d",
            "node": "node-b",
            "gpus": [3],
            "cpus": [8, 9],
            "mems": [1],
        },
    )
    assert place.status_code == 202
    assert place.get_json()["before"] is None
    assert place.get_json()["after"] == {"node": "node-b", "cpus": [8, 9], "mems": [1], "gpus": [3]}
    migrate = post(
        client,
        {
            "request_id": "m",
            "kind": "migrate",
            "workload": "train-a",
            "node": "node-a",
            "gpus": [1],
        },
    )
    assert migrate.status_code == 202
    assert migrate.get_json()["cost_seconds"] == 30.0
    release = post(client, {"request_id": "r", "kind": "release", "workload": "idle-c"})
    assert release.status_code == 202
    assert release.get_json()["after"]["gpus"] == []
    assert rm.applied == 3


def test_a_repeated_request_id_does_nothing_and_answers_200_with_the_first_state(
    client: FlaskClient, rm: FakeResourceManager
) -> None:
    body = {"request_id": "rec-7/0", "kind": "pin", "workload": "infer-b", "cpus": [8, 9]}
    first = post(client, body)
    again = post(client, body)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.get_json() == first.get_json()
    assert rm.applied == 1


def test_a_request_id_reused_for_another_request_is_409_and_changes_nothing(
    client: FlaskClient, rm: FakeResourceManager
) -> None:
    first = post(client, {"request_id": "x", "kind": "pin", "workload": "infer-b", "cpus": [1]})
    other = post(client, {"request_id": "x", "kind": "release", "workload": "idle-c"})
    assert (first.status_code, other.status_code) == (202, 409)
    assert other.get_json()["field"] == "request_id"
    assert "'x' was used for a different request" in other.get_json()["error"]
    assert client.get(f"{BASE}/workloads/idle-c").get_json()["allocation"]["gpus"] == [2]
    assert rm.applied == 1


def test_concurrent_repeats_apply_once_and_only_one_is_202(
    client: FlaskClient, rm: FakeResourceManager
) -> None:
    body = {"request_id": "race", "kind": "pin", "workload": "train-a", "cpus": [1, 2]}
    start = threading.Barrier(8)
    statuses: list[int] = []

    def send() -> None:
        start.wait()
        statuses.append(post(client, body).status_code)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] * 7 + [202]
    assert rm.applied == 1


def test_unknown_workload_is_404(client: FlaskClient, rm: FakeResourceManager) -> None:
    response = post(client, {"request_id": "u", "kind": "pin", "workload": "ghost", "cpus": [0]})
    assert response.status_code == 404
    assert response.get_json() == {"error": "unknown workload 'ghost'", "field": None}
    assert rm.applied == 0


def test_gpus_taken_is_409(client: FlaskClient) -> None:
    response = post(
        client,
        {
            "request_id": "t",
            "kind": "place",
            "workload": "queued-d",
            "node": "node-b",
            "gpus": [1, 3],
        },
    )
    assert response.status_code == 409
    assert response.get_json() == {"error": "GPUs [1] on node-b are taken", "field": None}


def test_cpus_not_on_the_node_is_400(client: FlaskClient) -> None:
    response = post(
        client, {"request_id": "c", "kind": "pin", "workload": "train-a", "cpus": [3, 12]}
    )
    assert response.status_code == 400
    assert response.get_json() == {"error": "CPUs [12] are not on node-a", "field": None}


def test_a_refused_request_can_be_retried_with_the_same_id(client: FlaskClient) -> None:
    body: dict[str, Any] = {
        "request_id": "retry",
        "kind": "pin",
        "workload": "train-a",
        "cpus": [99],
    }
    assert post(client, body).status_code == 400
    body["cpus"] = [7]
    assert post(client, body).status_code == 202


def test_a_resource_manager_status_outside_4xx_5xx_becomes_500(rm: FakeResourceManager) -> None:
    from toposcope.rm import ActionRequest, ActionState, ResourceManagerError
    from toposcope.rm.api import make_api_app

    class Odd(FakeResourceManager):
        def _carry_out(self, request: ActionRequest) -> ActionState:
            raise ResourceManagerError("odd", status=200)

    client = make_api_app(Odd(), token="t").test_client()
    response = client.post(
        f"{BASE}/actions",
        headers={"Authorization": "Bearer t"},
        json={"request_id": "o", "kind": "release", "workload": "idle-c"},
    )
    assert response.status_code == 500
    assert response.get_json() == {"error": "odd", "field": None}
