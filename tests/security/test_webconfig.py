"""Web configuration files (exporter-toolkit format): strict checking with file:line: key
errors, and basic-auth checks that cost one bcrypt check whether or not the user exists and
none for credentials already proven.
"""

from __future__ import annotations

import base64
from pathlib import Path

import bcrypt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toposcope.errors import ConfigError
from toposcope.serving.webconfig import WebConfig, load_web_config, parse_web_config

#: a fixed salt, so that the hashes (and the test ids built from them) are the same in every
#: run and every test worker
SALT = b"$2b$04$toposcopetestsalt....."
ALICE_HASH = bcrypt.hashpw(b"alice-pw", SALT).decode()
#: the same hash as htpasswd writes it ($2y$)
BOB_HASH = "$2y$" + bcrypt.hashpw(b"bob-pw", SALT).decode()[4:]
GOOD = f"""\
# users and headers
basic_auth_users:
  alice: '{ALICE_HASH}'
  bob: {BOB_HASH}
http_server_config:
  http2: true
  headers:
    X-Frame-Options: deny
    Content-Security-Policy: ""
tls_server_config: {{}}
"""


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(scope="module")
def config() -> WebConfig:
    return parse_web_config(GOOD, "web.yml")


def test_a_good_file(tmp_path: Path, config: WebConfig) -> None:
    assert config.users == ("alice", "bob") and config.basic_auth
    assert config.headers == {"X-Frame-Options": "deny"}
    assert ALICE_HASH not in repr(config)
    path = tmp_path / "web.yml"
    path.write_text(GOOD)
    assert load_web_config(path).users == ("alice", "bob")
    empty = tmp_path / "empty.yml"
    empty.write_text("# nothing configured\n")
    assert not load_web_config(empty).basic_auth
    assert load_web_config(empty).check_basic_auth(basic("alice", "alice-pw")) is None


def test_passwords(config: WebConfig) -> None:
    assert config.check_basic_auth(basic("alice", "alice-pw")) == "alice"
    assert config.check_basic_auth(basic("alice", "alice-pw")) == "alice"  # from the cache
    assert config.check_basic_auth(basic("bob", "bob-pw")) == "bob"
    assert config.check_basic_auth("basic  " + basic("bob", "bob-pw")[6:]) == "bob"
    for header in (
        None,
        "",
        basic("alice", "bob-pw"),
        basic("alice", "alice-pw "),
        basic("carol", "alice-pw"),
        basic("alice", "alice-pw" + "x" * 80),
        "Bearer " + basic("alice", "alice-pw")[6:],
        "Basic not*base64",
        "Basic " + base64.b64encode(b"alice").decode(),  # no colon
        "Basic " + base64.b64encode(b"\xff:alice-pw").decode(),  # not UTF-8
    ):
        assert config.check_basic_auth(header) is None, header


def test_unknown_users_cost_a_check_and_known_credentials_none(
    config: WebConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = parse_web_config(GOOD, "web.yml")
    checks: list[bytes] = []
    real = bcrypt.checkpw

    def counted(password: bytes, hashed: bytes) -> bool:
        checks.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counted)
    assert fresh.check_basic_auth(basic("nobody", "x")) is None
    assert fresh.check_basic_auth(basic("alice", "wrong")) is None
    assert len(checks) == 2
    # the dummy hash an unknown user is checked against costs what a real user's does
    assert checks[0][:7] == ALICE_HASH[:7].encode() and checks[0] != ALICE_HASH.encode()
    assert fresh.check_basic_auth(basic("alice", "alice-pw")) == "alice"
    assert fresh.check_basic_auth(basic("alice", "alice-pw")) == "alice"
    assert len(checks) == 3


USERS = {"alice": "alice-pw", "bob": "bob-pw"}


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(sorted(USERS)) | st.text(max_size=30),
    st.sampled_from(sorted(USERS.values())) | st.text(max_size=30),
)
def test_only_the_right_password_signs_in(config: WebConfig, user: str, password: str) -> None:
    proven = config.check_basic_auth(basic(user, password))
    right = ":" not in user and USERS.get(user) == password
    assert proven == (user if right else None)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("basic_auth_users: {}\nrate_limit:\n  burst: 2\n", "web.yml:2: rate_limit: unknown key"),
        ("- alice\n", "web.yml:1: (top level): must be a mapping"),
        ("basic_auth_users:\n  - alice\n", "web.yml:2: basic_auth_users: must be a mapping"),
        ("basic_auth_users:\n  alice: secret\n", "web.yml:2: basic_auth_users.alice: not a bcrypt"),
        (
            "basic_auth_users:\n  alice: $1$abc$0123456789012345678901\n",
            "basic_auth_users.alice: not a bcrypt",
        ),
        (f"basic_auth_users:\n  12: '{ALICE_HASH}'\n", "web.yml:2: basic_auth_users: keys must"),
        (
            f"basic_auth_users:\n  'a:b': '{ALICE_HASH}'\n",
            "basic_auth_users.a:b: a user name must be 1-128",
        ),
        (
            f"basic_auth_users:\n  alice: '{ALICE_HASH}'\n  alice: '{ALICE_HASH}'\n",
            "web.yml:3: basic_auth_users.alice: duplicate key",
        ),
        ("basic_auth_users:\n  alice: 12\n", "basic_auth_users.alice: must be a string"),
        ("tls_server_config:\n  cert_file: a.crt\n", "tls_server_config.key_file: missing"),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Maybe\n",
            "web.yml:4: tls_server_config.client_auth_type: must be one of NoClientCert",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
            "client_ca_file is set but client_auth_type is NoClientCert",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS14\n",
            "tls_server_config.min_version: must be one of TLS10, TLS11, TLS12, TLS13",
        ),
        (
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: []\n",
            "tls_server_config.cipher_suites: unknown key",
        ),
        ("http_server_config:\n  http2: maybe\n", "http_server_config.http2: must be true or"),
        ("http_server_config:\n  tls: true\n", "http_server_config.tls: unknown key"),
        (
            "http_server_config:\n  headers:\n    Server: x\n",
            "web.yml:3: http_server_config.headers.Server: unknown key",
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "X-Frame-Options: must be one of deny, sameorigin",
        ),
        ("basic_auth_users: [\n", "web.yml:2: not valid YAML"),
    ],
)
def test_bad_files(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_web_config(text, "web.yml")
    assert needle in str(refused.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"reading web config file .*missing"):
        load_web_config(tmp_path / "missing.yml")
    binary = tmp_path / "binary.yml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_web_config(binary)
