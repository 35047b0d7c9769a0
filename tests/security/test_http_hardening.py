"""The HTTP server layer every daemon runs on, against real servers on 127.0.0.1: body limits
(413 without reading the body), invalid or missing lengths, deep JSON (400, not 500), unknown
methods (405 with ``Allow``), the ``Server`` header, JSON errors, a burst of 200 scrapes, and
a Hypothesis pass over the resource-manager API and the exporter (no 5xx, no traceback,
bounded time).
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.advisor_serve.conftest import advisor_service, serving
from tests.sim_api.fake_rm import FakeResourceManager
from toposcope import __version__
from toposcope.advisor.acting import dry_run_factory
from toposcope.config import ExporterConfig, HostPaths
from toposcope.exporters.app import ExporterServer, build_runner
from toposcope.exporters.collectors import default_table
from toposcope.rm.api import make_api_app
from toposcope.serving.httpserver import DEFAULT_MAX_BODY, HttpServer

TOKEN = "hardening-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MIB = 1024 * 1024
#: generous: a request the server mishandles hangs until this, then the test fails
TIMEOUT = 30.0


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, headers (names lower-cased) and body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers.get("content-type", "").startswith("application/json"), self
        return json.loads(self.body)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """One request with ``http.client`` (any method, any path), the whole answer read."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        got = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, got, data)
    finally:
        connection.close()


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection and read the answer's head and body until the
    server has sent its ``Content-Length`` worth (never waiting for the connection to close).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(data)
        received = b""
        while b"\r\n\r\n" not in received or len(received) < _expected(received):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


def _expected(received: bytes) -> int:
    head, _, _ = received.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return len(received) + 1


@contextmanager
def running(server: HttpServer) -> Iterator[int]:
    server.start()
    try:
        yield server.port
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def rm_api() -> Iterator[int]:
    """The resource-manager API over the fake resource manager, as the agent serves it."""
    with running(HttpServer(make_api_app(FakeResourceManager(), TOKEN), "127.0.0.1:0")) as port:
        yield port


@pytest.fixture(scope="module")
def exporter(hwloc_root: Callable[[str], Path]) -> Iterator[int]:
    """The exporter with its topology collector over a fixture host."""
    config = ExporterConfig(paths=HostPaths.under(hwloc_root("16amd64-8n2c")), nvml="off")
    runner = build_runner(config, [e for e in default_table() if e.name == "topology"])
    with running(ExporterServer(runner, "host-a", "127.0.0.1:0")) as port:
        yield port


@pytest.fixture
def advisor(tmp_path: Path) -> Iterator[int]:
    """The advisor service (dry run, no analysis yet)."""
    service = advisor_service(
        "http://127.0.0.1:1", tmp_path / "audit.sqlite", dry_run_factory, backend_name="dry-run"
    )
    with serving(service) as url:
        yield int(url.rpartition(":")[2])


def echo_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Answers with the number of body bytes it could read (all that ``wsgi.input`` gives)."""
    size = len(environ["wsgi.input"].read())
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(size).encode()]


# -- the Server header ---------------------------------------------------------------------


def test_the_server_header_names_toposcope_not_python(exporter: int, rm_api: int) -> None:
    for port in (exporter, rm_api):
        for answer in (request(port, "GET", "/-/healthy"), request(port, "GET", "/api/v1/nodes")):
            assert answer.headers["server"] == f"toposcope/{__version__}"
    # an answer the server gives before any application runs says the same
    malformed = raw_exchange(exporter, b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 101 + b"\r\n")
    head, _, body = malformed.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert f"Server: toposcope/{__version__}\r\n".encode() in head + b"\r\n"
    assert b"Python" not in head and "headers" in json.loads(body)["error"]


# -- body limits -----------------------------------------------------------------------------


def test_an_oversize_body_is_413_in_json(rm_api: int) -> None:
    answer = request(rm_api, "POST", "/api/v1/actions", b"[" * (2 * MIB), AUTH)
    assert answer.status == 413
    error = answer.json()
    assert error["field"] is None and f"limit of {DEFAULT_MAX_BODY}" in error["error"]


def test_an_oversize_body_is_refused_from_its_length_alone(rm_api: int) -> None:
    started = time.monotonic()
    head = (
        "POST /api/v1/actions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: {100 * MIB}\r\n\r\n"
    )
    answer = raw_exchange(rm_api, head.encode() + b'{"request_id": ')
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert time.monotonic() - started < TIMEOUT / 2  # answered, not waiting for 100 MiB


def test_the_advisor_service_gets_the_same_limit(advisor: int) -> None:
    answer = request(advisor, "POST", "/api/v1/recommendations/r/apply", b"x" * (2 * MIB), AUTH)
    assert answer.status == 413 and "limit" in answer.json()["error"]


def test_the_limit_is_per_server() -> None:
    with running(HttpServer(echo_app, "127.0.0.1:0", max_body=10)) as port:
        assert request(port, "POST", "/", b"x" * 10).body == b"10"
        assert request(port, "POST", "/", b"x" * 11).status == 413


def test_the_application_reads_the_declared_body_and_no_more() -> None:
    with running(HttpServer(echo_app, "127.0.0.1:0")) as port:
        # no Content-Length: no body, even if the client sends bytes (read() must not block)
        answer = raw_exchange(port, b"POST / HTTP/1.0\r\nHost: x\r\n\r\nstray bytes")
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\n0")
        answer = raw_exchange(port, b"POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\nabcdef")
        assert answer.endswith(b"\r\n\r\n3")


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        ("Content-Length: abc\r\n", 400, "invalid Content-Length"),
        ("Content-Length: -5\r\n", 400, "invalid Content-Length"),
        ("Content-Length: 3\r\nContent-Length: 4\r\n", 400, "invalid Content-Length"),
        ("Transfer-Encoding: chunked\r\n", 411, "Transfer-Encoding"),
    ],
)
def test_a_body_of_unknown_length_is_refused(
    headers: str, status: int, message: str, rm_api: int
) -> None:
    data = f"POST /api/v1/actions HTTP/1.1\r\nHost: x\r\n{headers}\r\n3\r\nabc\r\n0\r\n\r\n"
    answer = raw_exchange(rm_api, data.encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    assert b"Content-Type: application/json" in head
    assert message in json.loads(body)["error"]


# -- JSON nesting ----------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"[" * 100_000, b"[" * 5_000 + b"]" * 5_000, b'{"a":' * 3_000])
def test_deep_json_is_400_not_500(rm_api: int, body: bytes) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    answer = request(rm_api, "POST", "/api/v1/actions", body, headers)
    assert answer.status == 400
    assert "deeper than" in answer.json()["error"]


# -- methods ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["BREW", "DELETE", "PUT"])
@pytest.mark.parametrize("path", ["/metrics", "/", "/-/healthy", "/nope"])
def test_the_exporter_answers_only_get_and_head(exporter: int, method: str, path: str) -> None:
    answer = request(exporter, method, path)
    assert answer.status == 405
    assert answer.headers["allow"] == "GET, HEAD"
    assert method in answer.json()["error"]


def test_the_exporter_refuses_post(exporter: int) -> None:
    assert request(exporter, "POST", "/metrics", b"").status == 405
    # a body the exporter does not want is read and dropped, so the client gets the answer
    assert request(exporter, "POST", "/metrics", b"x" * (4 * MIB)).status == 405
    assert request(exporter, "HEAD", "/metrics").status == 200


@pytest.mark.parametrize("method", ["BREW", "DELETE"])
def test_the_rm_api_answers_405_with_allow(rm_api: int, method: str) -> None:
    for path in ("/api/v1/nodes", "/api/v1/actions"):
        answer = request(rm_api, method, path, headers=AUTH)
        assert answer.status == 405
        assert "GET" in answer.headers["allow"] or "POST" in answer.headers["allow"]
        assert answer.json()["error"]


@pytest.mark.parametrize("method", ["BREW", "DELETE"])
def test_the_advisor_service_answers_405_with_allow(advisor: int, method: str) -> None:
    for path in ("/api/v1/recommendations", "/-/healthy", "/metrics"):
        answer = request(advisor, method, path, headers=AUTH)
        assert answer.status == 405
        assert answer.headers["allow"] == "GET, HEAD, POST"
        assert answer.json()["field"] is None


# -- errors ----------------------------------------------------------------------------------


def test_an_application_error_is_a_logged_json_500(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    def broken(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        raise RuntimeError("internal detail")

    with (
        caplog.at_level(logging.ERROR, logger="toposcope.http"),
        running(HttpServer(broken, "127.0.0.1:0")) as port,
    ):
        answer = request(port, "GET", "/api/v1/x")
    assert answer.status == 500
    assert "internal detail" not in answer.json()["error"]
    assert b"Traceback" not in answer.body
    assert "Traceback" not in capfd.readouterr().err
    [record] = [r for r in caplog.records if r.name == "toposcope.http"]
    assert "GET /api/v1/x" in record.getMessage() and record.exc_info is not None


# -- a burst of scrapes ------------------------------------------------------------------------


def test_200_concurrent_scrapes_are_all_answered(exporter: int) -> None:
    count = 200
    start = threading.Barrier(count)
    results: list[int | str] = [""] * count

    def scrape(i: int) -> None:
        start.wait()
        try:
            results[i] = request(exporter, "GET", "/metrics").status
        except OSError as exc:
            results[i] = repr(exc)

    threads = [threading.Thread(target=scrape, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT * 2)
    failed = [r for r in results if r != 200]
    assert not failed, f"{len(failed)} of {count} scrapes failed: {sorted(set(map(str, failed)))}"


# -- fuzzing -----------------------------------------------------------------------------------

METHODS = st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"])
SEGMENT = st.text(st.characters(codec="utf-8"), max_size=12).map(
    lambda text: urllib.parse.quote(text, safe="")
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
ACTION_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "request_id": st.text(max_size=6) | st.integers(),
        "kind": st.sampled_from(["pin", "migrate-memory", "place", "migrate", "release", "x"]),
        "workload": st.sampled_from(["train-a", "nope", ""]),
        "node": st.sampled_from(["node-a", "../x", "n" * 300]) | st.none(),
        "cpus": st.lists(st.integers(-2, 70), max_size=4) | st.text(max_size=3),
        "gpus": st.lists(st.integers(-1, 9), max_size=3),
        "extra": JSON_VALUES,
    },
)
BODIES = st.one_of(
    st.none(),
    st.binary(max_size=512),
    JSON_VALUES.map(lambda value: json.dumps(value).encode()),
    ACTION_FIELDS.map(lambda value: json.dumps(value).encode()),
    st.integers(1, 3000).map(lambda depth: b"[" * depth + b"]" * depth),
)
HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "Content-Type": st.sampled_from(["application/json", "text/plain", "application/x-www"]),
        "Authorization": st.sampled_from([f"Bearer {TOKEN}", "Bearer wrong", "Basic xx", ""]),
    },
)
FUZZ = settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def check_answer(
    port: int,
    method: str,
    path: str,
    body: bytes | None,
    headers: Any,
    caplog: pytest.LogCaptureFixture,
) -> Answer:
    """One fuzzed request: answered in bounded time, no 5xx, no traceback, no error logged."""
    caplog.clear()
    started = time.monotonic()
    answer = request(port, method, path, body, headers)
    assert time.monotonic() - started < 5.0, (method, path)
    assert answer.status < 500, (method, path, body, answer)
    assert b"Traceback" not in answer.body
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], (method, path, body)
    return answer


@FUZZ
@given(
    method=METHODS,
    route=st.sampled_from(["", "/nodes", "/nodes/node-a", "/workloads", "/actions", "/healthz"]),
    tail=st.lists(SEGMENT, max_size=3),
    body=BODIES,
    headers=HEADERS,
)
def test_fuzz_the_rm_api(
    rm_api: int,
    caplog: pytest.LogCaptureFixture,
    method: str,
    route: str,
    tail: list[str],
    body: bytes | None,
    headers: Any,
) -> None:
    path = "/".join(["/api/v1" + route, *tail])
    answer = check_answer(rm_api, method, path, body, headers, caplog)
    if answer.status >= 400 and method != "HEAD":
        assert isinstance(answer.json()["error"], str)


@FUZZ
@given(body=BODIES, headers=HEADERS)
def test_fuzz_the_rm_api_action_bodies(
    rm_api: int, caplog: pytest.LogCaptureFixture, body: bytes | None, headers: Any
) -> None:
    answer = check_answer(rm_api, "POST", "/api/v1/actions", body, {**AUTH, **headers}, caplog)
    if answer.status >= 400:
        assert isinstance(answer.json()["error"], str)


@FUZZ
@given(
    method=METHODS,
    path=st.lists(SEGMENT, max_size=3).map(lambda parts: "/" + "/".join(parts))
    | st.sampled_from(["/metrics", "/", "/-/healthy", "/-/ready"]),
    query=st.lists(
        st.tuples(st.sampled_from(["collect[]", "exclude[]", "x"]), st.text(max_size=10)),
        max_size=3,
    ),
    body=BODIES,
)
def test_fuzz_the_exporter(
    exporter: int,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: bytes | None,
) -> None:
    target = f"{path}?{urllib.parse.urlencode(query)}" if query else path
    check_answer(exporter, method, target, body, {}, caplog)
