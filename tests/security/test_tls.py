"""TLS, basic auth and headers from ``--web.config.file`` on real servers on 127.0.0.1, with
certificates made for each test: a round trip, client certificates required and refused,
``min_version`` enforced, basic auth on the exporter, added headers, a new certificate
served after the files change (on SIGHUP, and on its own), and basic auth kept on when a
reload would drop every user (a file being rewritten).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import socket
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import bcrypt
import pytest

from tests.procs import poll
from toposcope.config import ExporterConfig, HostPaths
from toposcope.errors import ConfigError
from toposcope.exporters.app import ExporterServer, build_runner
from toposcope.exporters.collectors import default_table
from toposcope.serving import devcerts
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.livewebconfig import LiveWebConfig
from toposcope.serving.webconfigfailures import RELOAD_FAILURES
from toposcope.serving.webflags import add_web_arguments, apply_web_arguments

TIMEOUT = 10.0
PASSWORD = "s3cret-pw"


def make_certificates(folder: Path, names: list[str]) -> Path:
    """A CA (``ca.crt``) and, for each name, ``NAME.crt``/``NAME.key`` it signed for
    127.0.0.1 (the core's helper; skipped when it can make none on this machine).
    """
    try:
        return devcerts.make_certificates(folder, names)
    except ConfigError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    return make_certificates(tmp_path / "pki", ["server", "client", "other"])


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def tls_config(certs: Path, extra: str = "") -> str:
    return (
        "tls_server_config:\n"
        f"  cert_file: {certs / 'server.crt'}\n"
        f"  key_file: {certs / 'server.key'}\n" + extra
    )


def client_context(certs: Path, client: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certs / "ca.crt")
    if client is not None:
        context.load_cert_chain(certs / f"{client}.crt", certs / f"{client}.key")
    return context


def get(
    port: int, path: str, context: ssl.SSLContext | None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    connection: http.client.HTTPConnection
    if context is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    else:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", port, timeout=TIMEOUT, context=context
        )
    try:
        connection.request("GET", path, headers=headers or {})
        answer = connection.getresponse()
        got = {name.lower(): value for name, value in answer.getheaders()}
        return answer.status, got, answer.read()
    finally:
        connection.close()


def served_certificate(port: int, certs: Path) -> bytes:
    context = client_context(certs)
    with context.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT),
        server_hostname="127.0.0.1",
    ) as sock:
        served = sock.getpeercert(binary_form=True)
    assert served is not None
    return served


def der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


@contextmanager
def serving(server: HttpServer) -> Iterator[int]:
    server.start()
    try:
        yield server.port
    finally:
        server.shutdown()


def hello(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"hello {environ.get('REMOTE_USER', '-')}".encode()]


def tls_server(config: Path, check_seconds: float = 1.0) -> HttpServer:
    server = HttpServer(hello, "127.0.0.1:0")
    server.use_web_config(LiveWebConfig(config, check_seconds))
    return server


@pytest.fixture
def exporter(hwloc_root: Callable[[str], Path]) -> Callable[[], ExporterServer]:
    def build() -> ExporterServer:
        config = ExporterConfig(paths=HostPaths.under(hwloc_root("16amd64-8n2c")), nvml="off")
        runner = build_runner(config, [e for e in default_table() if e.name == "topology"])
        return ExporterServer(runner, "host-a", "127.0.0.1:0")

    return build


# -- TLS ---------------------------------------------------------------------------------------


def test_the_exporter_serves_metrics_over_tls(
    certs: Path, tmp_path: Path, exporter: Callable[[], ExporterServer]
) -> None:
    server = exporter()
    server.use_web_config(LiveWebConfig(write_config(tmp_path / "web.yml", tls_config(certs))))
    with serving(server) as port:
        status, _, body = get(port, "/metrics", client_context(certs))
        assert status == 200 and b"toposcope_" in body
        # a plain-HTTP scrape of the TLS port fails cleanly: no metrics, no hang
        try:
            status, _, body = get(port, "/metrics", None)
        except (OSError, http.client.HTTPException):
            pass
        else:
            assert status == 400 and b"toposcope_" not in body
        # and the server still answers TLS clients afterwards
        assert get(port, "/metrics", client_context(certs))[0] == 200


def test_relative_paths_are_read_from_the_files_folder(certs: Path) -> None:
    text = "tls_server_config:\n  cert_file: pki/server.crt\n  key_file: pki/server.key\n"
    config = write_config(certs.parent / "web.yml", text)
    with serving(tls_server(config)) as port:
        assert get(port, "/", client_context(certs))[0] == 200


def test_a_required_client_certificate_is_checked(certs: Path, tmp_path: Path) -> None:
    extra = (
        f"  client_ca_file: {certs / 'ca.crt'}\n  client_auth_type: RequireAndVerifyClientCert\n"
    )
    with serving(tls_server(write_config(tmp_path / "web.yml", tls_config(certs, extra)))) as port:
        assert get(port, "/", client_context(certs, "client"))[0] == 200
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(port, "/", client_context(certs))


def test_a_client_certificate_from_another_ca_is_refused(certs: Path, tmp_path: Path) -> None:
    stranger = make_certificates(tmp_path / "stranger", ["client"])
    extra = f"  client_ca_file: {certs / 'ca.crt'}\n  client_auth_type: VerifyClientCertIfGiven\n"
    with serving(tls_server(write_config(tmp_path / "web.yml", tls_config(certs, extra)))) as port:
        assert get(port, "/", client_context(certs))[0] == 200  # none given: allowed
        context = client_context(certs)
        context.load_cert_chain(stranger / "client.crt", stranger / "client.key")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(port, "/", context)


def test_plain_http_on_a_tls_port_answers_400_and_closes(
    certs: Path, tmp_path: Path, exporter: Callable[[], ExporterServer]
) -> None:
    server = exporter()
    server.use_web_config(LiveWebConfig(write_config(tmp_path / "web.yml", tls_config(certs))))
    with serving(server) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as plain:
            plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while chunk := plain.recv(65536):  # until the server closes
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0] == "HTTP/1.1 400 Bad Request"
        assert "Connection: close" in lines and "Content-Type: application/json" in lines
        assert json.loads(body)["error"].startswith("the client sent an HTTP request to an HTTPS")
        assert b"toposcope_" not in answer
        # the listener goes on speaking TLS
        assert get(port, "/metrics", client_context(certs))[0] == 200


def test_min_version_is_enforced(certs: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "web.yml", tls_config(certs, "  min_version: TLS13\n"))
    with serving(tls_server(config)) as port:
        old = client_context(certs)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(port, "/", old)
        assert get(port, "/", client_context(certs))[0] == 200


def test_a_certificate_that_does_not_load_is_a_config_error(certs: Path, tmp_path: Path) -> None:
    (certs / "server.key").write_text("not a key\n")
    with pytest.raises(ConfigError, match="cannot load cert_file"):
        LiveWebConfig(write_config(tmp_path / "web.yml", tls_config(certs)))


# -- basic auth and headers -------------------------------------------------------------------


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_basic_auth_on_the_exporter(
    certs: Path, tmp_path: Path, exporter: Callable[[], ExporterServer]
) -> None:
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    text = tls_config(certs) + f"basic_auth_users:\n  prometheus: '{digest}'\n"
    server = exporter()
    server.use_web_config(LiveWebConfig(write_config(tmp_path / "web.yml", text)))
    with serving(server) as port:
        context = client_context(certs)
        for headers in ({}, basic("prometheus", "wrong"), basic("nobody", PASSWORD)):
            status, got, body = get(port, "/metrics", context, headers)
            assert status == 401 and b"toposcope_" not in body
            assert got["www-authenticate"].startswith("Basic ")
        status, _, body = get(port, "/metrics", context, basic("prometheus", PASSWORD))
        assert status == 200 and b"toposcope_numa_node_info" in body


def test_configured_headers_are_added_to_every_answer(tmp_path: Path) -> None:
    text = "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    server = HttpServer(hello, "127.0.0.1:0", methods=("GET",))
    server.use_web_config(LiveWebConfig(write_config(tmp_path / "web.yml", text)))
    with serving(server) as port:
        status, got, _ = get(port, "/", None)
        assert status == 200 and got["x-frame-options"] == "deny"
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
        connection.request("DELETE", "/")
        refused = connection.getresponse()
        assert refused.status == 405 and refused.getheader("X-Frame-Options") == "deny"
        connection.close()


# -- reloading ---------------------------------------------------------------------------------


def replace_server_certificate(certs: Path, name: str) -> None:
    for suffix in ("crt", "key"):
        (certs / f"server.{suffix}.new").write_bytes((certs / f"{name}.{suffix}").read_bytes())
        os.replace(certs / f"server.{suffix}.new", certs / f"server.{suffix}")


def test_sighup_serves_the_new_certificate(certs: Path, tmp_path: Path) -> None:
    live = LiveWebConfig(write_config(tmp_path / "web.yml", tls_config(certs)), 3600)
    server = HttpServer(hello, "127.0.0.1:0")
    server.use_web_config(live)
    first = der(certs / "server.crt")
    previous = signal.getsignal(signal.SIGHUP)
    try:
        live.reload_on_sighup()
        with serving(server) as port:
            assert served_certificate(port, certs) == first
            replace_server_certificate(certs, "other")
            assert served_certificate(port, certs) == first  # no look until told
            os.kill(os.getpid(), signal.SIGHUP)
            poll(lambda: live.reloads == 1, deadline_s=TIMEOUT, interval_s=0.05)
            assert served_certificate(port, certs) == der(certs / "other.crt")
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_changed_file_is_read_again(certs: Path, tmp_path: Path) -> None:
    with serving(tls_server(write_config(tmp_path / "web.yml", tls_config(certs)), 0)) as port:
        replace_server_certificate(certs, "other")
        poll(
            lambda: served_certificate(port, certs) == der(certs / "other.crt"),
            deadline_s=TIMEOUT,
            interval_s=0.05,
        )
        # a broken file keeps the previous configuration in force
        (tmp_path / "web.yml").write_text("tls_server_config: [\n")
        assert get(port, "/", client_context(certs))[0] == 200


def users_file(path: Path, user: str, password: str) -> Path:
    """Write an auth-only web config (no TLS) with ``user`` as its one basic-auth user."""
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    return write_config(path, f"basic_auth_users:\n  {user}: '{digest}'\n")


def rewrite(path: Path, text: str) -> None:
    """Put ``text`` in ``path``: truncated in place when empty (``: > web.yml``), else
    replaced in one step, so that the server sees exactly one change.
    """
    if not text:
        path.write_text("")
        return
    path.with_suffix(".new").write_text(text)
    os.replace(path.with_suffix(".new"), path)


def reload_failures_served(port: int, headers: dict[str, str]) -> float:
    """``toposcope_web_config_reload_failures_total`` as the exporter serves it."""
    status, _, body = get(port, "/metrics?collect[]=topology", None, headers)
    assert status == 200
    line = next(
        line
        for line in body.decode().splitlines()
        if line.startswith("toposcope_web_config_reload_failures_total ")
    )
    return float(line.split()[1])


EMPTIED = {
    "truncated": "",
    "comment only": "# being rewritten\n",
    "users null": "basic_auth_users:\n",
    "empty mapping": "{}\n",
}


@pytest.mark.parametrize("text", list(EMPTIED.values()), ids=list(EMPTIED))
def test_a_reload_that_drops_every_user_keeps_basic_auth_on(
    tmp_path: Path, exporter: Callable[[], ExporterServer], text: str
) -> None:
    config = users_file(tmp_path / "web.yml", "prometheus", PASSWORD)
    server = exporter()
    server.use_web_config(LiveWebConfig(config, 0))
    signed_in = basic("prometheus", PASSWORD)
    with serving(server) as port:
        assert get(port, "/metrics", None)[0] == 401
        before = RELOAD_FAILURES.value
        rewrite(config, text)
        poll(
            lambda: get(port, "/", None)[0] == 401 and RELOAD_FAILURES.value > before,
            deadline_s=TIMEOUT,
            interval_s=0.05,
            what="the emptied file refused",
        )
        for path in ("/metrics", "/"):
            status, got, body = get(port, path, None)
            assert status == 401 and b"toposcope_" not in body
            assert got["www-authenticate"].startswith("Basic ")
        assert RELOAD_FAILURES.value == before + 1
        assert reload_failures_served(port, signed_in) == RELOAD_FAILURES.value
        # the tool then writes the whole file: its users are served at once
        users_file(config, "bob", "bob-pw")
        poll(
            lambda: get(port, "/metrics", None, basic("bob", "bob-pw"))[0] == 200,
            deadline_s=TIMEOUT,
            interval_s=0.05,
            what="the rewritten file's user",
        )
        assert get(port, "/metrics", None, signed_in)[0] == 401
        assert get(port, "/metrics", None)[0] == 401


def test_basic_auth_is_turned_off_by_a_restart_only(
    tmp_path: Path, exporter: Callable[[], ExporterServer]
) -> None:
    config = users_file(tmp_path / "web.yml", "prometheus", PASSWORD)
    live = LiveWebConfig(config, 3600)
    server = exporter()
    server.use_web_config(live)
    with serving(server) as port:
        write_config(config, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
        before = RELOAD_FAILURES.value
        assert not live.reload()  # what SIGHUP does
        assert RELOAD_FAILURES.value == before + 1
        assert get(port, "/metrics", None)[0] == 401
    restarted = exporter()
    restarted.use_web_config(LiveWebConfig(config, 3600))
    with serving(restarted) as port:
        status, got, body = get(port, "/metrics", None)
        assert status == 200 and b"toposcope_numa_node_info" in body
        assert got["x-frame-options"] == "deny"


def test_a_reload_may_turn_basic_auth_on(tmp_path: Path) -> None:
    config = write_config(tmp_path / "web.yml", "")
    live = LiveWebConfig(config, 3600)
    server = HttpServer(hello, "127.0.0.1:0")
    server.use_web_config(live)
    with serving(server) as port:
        assert get(port, "/", None)[0] == 200
        users_file(config, "alice", PASSWORD)
        assert live.reload()
        assert get(port, "/", None)[0] == 401
        assert get(port, "/", None, basic("alice", PASSWORD))[2] == b"hello alice"


# -- flags -----------------------------------------------------------------------------------


def test_listen_addresses_repeat_and_the_web_config_applies(certs: Path, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_web_arguments(parser, "127.0.0.1:9", "where")
    config = write_config(tmp_path / "web.yml", tls_config(certs))
    listen = ["--listen", "127.0.0.1:0", "--web.listen-address", "127.0.0.1:0"]
    args = parser.parse_args([*listen, "--web.config.file", str(config)])
    assert args.listen == "127.0.0.1:0" and args.listen_also == ["127.0.0.1:0"]
    server = HttpServer(hello, args.listen)
    web = apply_web_arguments(server, args)
    assert web is not None and web.tls
    with serving(server):
        ports = [int(s.bind_addr[1]) for s in server.servers]
        assert len(set(ports)) == 2
        for port in ports:
            assert get(port, "/", client_context(certs))[0] == 200
    assert parser.parse_args([]).listen == "127.0.0.1:9"


def test_a_daemon_with_bearer_tokens_refuses_basic_auth_users(tmp_path: Path) -> None:
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    config = write_config(tmp_path / "web.yml", f"basic_auth_users:\n  a: '{digest}'\n")
    parser = argparse.ArgumentParser()
    add_web_arguments(parser, "127.0.0.1:0", "where")
    server = HttpServer(hello, "127.0.0.1:0")
    try:
        with pytest.raises(ConfigError, match="basic_auth_users: tokens only"):
            apply_web_arguments(
                server, parser.parse_args(["--web.config.file", str(config)]), users="tokens only"
            )
    finally:
        server.shutdown()
