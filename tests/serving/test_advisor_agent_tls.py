"""The advisor's resource-manager client reaches a real agent over mutual TLS, and refuses
what it must: a client certificate from another CA, a server certificate for another name,
plain HTTP to a TLS endpoint, and a bearer token over plain HTTP to another host.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from toposcope.advisor.cliargs import add_agent_arguments
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.rmclients import AgentResourceManager, ClientTls, HttpResourceManager
from toposcope.advisor.rmclients.clienttls import client_tls_from_args
from toposcope.advisor.rmclients.endpoints import parse_url_map
from toposcope.agent import cli as agent_cli
from toposcope.errors import ConfigError
from toposcope.rm import ResourceManagerError
from toposcope.serving import devcerts
from toposcope.serving.webflags import apply_web_arguments

TOKEN = "agent-t0ken"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    try:
        devcerts.make_certificates(folder / "ours", ["agent", "advisor"])
        devcerts.make_certificates(folder / "stranger", ["advisor"])
    except ConfigError as exc:
        pytest.skip(str(exc))
    return folder


@pytest.fixture(scope="module")
def agent_port(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real agent whose web configuration requires a client certificate from our CA."""
    folder = tmp_path_factory.mktemp("agent")
    ours = pki / "ours"
    web = folder / "web.yml"
    web.write_text(
        "tls_server_config:\n"
        f"  cert_file: {ours / 'agent.crt'}\n"
        f"  key_file: {ours / 'agent.key'}\n"
        f"  client_ca_file: {ours / 'ca.crt'}\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
    )
    token = folder / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    parser = argparse.ArgumentParser()
    agent_cli.add_arguments(parser)
    args = parser.parse_args(
        ["--listen", "127.0.0.1:0", "--hostname", "n1", "--token-file", str(token),
         "--web.config.file", str(web)]
    )  # fmt: skip
    server, _ = agent_cli.build_server(args)
    apply_web_arguments(server, args, users=agent_cli.BEARER_ONLY)
    server.start()
    try:
        yield server.port
    finally:
        server.shutdown()


def tls(pki: Path, signer: str = "ours", **extra: object) -> ClientTls:
    return ClientTls(
        ca_file=pki / "ours" / "ca.crt",
        cert_file=pki / signer / "advisor.crt",
        key_file=pki / signer / "advisor.key",
        **extra,  # type: ignore[arg-type]
    )


def test_the_advisor_reaches_the_agent_over_mutual_tls(pki: Path, agent_port: int) -> None:
    url = f"https://127.0.0.1:{agent_port}/api/v1"
    [node] = HttpResourceManager(url, TOKEN, timeout=10, tls=tls(pki)).nodes()
    assert node.name == "n1"
    agents = AgentResourceManager(
        parse_url_map(f"n1={url}", template=None, token=TOKEN), ["n1"], timeout=10, tls=tls(pki)
    )
    assert [view.name for view in agents.nodes()] == ["n1"]
    by_name = ClientTls(**{**tls(pki).__dict__, "server_name": "localhost"})
    assert HttpResourceManager(url, TOKEN, timeout=10, tls=by_name).nodes()[0].name == "n1"


@pytest.mark.parametrize(
    ("signer", "server_name"),
    [("stranger", None), ("ours", "agent.example.org")],
    ids=["client-cert-from-another-ca", "certificate-for-another-name"],
)
def test_a_failed_handshake_is_a_clear_error(
    pki: Path, agent_port: int, signer: str, server_name: str | None
) -> None:
    client = HttpResourceManager(
        f"https://127.0.0.1:{agent_port}",
        TOKEN,
        timeout=10,
        tls=tls(pki, signer, server_name=server_name),
    )
    with pytest.raises(AdvisorConnectionError, match="TLS failed"):
        client.nodes()


def test_no_client_certificate_is_refused(pki: Path, agent_port: int) -> None:
    only_ca = ClientTls(ca_file=pki / "ours" / "ca.crt")
    client = HttpResourceManager(f"https://127.0.0.1:{agent_port}", TOKEN, timeout=10, tls=only_ca)
    with pytest.raises(AdvisorConnectionError, match=f"127.0.0.1:{agent_port}"):
        client.nodes()


def test_plain_http_to_the_tls_agent_fails_cleanly(agent_port: int) -> None:
    client = HttpResourceManager(f"http://127.0.0.1:{agent_port}", TOKEN, timeout=10)
    with pytest.raises((AdvisorConnectionError, ResourceManagerError)) as failed:
        client.nodes()
    assert f"127.0.0.1:{agent_port}" in str(failed.value)


def test_a_token_goes_over_plain_http_only_to_loopback_or_when_allowed() -> None:
    with pytest.raises(ConfigError, match="--rm-allow-plain-http-token"):
        HttpResourceManager("http://10.0.0.7:9848", TOKEN)
    HttpResourceManager("http://10.0.0.7:9848", None)  # no token, nothing to leak
    HttpResourceManager("http://[::1]:9848", TOKEN)
    HttpResourceManager("http://10.0.0.7:9848", TOKEN, tls=ClientTls(allow_plain_token=True))
    agents = AgentResourceManager(
        parse_url_map("n2=http://10.0.0.7:9848/api/v1", template=None, token=TOKEN), ["n2"]
    )
    with pytest.raises(ResourceManagerError, match="plain http") as refused:
        agents.client("n2")
    assert refused.value.status == 403


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_options_build_the_settings_and_name_a_bad_file(pki: Path, tmp_path: Path) -> None:
    ours = pki / "ours"
    built = client_tls_from_args(
        parse(
            "--rm-tls-ca-file", str(ours / "ca.crt"),
            "--rm-tls-cert-file", str(ours / "advisor.crt"),
            "--rm-tls-key-file", str(ours / "advisor.key"),
            "--rm-tls-server-name", "localhost", "--rm-allow-plain-http-token",
        )
    )  # fmt: skip
    assert built.server_name == "localhost" and built.allow_plain_token
    assert built.context.check_hostname
    assert not client_tls_from_args(parse()).allow_plain_token
    with pytest.raises(ConfigError, match="go together"):
        client_tls_from_args(parse("--rm-tls-cert-file", str(ours / "advisor.crt")))
    missing = tmp_path / "missing.crt"
    with pytest.raises(ConfigError, match=f"--rm-tls-ca-file {missing}"):
        client_tls_from_args(parse("--rm-tls-ca-file", str(missing)))
    with pytest.raises(ConfigError, match="--rm-tls-cert-file"):
        client_tls_from_args(
            parse(
                "--rm-tls-cert-file", str(ours / "advisor.key"),
                "--rm-tls-key-file", str(ours / "advisor.crt"),
            )
        )  # fmt: skip
