"""The one bearer-token check of the HTTP APIs: 401 without a usable header, 403 with a wrong
token or none configured, and the guard running before the body is read.
"""

from __future__ import annotations

from typing import Any

import pytest
from apiflask import APIFlask
from apiflask.exceptions import HTTPError
from flask import Response, jsonify, request

from toposcope.auth.bearer import MISSING_MESSAGE, WRONG_MESSAGE, BearerAuth, bearer_token

TOKEN = "s3cret-t0ken"
NO_TOKEN = "no token configured; use --token-file"


def auth(token: str | None = TOKEN) -> BearerAuth:
    return BearerAuth(token, realm="test-realm", no_token_message=NO_TOKEN)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer    ", None),
        (TOKEN, None),
        (f"Bearer {TOKEN}", TOKEN),
        (f"  bearer   {TOKEN}  ", TOKEN),
        (f"BEARER {TOKEN}", TOKEN),
    ],
)
def test_the_token_of_a_header(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize("header", [None, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer  ", TOKEN])
def test_no_usable_header_is_401_with_a_challenge(header: str | None) -> None:
    refused = auth().refusal(header)
    assert refused is not None
    assert (refused.status, refused.message) == (401, MISSING_MESSAGE)
    assert refused.headers == {"WWW-Authenticate": 'Bearer realm="test-realm"'}


@pytest.mark.parametrize("given", ["wrong", TOKEN + "x", TOKEN[:-1], "s3cret-t0kén", TOKEN.upper()])
def test_a_wrong_token_is_403(given: str) -> None:
    refused = auth().refusal(f"Bearer {given}")
    assert refused is not None
    assert (refused.status, refused.message, refused.headers) == (403, WRONG_MESSAGE, {})


@pytest.mark.parametrize("header", [None, f"Bearer {TOKEN}", "Bearer anything"])
def test_without_a_configured_token_everything_is_403(header: str | None) -> None:
    refused = auth(None).refusal(header)
    assert refused is not None
    assert (refused.status, refused.message) == (403, NO_TOKEN)


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f" Bearer  {TOKEN} "])
def test_the_right_token_passes(header: str) -> None:
    assert auth().refusal(header) is None


def guarded_app(token: str | None) -> APIFlask:
    """A small API whose one POST route is guarded and reads a JSON body."""
    app = APIFlask("bearer-test", docs_path=None, spec_path=None)
    seen: list[Any] = []

    @app.error_processor
    def on_error(error: HTTPError) -> Response:
        response = jsonify({"error": error.message})
        response.status_code = error.status_code
        response.headers.update(error.headers or {})
        return response

    @app.post("/change")
    @auth(token).required
    def change() -> dict[str, Any]:
        seen.append(request.get_json())
        return {"done": len(seen)}

    return app


def test_the_guard_answers_before_the_body_is_read() -> None:
    client = guarded_app(TOKEN).test_client()
    answer = client.post("/change", data="{not json", content_type="application/json")
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="test-realm"'
    assert answer.get_json() == {"error": MISSING_MESSAGE}
    wrong = client.post("/change", data="{not json", headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 403


def test_the_guarded_view_runs_for_the_right_token_only() -> None:
    client = guarded_app(TOKEN).test_client()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert client.post("/change", json={}, headers=headers).get_json() == {"done": 1}
    assert client.post("/change", json={}).status_code == 401
    assert client.post("/change", json={}, headers=headers).get_json() == {"done": 2}
    unconfigured = guarded_app(None).test_client()
    answer = unconfigured.post("/change", json={}, headers=headers)
    assert (answer.status_code, answer.get_json()) == (403, {"error": NO_TOKEN})
