"""The PromQL API transport the advisor and the Dash app share, against a loopback server."""

from __future__ import annotations

import urllib.parse

import pytest

from tests.advisor.fakes import FakeServer, ok, vector
from tests.procs import free_port
from toposcope.promql.client import (
    PromApi,
    PromApiBadAnswer,
    PromApiDenied,
    PromApiError,
    PromApiNotFound,
    PromApiRejected,
    PromApiUnreachable,
    base_url,
)


def test_base_url_accepts_the_forms_users_paste() -> None:
    for url in (
        "http://p:9090",
        "http://p:9090/",
        "http://p:9090/api/v1",
        "http://p:9090/api/v1/query",
    ):
        assert base_url(url) == "http://p:9090"
    assert base_url("https://mimir/prometheus/") == "https://mimir/prometheus"
    with pytest.raises(PromApiError, match="http"):
        base_url("p:9090")


def test_get_sends_params_and_headers_and_returns_data_and_warnings() -> None:
    answer = ok(vector(({"gpu": "0"}, "1")), warnings=["partial"], infos=["dedup"])
    with FakeServer(lambda r: answer).run() as fake:
        api = PromApi(fake.url, headers={"X-Scope-OrgID": "t1"}, params={"dedup": "true"})
        got = api.get("query", {"query": "up", "time": "1.000"})
    request = fake.requests[0]
    assert (request.method, request.path) == ("GET", "/api/v1/query")
    assert request.params == {"dedup": "true", "query": "up", "time": "1.000"}
    assert {k.lower(): v for k, v in request.headers.items()}["x-scope-orgid"] == "t1"
    assert got.data["resultType"] == "vector"
    assert got.warnings == ("partial", "dedup")


def test_post_sends_the_query_as_a_form() -> None:
    with FakeServer(lambda r: ok(vector())).run() as fake:
        PromApi(fake.url, post=True).get("query_range", {"query": 'a{b="c"}'})
    request = fake.requests[0]
    assert request.method == "POST" and request.params == {}
    assert dict(urllib.parse.parse_qsl(request.body.decode())) == {"query": 'a{b="c"}'}


def test_overload_is_retried_with_backoff_then_reported() -> None:
    delays: list[float] = []
    with FakeServer(lambda r: (503, b"overloaded")).run() as fake:
        api = PromApi(fake.url, retries=2, backoff=0.25, sleep=delays.append)
        with pytest.raises(PromApiUnreachable, match=r"after 3 attempt\(s\): HTTP 503") as err:
            api.get("query", {"query": "up"})
    assert delays == [0.25, 0.5] and len(fake.requests) == 3
    assert not err.value.timed_out


@pytest.mark.parametrize(
    ("answer", "error", "needle"),
    [
        ((401, b"{}"), PromApiDenied, "refused the credentials"),
        ((404, b"404 page not found"), PromApiNotFound, "HTTP 404"),
        (
            (400, b'{"status":"error","errorType":"bad_data","error":"parse error"}'),
            PromApiRejected,
            "bad_data: parse error",
        ),
        (
            (200, b'{"status":"error","errorType":"timeout","error":"slow"}'),
            PromApiRejected,
            "timeout: slow",
        ),
        ((200, b"<html>grafana</html>"), PromApiBadAnswer, "invalid JSON"),
        ((200, b'{"status":"success"}'), PromApiBadAnswer, "without a data object"),
    ],
)
def test_answers_that_are_not_retried(
    answer: tuple[int, bytes], error: type[Exception], needle: str
) -> None:
    with FakeServer(lambda r: answer).run() as fake, pytest.raises(error, match=needle):
        PromApi(fake.url, retries=3, sleep=lambda s: None).get("query", {"query": "up"})
    assert len(fake.requests) == 1


def test_nothing_listening_and_too_slow() -> None:
    with pytest.raises(PromApiUnreachable, match="cannot connect"):
        PromApi(f"http://127.0.0.1:{free_port()}").get("query", {"query": "up"})
    with FakeServer(lambda r: "hang").run() as fake:
        with pytest.raises(PromApiUnreachable, match=r"no answer within 0\.2s") as err:
            PromApi(fake.url, timeout=0.2).get("query", {"query": "up"})
        fake.release.set()
    assert err.value.timed_out
