"""Calling the Dash app's callbacks as its renderer does, through a Flask test client: the
callback ids it learns from ``/_dash-dependencies``, the bodies it posts to
``/_dash-update-component``, the basic-auth header and the CSRF header it copies from the
app's cookie.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import bcrypt
from flask.testing import FlaskClient

from tests.procs import free_port
from toposcope.dashboards.app import csrf
from toposcope.dashboards.app.access import Access
from toposcope.dashboards.app.server import AppSettings, create_app
from toposcope.serving.webconfig import load_web_config

UPDATE = "/_dash-update-component"


def basic(user: str, password: str) -> dict[str, str]:
    """The ``Authorization`` header of a basic-auth user."""
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


def dependency(
    client: FlaskClient,
    headers: dict[str, str],
    *,
    output: str | None = None,
    trigger: str | None = None,
) -> dict[str, Any]:
    """The first callback that writes ``output`` (``id.property``) or is triggered by
    ``trigger`` (``id.property``), as the page's renderer learns it.
    """
    answer = client.get("/_dash-dependencies", headers=headers)
    assert answer.status_code == 200
    for found in answer.get_json():
        inputs = {f"{i['id']}.{i['property']}" for i in found["inputs"]}
        if (output is not None and output in found["output"]) or trigger in inputs:
            return dict(found)
    raise AssertionError(f"no callback writes {output} or listens to {trigger}")


def callback_id(client: FlaskClient, output: str, headers: dict[str, str]) -> str:
    """The id of the callback that writes ``output``, as the page's renderer learns it."""
    return str(dependency(client, headers, output=output)["output"])


def outputs(callback: str) -> list[dict[str, str]]:
    """The ``outputs`` the renderer posts for a multi-output callback id (``..a.b...c.d..``),
    without the ``@hash`` of outputs that allow duplicates.
    """
    parts = callback.strip(".").split("...")
    return [
        {"id": part.rsplit(".", 1)[0], "property": part.rsplit(".", 1)[1].split("@")[0]}
        for part in parts
    ]


def apply_body(
    client: FlaskClient, headers: dict[str, str], rec_id: str = "pin-1"
) -> dict[str, Any]:
    """What the renderer posts when the operator confirms Apply on the first table row."""
    output = callback_id(client, "recs-outcome.children", headers)
    return {
        "output": output,
        "outputs": outputs(output),
        "inputs": [
            {"id": "recs-confirm-apply", "property": "submit_n_clicks", "value": 1},
            {"id": "recs-confirm-revert", "property": "submit_n_clicks", "value": None},
        ],
        "changedPropIds": ["recs-confirm-apply.submit_n_clicks"],
        "state": [
            {"id": "recs-table", "property": "selected_rows", "value": [0]},
            {"id": "recs-table", "property": "data", "value": [{"id": rec_id}]},
            {"id": "recs-version", "property": "data", "value": 0},
        ],
    }


def follow_body(
    client: FlaskClient, headers: dict[str, str], following: object, tick: int
) -> dict[str, Any]:
    """What the renderer posts on the ``tick``-th tick while the page follows an action (the
    ``recs-follow`` store holding ``following``).
    """
    output = str(dependency(client, headers, trigger="recs-follow-tick.n_intervals")["output"])
    return {
        "output": output,
        "outputs": outputs(output),
        "inputs": [{"id": "recs-follow-tick", "property": "n_intervals", "value": tick}],
        "changedPropIds": ["recs-follow-tick.n_intervals"],
        "state": [
            {"id": "recs-follow", "property": "data", "value": following},
            {"id": "recs-version", "property": "data", "value": 1},
        ],
    }


def csrf_header(client: FlaskClient, domain: str = "localhost") -> dict[str, str]:
    """The header the renderer copies from the app's CSRF cookie."""
    cookie = client.get_cookie(csrf.COOKIE, domain=domain)
    assert cookie is not None, "the app set no CSRF cookie"
    return {csrf.HEADER: cookie.value}


def signed_in_app(
    advisor_url: str, token: str, directory: Path, timeout: float, user: str = "alice"
) -> FlaskClient:
    """A test client of the Dash app in front of the advisor at ``advisor_url`` (its API
    token ``token``, ``timeout`` seconds per call, no periodic refresh), whose web
    configuration in ``directory`` lets ``user`` sign in with the password ``USER-pw``;
    checked to let that user in.
    """
    password = f"{user}-pw"
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = directory / "web.yml"
    web.write_text(f"basic_auth_users:\n  {user}: '{digest}'\n")
    settings = AppSettings(
        f"http://127.0.0.1:{free_port()}",
        advisor_url,
        token,
        timeout=timeout,
        refresh="off",
        access=Access(web_config=load_web_config(web)),
    )
    client: FlaskClient = create_app(settings).server.test_client()
    assert client.get("/", headers=basic(user, password)).status_code == 200
    return client


def answered(answer: Any) -> dict[str, dict[str, Any]]:
    """A callback answer's new values by component id (the answer checked to be a 200)."""
    assert answer.status_code == 200, answer.get_data(as_text=True)
    response: dict[str, dict[str, Any]] = answer.get_json()["response"]
    return response
