"""Authentication of state changes: 401 without a token, 403 with a wrong one or none set."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from tests.sim_api.conftest import AUTH, BASE, TOKEN
from tests.sim_api.fake_rm import FakeResourceManager
from toposcope.rm.api import make_api_app

PIN = {"request_id": "r-auth", "kind": "pin", "workload": "train-a", "cpus": [4, 5]}


def test_no_authorization_header_is_401_with_a_challenge(
    client: FlaskClient, rm: FakeResourceManager
) -> None:
    response = client.post(f"{BASE}/actions", json=PIN)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.get_json()["field"] is None
    assert "Bearer" in response.get_json()["error"]
    assert rm.applied == 0


@pytest.mark.parametrize("header", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", TOKEN])
def test_a_header_without_a_bearer_token_is_401(
    client: FlaskClient, rm: FakeResourceManager, header: str
) -> None:
    response = client.post(f"{BASE}/actions", json=PIN, headers={"Authorization": header})
    assert response.status_code == 401
    assert rm.applied == 0


@pytest.mark.parametrize("given", ["wrong", TOKEN + "x", TOKEN[:-1]])
def test_a_wrong_token_is_403(client: FlaskClient, rm: FakeResourceManager, given: str) -> None:
    response = client.post(
        f"{BASE}/actions", json=PIN, headers={"Authorization": f"Bearer {given}"}
    )
    assert response.status_code == 403
    assert response.get_json() == {
        "error": "the bearer token is not valid for this server",
        "field": None,
    }
    assert rm.applied == 0


def test_the_scheme_is_case_insensitive(client: FlaskClient) -> None:
    response = client.post(
        f"{BASE}/actions", json=PIN, headers={"Authorization": f"bearer {TOKEN}"}
    )
    assert response.status_code == 202


@pytest.mark.parametrize("headers", [{}, AUTH, {"Authorization": "Bearer anything"}])
def test_a_server_without_a_token_refuses_every_state_change(
    rm: FakeResourceManager, headers: dict[str, str]
) -> None:
    client = make_api_app(rm, token=None).test_client()
    response = client.post(f"{BASE}/actions", json=PIN, headers=headers)
    assert response.status_code == 403
    assert "--token-file" in response.get_json()["error"]
    assert rm.applied == 0
    assert client.get(f"{BASE}/nodes").status_code == 200


def test_authentication_comes_before_body_validation(client: FlaskClient) -> None:
    response = client.post(f"{BASE}/actions", data="{not json")
    assert response.status_code == 401
    wrong = client.post(
        f"{BASE}/actions", json={"kind": "nope"}, headers={"Authorization": "Bearer x"}
    )
    assert wrong.status_code == 403


def test_reads_need_no_token(client: FlaskClient) -> None:
    for path in ("/healthz", "/nodes", "/workloads", "/workloads/train-a", "/openapi.json"):
        assert client.get(f"{BASE}{path}").status_code == 200, path
