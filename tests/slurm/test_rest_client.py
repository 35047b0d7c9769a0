"""The slurmrestd client and its JWT, against a stand-in slurmrestd on loopback.

The stand-in answers what real slurmrestd 22.05 answers in the cases that matter (an errors
array under HTTP 200 or 500, 401 without credentials) and a few it must survive (a redirect,
a body that is no JSON). The same behaviour against the real daemon is in test_live_rest.py.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toposcope.errors import ConfigError
from toposcope.slurm.errors import SlurmAnswerError, SlurmAuthError, SlurmUnavailableError
from toposcope.slurm.jwt import load_jwt, parse_jwt
from toposcope.slurm.rest import SlurmRestClient, check_url


def make_jwt(claims: dict[str, Any]) -> str:
    """An unsigned-looking HS256 JWT carrying ``claims`` (the server side checks signatures)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


FRESH = make_jwt({"sun": "alice", "exp": int(time.time()) + 3600, "iat": int(time.time())})


class StandIn:
    """A loopback HTTP server answering each path with a prepared (status, body, headers)."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes, dict[str, str]]] = {}
        self.seen: list[dict[str, str]] = []
        answers, seen = self.answers, self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                status, body, headers = answers.get(self.path, (404, b"no such path", {}))
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def answer(self, path: str, status: int, body: object, **headers: str) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers[f"/slurm/v0.0.38/{path}"] = (status, raw, headers)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def standin() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.close()


def client(url: str, token: str = FRESH, user: str | None = None) -> SlurmRestClient:
    return SlurmRestClient(url, parse_jwt(token, "the test"), user)


def test_headers_carry_the_user_and_token(standin: StandIn) -> None:
    standin.answer("ping", 200, {"errors": [], "pings": [{"ping": "UP"}]})
    assert client(standin.url).get("ping")["pings"] == [{"ping": "UP"}]
    (request,) = standin.seen
    assert request["x-slurm-user-name"] == "alice"  # from the token's sun claim
    assert request["x-slurm-user-token"] == FRESH


def test_an_errors_array_under_http_200_is_an_error(standin: StandIn) -> None:
    errors = [{"description": 'Unknown key "job"', "source": "hsearch_r"}]
    standin.answer("job/3", 200, {"errors": errors})
    with pytest.raises(SlurmAnswerError, match='Unknown key "job"') as caught:
        client(standin.url).request("POST", "job/3", {"job": {}})
    assert caught.value.status == 200 and caught.value.errors == tuple(errors)


def test_an_unspecified_error_explains_the_jwt(standin: StandIn) -> None:
    error = {"error": "Unspecified error", "error_number": -1, "source": "slurm_load_jobs"}
    standin.answer("jobs", 500, {"errors": [error], "jobs": []})
    with pytest.raises(SlurmAnswerError, match="refuses the JWT from the test"):
        client(standin.url).get("jobs")


def test_an_unspecified_parse_error_under_http_200_is_not_blamed_on_the_jwt(
    standin: StandIn,
) -> None:
    """What slurmrestd answers to a value it cannot parse (a ``begin_time`` of 0)."""
    errors = [
        {"error": "Unable to parse time"},
        {"error": "Unspecified error", "error_number": -1, "source": "slurm_process_option_data"},
    ]
    standin.answer("job/3", 200, {"errors": errors})
    with pytest.raises(SlurmAnswerError, match="Unable to parse time") as caught:
        client(standin.url).request("POST", "job/3", {"begin_time": 0})
    assert "JWT" not in str(caught.value)


def test_missing_credentials_answer_401(standin: StandIn) -> None:
    standin.answer("jobs", 401, b"Authentication failure")
    with pytest.raises(SlurmAuthError, match="HTTP 401, credentials refused for user 'alice'"):
        client(standin.url).get("jobs")


def test_redirects_are_not_followed(standin: StandIn) -> None:
    standin.answer("jobs", 302, b"", Location=f"{standin.url}/elsewhere")
    with pytest.raises(SlurmAnswerError, match="HTTP 302"):
        client(standin.url).get("jobs")
    assert [r["path"] for r in standin.seen] == ["/slurm/v0.0.38/jobs"]


def test_answers_that_are_no_json_object(standin: StandIn) -> None:
    standin.answer("jobs", 200, b"<html>proxy error</html>")
    with pytest.raises(SlurmAnswerError, match="not a JSON object"):
        client(standin.url).get("jobs")
    standin.answer("nodes", 200, {"errors": "bad"})
    with pytest.raises(SlurmAnswerError, match="errors is not a list"):
        client(standin.url).get("nodes")


def test_an_expired_token_is_not_sent(standin: StandIn) -> None:
    old = make_jwt({"sun": "alice", "exp": int(time.time()) - 5})
    with pytest.raises(SlurmAuthError, match=r"expired at .* s ago\): get a new one"):
        client(standin.url, old).get("jobs")
    assert standin.seen == []


def test_an_unreachable_slurmrestd(standin: StandIn) -> None:
    url = standin.url
    standin.close()
    with pytest.raises(SlurmUnavailableError, match=f"cannot reach slurmrestd at {url}"):
        client(url).get("jobs")


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("abc.def", "is not a JWT"),
        ("a.b!.c", "is not a JWT"),
        ("a.bm90IGpzb24.c", "no readable claims"),
        ("", "is empty"),
        ("x" * 9000, "over 8192 characters"),
    ],
)
def test_malformed_tokens(token: str, message: str) -> None:
    with pytest.raises(SlurmAuthError, match=message):
        parse_jwt(token, "the test")


def test_scontrol_token_output_is_accepted() -> None:
    jwt = parse_jwt(f"SLURM_JWT={FRESH}\n", "the test")
    assert jwt.token == FRESH and jwt.user == "alice" and jwt.expires_at


def test_a_token_without_user_needs_one_given() -> None:
    anonymous = make_jwt({"exp": int(time.time()) + 60})
    with pytest.raises(ConfigError, match="give --slurm-user"):
        client("http://127.0.0.1:1", anonymous)
    assert client("http://127.0.0.1:1", anonymous, "bob").user == "bob"


def test_tokens_come_from_a_private_file_or_the_environment(tmp_path: Path) -> None:
    private = tmp_path / "jwt"
    private.write_text(f"SLURM_JWT={FRESH}\n")
    private.chmod(0o600)
    assert load_jwt(private, {}).source == f"file {private}"
    assert load_jwt(None, {"SLURM_JWT": FRESH}).source == "$SLURM_JWT"
    private.chmod(0o644)
    with pytest.raises(ConfigError, match="can be read or written by every user"):
        load_jwt(private, {})
    with pytest.raises(ConfigError, match="needs a JWT: give --slurm-token-file FILE or set"):
        load_jwt(None, {})


@pytest.mark.parametrize(
    "url", ["ftp://host:6820", "127.0.0.1:6820", "http://user:pw@host", "http://host/?x=1"]
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="slurmrestd URL"):
        check_url(url)
