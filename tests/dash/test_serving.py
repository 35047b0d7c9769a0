"""``toposcope dash`` as operators run it: over TLS from ``--web.config.file``, whose
basic-auth users are followed as the file changes, with no restart.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

from tests.procs import free_port, poll, running
from toposcope import devcerts
from toposcope.errors import ConfigError

TIMEOUT = 10.0


@dataclass(frozen=True)
class Served:
    """The running app: its port, its log, its web config file and the CA to trust."""

    port: int
    log: Path
    web_config: Path
    ca: Path


def users_config(certs: Path, user: str, password: str) -> str:
    """A web config serving TLS with ``user`` as the one basic-auth user."""
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    return (
        "tls_server_config:\n"
        f"  cert_file: {certs / 'server.crt'}\n"
        f"  key_file: {certs / 'server.key'}\n"
        f"basic_auth_users:\n  {user}: '{digest}'\n"
    )


def status(served: Served, user: str, password: str) -> int:
    """The HTTP status of the app's index page for ``user:password``."""
    context = ssl.create_default_context(cafile=served.ca)
    connection = http.client.HTTPSConnection(
        "127.0.0.1", served.port, timeout=TIMEOUT, context=context
    )
    login = base64.b64encode(f"{user}:{password}".encode()).decode()
    try:
        connection.request("GET", "/", headers={"Authorization": f"Basic {login}"})
        answer = connection.getresponse()
        answer.read()
        return answer.status
    finally:
        connection.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("dash-serving")
    try:
        certs = devcerts.make_certificates(folder / "pki", ["server"])
    except ConfigError as exc:
        pytest.skip(str(exc))
    web_config = folder / "web.yml"
    web_config.write_text(users_config(certs, "alice", "old-password"))
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
        result = Served(port, log, web_config, certs / "ca.crt")
        poll(lambda: status(result, "alice", "old-password") == 200, what="the dash app over TLS")
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
