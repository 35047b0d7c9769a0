"""The Dash app applies and reverts only for a signed-in user, from its own pages, on its own
host names: its Flask server (test client) in front of a recording stand-in for the advisor
on loopback, which must receive nothing from a refused request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from flask.testing import FlaskClient

from tests.dash.callbacks import UPDATE, apply_body, basic, callback_id, csrf_header
from tests.dash.conftest import FakeApi
from tests.procs import free_port
from toposcope.dashboards.app import csrf
from toposcope.dashboards.app.access import Access, parse_proxies
from toposcope.dashboards.app.server import AppSettings, create_app
from toposcope.serving.webconfig import load_web_config

TOKEN = "operator-t0ken"
REC = {
    "id": "pin-1",
    "kind": "pin",
    "target": {"node": "n1", "workload": "train", "gpus": []},
    "summary": "pin train",
    "estimated_gain": 0.4,
}


def advisor_api(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
    if path == "/api/v1/recommendations/pin-1/apply":
        return 200, {"recommendation_id": "pin-1", "result": "applied", "detail": "1 action"}
    if path == "/api/v1/recommendations/pin-1":
        return 200, {**REC, "audit": []}
    if path == "/api/v1/audit":
        return 200, {"actions": []}
    return 404, {"error": f"no route {method} {path}"}


@pytest.fixture
def advisor() -> Iterator[FakeApi]:
    with FakeApi(advisor_api) as api:
        yield api


@pytest.fixture
def web_config(tmp_path: Path) -> Path:
    users = {
        name: bcrypt.hashpw(f"{name}-pw".encode(), bcrypt.gensalt(rounds=4)).decode()
        for name in ("alice", "bob")
    }
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users:\n" + "".join(f"  {n}: '{d}'\n" for n, d in users.items()))
    return path


def client_for(advisor: FakeApi, access: Access) -> FlaskClient:
    closed = f"http://127.0.0.1:{free_port()}"
    settings = AppSettings(closed, advisor.url, TOKEN, timeout=2, refresh="off", access=access)
    client: FlaskClient = create_app(settings).server.test_client()
    return client


ALICE = basic("alice", "alice-pw")
BOB = basic("bob", "bob-pw")
#: paths under the bundle route that are no bundle file: Dash's catch-all answers some of them
#: with the app's page shell (Python, Dash and Plotly versions), its bundle route others with
#: an error page
NOT_BUNDLES = (
    "/_dash-component-suites//../_dash-layout",
    "/_dash-component-suites/..%2f_dash-layout",
    "/_dash-component-suites/../dash/",
    "/_dash-component-suites/dash/../../_dash-layout",
    "/_dash-component-suites/dash//dcc/async-dropdown.js",
    "/_dash-component-suites/dash/dcc/%2e%2e/%2e%2e/_dash-layout",
    "/_dash-component-suites/dash/dcc/async-dropdown.js%252e",
    "/_dash-component-suites/dash/",
    "/_dash-component-suites/plotly/__init__.py",  # in the package, not a registered resource
    "/_dash-component-suites/nope/x.js",
    "/_dash-component-suites/dash/nope.js",
)
#: bundle files a browser loads: a lazy chunk, and a fingerprinted entry point
BUNDLE_FILES = (
    "/_dash-component-suites/dash/dcc/async-dropdown.js",
    "/_dash-component-suites/dash/dcc/dash_core_components.v2_14_2m1700000000.js",
)


def posts(advisor: FakeApi) -> list[tuple[str, dict[str, str], bytes]]:
    """The POSTs the advisor received: path, headers, body."""
    return [
        (path, headers, body)
        for (method, path, _, headers), body in zip(advisor.requests, advisor.bodies, strict=True)
        if method == "POST"
    ]


def test_without_users_nobody_applies_and_the_page_says_why(advisor: FakeApi) -> None:
    client = client_for(advisor, Access())
    assert client.get("/").status_code == 200  # reading stays open on loopback
    assert client.get_cookie(csrf.COOKIE) is None  # CSRF tokens are for users only
    body = apply_body(client, {})
    answer = client.post(UPDATE, json=body)
    assert answer.status_code == 403
    assert "--web.config.file" in answer.get_data(as_text=True)
    assert posts(advisor) == []
    page = route(client, "/recommendations", {})
    assert "need a signed-in user" in page and "--auth.trusted-user-header" in page
    assert detail_buttons(client, {}) == (True, True)


def route(client: FlaskClient, path: str, headers: dict[str, str]) -> str:
    """The page skeleton the router callback answers for ``path``, as text."""
    body = {
        "output": callback_id(client, "page.children", headers),
        "outputs": [{"id": "page", "property": "children"}, {"id": "nav", "property": "children"}],
        "inputs": [{"id": "url", "property": "pathname", "value": path}],
        "changedPropIds": ["url.pathname"],
        "state": [{"id": "url", "property": "search", "value": ""}],
    }
    answer = client.post(UPDATE, json=body, headers=headers)
    assert answer.status_code == 200
    return json.dumps(answer.get_json())


def detail_buttons(client: FlaskClient, headers: dict[str, str]) -> tuple[bool, bool]:
    """Whether Apply and Revert are disabled with an open recommendation selected."""
    row = {"id": "pin-1", "status": "open", "gain": 0.4}
    body = {
        "output": callback_id(client, "recs-apply.disabled", headers),
        "outputs": [
            {"id": "recs-detail", "property": "children"},
            {"id": "recs-apply", "property": "disabled"},
            {"id": "recs-revert", "property": "disabled"},
        ],
        "inputs": [
            {"id": "recs-table", "property": "selected_rows", "value": [0]},
            {"id": "recs-table", "property": "data", "value": [row]},
        ],
        "changedPropIds": ["recs-table.selected_rows"],
    }
    answer = client.post(UPDATE, json=body, headers=headers).get_json()["response"]
    return answer["recs-apply"]["disabled"], answer["recs-revert"]["disabled"]


def test_basic_auth_users_sign_in_before_anything(advisor: FakeApi, web_config: Path) -> None:
    client = client_for(advisor, Access(web_config=load_web_config(web_config)))
    for headers in ({}, basic("alice", "wrong"), basic("mallory", "alice-pw")):
        answer = client.get("/", headers=headers)
        assert answer.status_code == 401, headers
        assert answer.headers["WWW-Authenticate"].startswith("Basic realm=")
    assert client.get("/", headers=ALICE).status_code == 200
    # Dash's library bundles hold no data and load without the page's credentials
    bundle = client.get("/_dash-component-suites/dash/dcc/async-dropdown.js")
    assert bundle.status_code != 401
    assert client.get("/_dash-layout").status_code == 401
    body = apply_body(client, ALICE)
    assert client.post(UPDATE, json=body, headers=csrf_header(client)).status_code == 401
    assert posts(advisor) == []
    assert "signed in as alice" in route(client, "/recommendations", ALICE)
    assert detail_buttons(client, ALICE) == (False, True)


def test_apply_needs_the_csrf_token(advisor: FakeApi, web_config: Path) -> None:
    client = client_for(advisor, Access(web_config=load_web_config(web_config)))
    assert client.get("/", headers=ALICE).status_code == 200
    # Dash's library bundles hold no data and load without the page's credentials
    bundle = client.get("/_dash-component-suites/dash/dcc/async-dropdown.js")
    assert bundle.status_code != 401
    assert client.get("/_dash-layout").status_code == 401
    body = apply_body(client, ALICE)
    token = csrf_header(client)[csrf.HEADER]
    other = client_for(advisor, Access(web_config=load_web_config(web_config)))
    other.get("/", headers=ALICE)
    foreign = csrf_header(other)[csrf.HEADER]  # alice's, but of another app instance
    for headers, cookie in (
        (ALICE, token),  # no header: a cross-site form or fetch cannot add one
        ({**ALICE, csrf.HEADER: token[:-1] + ("1" if token.endswith("0") else "0")}, token),
        ({**ALICE, csrf.HEADER: foreign}, foreign),  # a planted cookie, matching header
    ):
        client.set_cookie(csrf.COOKIE, cookie)
        answer = client.post(UPDATE, json=body, headers=headers)
        assert answer.status_code == 403, headers
        assert "CSRF" in answer.get_data(as_text=True)
    assert posts(advisor) == []
    client.set_cookie(csrf.COOKIE, token)
    answer = client.post(UPDATE, json=body, headers={**ALICE, csrf.HEADER: token})
    assert answer.status_code == 200
    assert "apply pin-1: applied 1 action" in answer.get_data(as_text=True)
    [(path, headers, sent)] = posts(advisor)
    assert path == "/api/v1/recommendations/pin-1/apply"
    assert json.loads(sent) == {"user": "alice"}
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Content-Type"] == "application/json"


def test_cross_origin_pages_cannot_apply(advisor: FakeApi, web_config: Path) -> None:
    client = client_for(advisor, Access(web_config=load_web_config(web_config)))
    client.get("/", headers=ALICE)
    body = apply_body(client, ALICE)
    signed = {**ALICE, **csrf_header(client)}
    for origin in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Referer": "http://evil.example/x"},
        {"Origin": "http://[::1"},
    ):
        answer = client.post(UPDATE, json=body, headers={**signed, **origin})
        assert answer.status_code == 403, origin
    assert posts(advisor) == []
    same = client.post(UPDATE, json=body, headers={**signed, "Origin": "http://localhost:9851"})
    assert same.status_code == 200
    assert len(posts(advisor)) == 1


def test_other_host_names_are_refused(advisor: FakeApi, web_config: Path) -> None:
    access = Access(
        web_config=load_web_config(web_config), allowed_hosts=("127.0.0.1:9851", "dash.example")
    )
    client = client_for(advisor, access)
    assert client.get("/", headers={**ALICE, "Host": "127.0.0.1:9851"}).status_code == 200
    assert client.get("/", headers={**ALICE, "Host": "dash.example:443"}).status_code == 200
    body = apply_body(client, {**ALICE, "Host": "127.0.0.1:9851"})
    signed = {**ALICE, **csrf_header(client, "127.0.0.1")}
    # a DNS-rebinding page: the browser sends its own name, even to 127.0.0.1
    for host in ("evil.example", "evil.example:9851", "127.0.0.1:80", "localhost:9851", ""):
        answer = client.get("/", headers={**ALICE, "Host": host})
        assert answer.status_code == 421, host
        assert client.post(UPDATE, json=body, headers={**signed, "Host": host}).status_code == 421
        assert csrf.COOKIE not in answer.headers.get("Set-Cookie", "")
    assert posts(advisor) == []


def test_the_trusted_header_counts_only_from_the_trusted_proxy(advisor: FakeApi) -> None:
    client = client_for(advisor, Access(user_header="X-Forwarded-User"))
    client.get("/", headers={"X-Forwarded-User": "bob"})
    body = apply_body(client, {})
    signed = {"X-Forwarded-User": "bob", **csrf_header(client)}
    outside = {"REMOTE_ADDR": "10.1.2.3"}
    answer = client.post(UPDATE, json=body, headers=signed, environ_base=outside)
    assert answer.status_code == 403
    assert "trusted proxy with the X-Forwarded-User header" in answer.get_data(as_text=True)
    assert detail_buttons(client, {"X-Forwarded-User": "bob"}) == (False, True)
    assert posts(advisor) == []
    proxy = {"REMOTE_ADDR": "127.0.0.1"}
    answer = client.post(UPDATE, json=body, headers=signed, environ_base=proxy)
    assert answer.status_code == 200
    [(_, _, sent)] = posts(advisor)
    assert json.loads(sent) == {"user": "bob"}


def test_trusted_proxy_networks(advisor: FakeApi) -> None:
    access = Access(user_header="X-Forwarded-User", trusted_proxies=parse_proxies("10.0.0.0/8"))
    client = client_for(advisor, access)
    client.get("/", headers={"X-Forwarded-User": "carol"}, environ_base={"REMOTE_ADDR": "10.1.2.3"})
    body = apply_body(client, {})
    signed = {"X-Forwarded-User": "carol", **csrf_header(client)}
    for remote, status in (("127.0.0.1", 403), ("::ffff:10.9.8.7", 200), ("10.1.2.3", 200)):
        answer = client.post(
            UPDATE, json=body, headers=signed, environ_base={"REMOTE_ADDR": remote}
        )
        assert answer.status_code == status, remote
    assert [json.loads(sent) for _, _, sent in posts(advisor)] == [{"user": "carol"}] * 2
    for name in (" ", "bob smith", "<b>bob</b>", "x" * 129):
        named = {**signed, "X-Forwarded-User": name}
        inside = {"REMOTE_ADDR": "10.1.2.3"}
        assert client.post(UPDATE, json=body, headers=named, environ_base=inside).status_code == 403
    assert len(posts(advisor)) == 2


@pytest.mark.parametrize(
    ("status", "answer", "shown"),
    [
        (
            409,
            {"error": "pin-1 is being applied", "state": "in_progress", "entries": [{"seq": 1}]},
            "apply pin-1 is already in progress (1 action still running)",
        ),
        (502, b"<html>Bad Gateway</html>", "the advisor answered HTTP 502: <html>Bad Gateway"),
    ],
)
def test_apply_outcomes_the_page_explains(status: int, answer: Any, shown: str) -> None:
    def answers(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
        return (200, {"actions": []}) if path == "/api/v1/audit" else (status, answer)

    with FakeApi(answers) as advisor:
        client = client_for(advisor, Access(user_header="X-Forwarded-User"))
        client.get("/", headers={"X-Forwarded-User": "bob"})
        signed = {"X-Forwarded-User": "bob", **csrf_header(client)}
        reply = client.post(UPDATE, json=apply_body(client, signed), headers=signed)
    assert reply.status_code == 200
    text = json.dumps(reply.get_json())
    assert shown in text and "base URL" not in text
    assert len(posts(advisor)) == 1


@pytest.mark.parametrize("path", NOT_BUNDLES)
def test_only_bundle_files_load_without_a_user(
    advisor: FakeApi, web_config: Path, path: str
) -> None:
    client = client_for(advisor, Access(web_config=load_web_config(web_config)))
    for method in (client.get, client.head):
        answer = method(path)
        assert answer.status_code == 401, path
        assert answer.headers["WWW-Authenticate"].startswith("Basic realm=")
        assert answer.content_type == "application/json"
    assert "toposcope" not in client.get(path).get_data(as_text=True).lower()
    for bundle in BUNDLE_FILES:
        loaded = client.get(bundle)
        assert loaded.status_code == 200, bundle
        assert loaded.content_type.startswith("text/javascript")
    assert client.post(BUNDLE_FILES[0]).status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/_dash-component-suites/nope/x.js",
        "/_dash-component-suites/dash/nope.js",
        "/_dash-component-suites/../dash/",
        f"/_dash-component-suites/dash/{'x' * 2000}.js",
    ],
)
def test_junk_bundle_paths_answer_json_and_one_log_line(
    advisor: FakeApi, web_config: Path, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = client_for(advisor, Access(web_config=load_web_config(web_config)))
    assert client.get("/", headers=ALICE).status_code == 200
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    answer = client.get(path, headers=ALICE)
    assert 400 <= answer.status_code < 500
    assert answer.content_type == "application/json"
    assert set(answer.get_json()) == {"error", "field"}
    logged = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(logged) == 1, caplog.text
    assert all(r.exc_info is None for r in caplog.records)
    assert "Traceback" not in caplog.text
    assert len(caplog.text) < 500


def test_a_csrf_token_passes_only_for_the_user_it_was_issued_to(
    advisor: FakeApi, web_config: Path
) -> None:
    client = client_for(advisor, Access(web_config=load_web_config(web_config)))
    anonymous = client.get("/")
    assert anonymous.status_code == 401
    left = client.get_cookie(csrf.COOKIE)  # whatever the 401 left in the browser
    unsigned = left.value if left is not None else ""
    body = apply_body(client, ALICE)
    client.set_cookie(csrf.COOKIE, unsigned)
    answer = client.post(UPDATE, json=body, headers={**ALICE, csrf.HEADER: unsigned})
    assert answer.status_code == 403
    assert "CSRF" in answer.get_json()["error"]
    assert csrf.COOKIE not in anonymous.headers.get("Set-Cookie", "")  # none is handed out
    client.get("/", headers=ALICE)
    alices = csrf_header(client)
    answer = client.post(UPDATE, json=body, headers={**BOB, **alices})
    assert answer.status_code == 403
    assert posts(advisor) == []
    client.get("/", headers=BOB)
    bobs = csrf_header(client)
    assert bobs != alices
    answer = client.post(UPDATE, json=body, headers={**BOB, **bobs})
    assert answer.status_code == 200
    [(_, _, sent)] = posts(advisor)
    assert json.loads(sent) == {"user": "bob"}
