"""Bodies the API refuses before the resource manager sees them: 400 or 422 with the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.sim_api.conftest import AUTH, BASE
from tests.sim_api.fake_rm import FakeResourceManager

GOOD: dict[str, Any] = {"request_id": "v-1", "kind": "pin", "workload": "train-a", "cpus": [1]}


@pytest.mark.parametrize(
    "data",
    ["{not json", "", '{"request_id": "a",}', "\xff\xfe"],
    ids=["broken", "empty", "trailing-comma", "bytes"],
)
def test_a_body_that_is_not_json_is_400(
    client: FlaskClient, rm: FakeResourceManager, data: str
) -> None:
    response = client.post(
        f"{BASE}/actions", data=data, headers={**AUTH, "Content-Type": "application/json"}
    )
    assert response.status_code == 400
    body = response.get_json()
    assert body["field"] is None
    assert "not valid JSON" in body["error"]
    assert rm.applied == 0


def with_(**changes: Any) -> dict[str, Any]:
    body = {**GOOD, **changes}
    return {key: value for key, value in body.items() if value is not DROP}


DROP = object()


@pytest.mark.parametrize(
    ("body", "field", "hint"),
    [
        (with_(kind="teleport"), "kind", "'pin'"),
        (with_(request_id=DROP), "request_id", "Field required"),
        (with_(workload=DROP), "workload", "Field required"),
        (with_(kind=DROP), "kind", "Field required"),
        (with_(request_id=""), "request_id", "request id '' is not"),
        (with_(request_id=7), "request_id", "valid string"),
        (with_(cpus="0-3"), "cpus", "valid list"),
        (with_(cpus=["1"]), "cpus", "valid integer"),
        (with_(cpus=[True]), "cpus", "valid integer"),
        (with_(cpus=[1.5]), "cpus", "valid integer"),
        (with_(cpus=[-1]), "cpus", "greater than or equal to 0"),
        (with_(gpus=[0], mems={"0": 1}), "mems", "valid list"),
        (with_(node=3), "node", "valid string"),
        (with_(reason=None), "reason", "valid string"),
        (with_(cpu=[1]), "cpu", "unknown field"),
        (with_(node="node_1"), "node", "is not a host name"),
        (with_(cpus=[70_000]), "cpus", "less than 65536"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_body_that_breaks_the_schema_is_422_naming_the_field(
    client: FlaskClient, rm: FakeResourceManager, body: dict[str, Any], field: str, hint: str
) -> None:
    response = client.post(f"{BASE}/actions", json=body, headers=AUTH)
    assert response.status_code == 422, response.get_json()
    error = response.get_json()
    assert error["field"] == field
    assert error["error"].startswith(f"{field}")
    assert hint in error["error"]
    assert rm.applied == 0


@pytest.mark.parametrize("data", [json.dumps([GOOD]), '"pin"', "3", "null"])
def test_a_json_body_that_is_not_an_object_is_422(client: FlaskClient, data: str) -> None:
    response = client.post(
        f"{BASE}/actions", data=data, headers={**AUTH, "Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert set(response.get_json()) == {"error", "field"}


def test_every_problem_is_reported_at_once(client: FlaskClient) -> None:
    response = client.post(f"{BASE}/actions", json={"kind": "nope", "cpus": ["x"]}, headers=AUTH)
    assert response.status_code == 422
    message = response.get_json()["error"]
    for field in ("request_id", "kind", "workload", "cpus.0"):
        assert f"{field}:" in message


def test_the_good_body_passes(client: FlaskClient) -> None:
    assert client.post(f"{BASE}/actions", json=GOOD, headers=AUTH).status_code == 202
