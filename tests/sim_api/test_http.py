"""The app over real HTTP: served by wsgiref on a loopback port, as the simulator serves it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.sim_api.conftest import BASE, TOKEN


def call(
    url: str, body: object = None, token: str | None = None
) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), json.load(error)


def test_reads_and_an_action_over_http(server: str) -> None:
    status, _, nodes = call(f"{server}/nodes")
    assert status == 200
    assert [n["name"] for n in nodes] == ["node-a", "node-b"]

    body = {"request_id": "http-1", "kind": "pin", "workload": "train-a", "cpus": [4, 5]}
    status, headers, state = call(f"{server}/actions", body, TOKEN)
    assert status == 202
    assert headers["Content-Type"] == "application/json"
    assert state["status"] == "succeeded"
    assert state["after"]["cpus"] == [4, 5]

    status, _, again = call(f"{server}/actions", body, TOKEN)
    assert (status, again) == (200, state)
    status, _, fetched = call(server.removesuffix(BASE) + headers["Location"])
    assert (status, fetched) == (200, state)


def test_errors_over_http(server: str) -> None:
    body = {"request_id": "http-2", "kind": "release", "workload": "idle-c"}
    status, headers, error = call(f"{server}/actions", body)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Bearer")
    assert error["field"] is None
    status, _, error = call(f"{server}/actions", body, "not-it")
    assert status == 403
    status, _, error = call(f"{server}/actions", {**body, "kind": "evict"}, TOKEN)
    assert (status, error["field"]) == (422, "kind")
    status, _, error = call(f"{server}/workloads/ghost")
    assert (status, error) == (404, {"error": "unknown workload 'ghost'", "field": None})
