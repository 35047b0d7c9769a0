"""``toposcope dash`` as operators run it: over TLS from ``--web.config.file``, whose
basic-auth users are followed as the file changes, with no restart; and over plain HTTP with
basic-auth users only, which an emptied file (a tool rewriting it) never turns off.
"""

from __future__ import annotations

import base64
import http.client
import os
import ssl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

from tests.procs import free_port, poll, running
from toposcope.errors import ConfigError
from toposcope.serving import devcerts

TIMEOUT = 10.0


@dataclass(frozen=True)
class Served:
    """The running app: its port, its log, its web config file and the CA to trust."""

    port: int
    log: Path
    web_config: Path
    ca: Path
    tls: bool = True


def users_config(certs: Path, user: str, password: str) -> str:
    """A web config serving TLS with ``user`` as the one basic-auth user."""
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    return (
        "tls_server_config:\n"
        f"  cert_file: {certs / 'server.crt'}\n"
        f"  key_file: {certs / 'server.key'}\n"
        f"basic_auth_users:\n  {user}: '{digest}'\n"
    )


def status(served: Served, user: str | None, password: str = "", path: str = "/") -> int:
    """The HTTP status of the app's ``path`` for ``user:password`` (no credentials without
    a user), over TLS when the app serves it.
    """
    connection: http.client.HTTPConnection
    if served.tls:
        context = ssl.create_default_context(cafile=served.ca)
        connection = http.client.HTTPSConnection(
            "127.0.0.1", served.port, timeout=TIMEOUT, context=context
        )
    else:
        connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=TIMEOUT)
    headers = {}
    if user is not None:
        login = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {login}"
    try:
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status
    finally:
        connection.close()


@contextmanager
def dash(folder: Path, web_config: Path, ca: Path, tls: bool) -> Iterator[Served]:
    """``toposcope dash`` on a free loopback port with ``web_config``, once it answers."""
    port = free_port()
    log = folder / "dash.log"
    argv = [
        sys.executable, "-m", "toposcope.cli", "dash",
        "--listen", f"127.0.0.1:{port}",
        "--web.config.file", str(web_config),
        "--prometheus", f"http://127.0.0.1:{free_port()}",
        "--advisor", f"http://127.0.0.1:{free_port()}",
    ]  # fmt: skip
    with running(argv, log):
        result = Served(port, log, web_config, ca, tls)
        poll(lambda: status(result, None) == 401, what="the dash app")
        yield result


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("dash-serving")
    try:
        certs = devcerts.make_certificates(folder / "pki", ["server"])
    except ConfigError as exc:
        pytest.skip(str(exc))
    web_config = folder / "web.yml"
    web_config.write_text(users_config(certs, "alice", "old-password"))
    with dash(folder, web_config, certs / "ca.crt", tls=True) as result:
        poll(lambda: status(result, "alice", "old-password") == 200, what="alice signed in")
        yield result


def test_the_start_up_line_names_https_when_it_serves_tls(served: Served) -> None:
    text = served.log.read_text()
    assert f"dash app on https://127.0.0.1:{served.port}/" in text
    assert "dash app on http://" not in text


def test_changed_users_take_effect_without_a_restart(served: Served) -> None:
    assert status(served, "bob", "new-password") == 401
    certs = served.ca.parent
    served.web_config.write_text(users_config(certs, "bob", "new-password"))
    poll(
        lambda: status(served, "bob", "new-password") == 200,
        deadline_s=TIMEOUT,
        what="the new user accepted",
    )
    assert status(served, "alice", "old-password") == 401
    assert "reloaded" in served.log.read_text()


def users_only(user: str, password: str) -> str:
    """A web config with ``user`` as its one basic-auth user and no TLS."""
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    return f"basic_auth_users:\n  {user}: '{digest}'\n"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("dash-plain")
    web_config = folder / "web.yml"
    web_config.write_text(users_only("alice", "first-password"))
    with dash(folder, web_config, folder / "no-ca", tls=False) as result:
        yield result


EMPTIED = {
    "truncated": "",
    "comment only": "# being rewritten\n",
    "users null": "basic_auth_users:\n",
    "empty mapping": "{}\n",
}


@pytest.mark.parametrize("text", list(EMPTIED.values()), ids=list(EMPTIED))
def test_an_emptied_file_never_opens_the_pages(plain: Served, text: str) -> None:
    password = f"pw-{len(text)}"
    plain.web_config.write_text(users_only("alice", password))
    poll(lambda: status(plain, "alice", password) == 200, what="the new password")
    refusals = plain.log.read_text().count("not reloaded")
    if text:
        plain.web_config.with_suffix(".new").write_text(text)
        os.replace(plain.web_config.with_suffix(".new"), plain.web_config)
    else:
        plain.web_config.write_text("")  # truncated in place, as `: > web.yml` does
    # a request makes the app look at the file again (at most once a second)
    poll(
        lambda: (
            status(plain, None) == 401 and plain.log.read_text().count("not reloaded") > refusals
        ),
        deadline_s=TIMEOUT,
        what="the emptied file refused",
    )
    for path in ("/", "/_dash-layout"):
        assert status(plain, None, path=path) == 401, path
        assert status(plain, "alice", password, path=path) == 200, path
