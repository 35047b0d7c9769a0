"""The PromQL HTTP backend against a fake Prometheus API on loopback."""

from __future__ import annotations

import json
import logging

import pytest

from tests.advisor.fakes import FakeServer, Request, ok, vector
from tests.procs import free_port
from toposcope.advisor.errors import AdvisorConnectionError, AdvisorQueryError
from toposcope.advisor.loaders import PrometheusLoader, Window, load_all, queries
from toposcope.errors import ConfigError


def test_instant_query_parses_vector_and_sends_credentials() -> None:
    def route(request: Request) -> tuple[int, bytes]:
        return ok(vector(({"__name__": "up", "job": "toposcope", "gpu": "0"}, "0.5")))

    with FakeServer(route).run() as fake:
        loader = PrometheusLoader(
            fake.url + "/api/v1",
            bearer_token="s3cret",
            headers={"X-Scope-OrgID": "tenant-a"},
            params={"dedup": "true"},
        )
        result = loader.instant("up", at=1700000000)
    assert [(dict(s.labels), s.value) for s in result.samples] == [
        ({"job": "toposcope", "gpu": "0"}, 0.5)
    ]
    request = fake.requests[0]
    assert request.path == "/api/v1/query"
    assert request.params == {"query": "up", "time": "1700000000.000", "dedup": "true"}
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["x-scope-orgid"] == "tenant-a"


def test_path_prefix_is_kept_for_mimir_style_urls() -> None:
    with FakeServer(lambda r: ok(vector())).run() as fake:
        PrometheusLoader(fake.url + "/prometheus").instant("up")
    assert fake.requests[0].path == "/prometheus/api/v1/query"


def test_nan_and_inf_samples_are_dropped_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    answer = ok(vector(({"gpu": "0"}, "NaN"), ({"gpu": "1"}, "+Inf"), ({"gpu": "2"}, "0.25")))
    with FakeServer(lambda r: answer).run() as fake, caplog.at_level(logging.INFO):
        result = PrometheusLoader(fake.url).instant("x")
    assert [s.labels["gpu"] for s in result.samples] == ["2"]
    assert result.dropped == 2
    assert "dropped 2 NaN/Inf" in caplog.text


def test_warnings_of_partial_responses_are_logged_and_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answer = ok(vector(({"gpu": "0"}, "1")), warnings=["partial response: store B down"])
    with FakeServer(lambda r: answer).run() as fake, caplog.at_level(logging.WARNING):
        loader = PrometheusLoader(fake.url)
        data = load_all(loader, Window.parse("5m"), queries(names=["workload-cpu"]))
    assert data.results["workload-cpu"].warnings == ("partial response: store B down",)
    assert data.notes == ("workload-cpu: partial response: store B down",)
    assert "partial response: store B down" in caplog.text


def test_empty_result_is_missing_data_not_an_error() -> None:
    with FakeServer(lambda r: ok(vector())).run() as fake:
        data = load_all(PrometheusLoader(fake.url), Window.parse("1h"), queries())
    assert all(r.empty for r in data.results.values())
    assert data.present_metrics() == frozenset()


def test_connection_refused_names_the_url_after_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    delays: list[float] = []
    loader = PrometheusLoader(url, retries=2, backoff=0.5, sleep=delays.append)
    with pytest.raises(AdvisorConnectionError) as raised:
        loader.instant("up")
    assert url in str(raised.value)
    assert "after 3 attempt(s)" in str(raised.value)
    assert delays == [0.5, 1.0]  # exponential backoff


def test_slow_backend_times_out() -> None:
    with FakeServer(lambda r: "hang").run() as fake:
        loader = PrometheusLoader(fake.url, timeout=0.3, retries=1, sleep=lambda s: None)
        with pytest.raises(AdvisorConnectionError) as raised:
            loader.instant("up")
        assert len(fake.requests) == 2
    assert "no answer within 0.3s" in str(raised.value)
    assert fake.url in str(raised.value)


def test_server_errors_are_retried_then_succeed() -> None:
    answers = [(503, b"overloaded"), ok(vector(({"gpu": "0"}, "1")))]
    delays: list[float] = []
    with FakeServer(lambda r: answers.pop(0)).run() as fake:
        result = PrometheusLoader(fake.url, sleep=delays.append, backoff=0.1).instant("up")
    assert len(result.samples) == 1
    assert delays == [0.1]


def test_bad_json_is_a_clear_connection_error() -> None:
    with (
        FakeServer(lambda r: (200, b"<html>not prometheus</html>")).run() as fake,
        pytest.raises(AdvisorConnectionError, match="invalid JSON"),
    ):
        PrometheusLoader(fake.url).instant("up")


def test_malformed_result_is_a_clear_error() -> None:
    answer = ok({"resultType": "vector", "result": [{"metric": {}, "value": []}]})
    with (
        FakeServer(lambda r: answer).run() as fake,
        pytest.raises(AdvisorConnectionError, match="malformed result"),
    ):
        PrometheusLoader(fake.url).instant("up")


def test_rejected_query_is_a_query_error() -> None:
    body = {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}
    with (
        FakeServer(lambda r: (400, json.dumps(body).encode())).run() as fake,
        pytest.raises(AdvisorQueryError, match="bad_data: parse error"),
    ):
        PrometheusLoader(fake.url).instant("up{")


def test_auth_failure_is_not_retried() -> None:
    with (
        FakeServer(lambda r: (401, b"{}")).run() as fake,
        pytest.raises(AdvisorConnectionError, match="refused the credentials"),
    ):
        PrometheusLoader(fake.url, retries=3, sleep=lambda s: None).instant("up")
        assert len(fake.requests) == 1


def test_wrong_path_says_so() -> None:
    with (
        FakeServer(lambda r: (404, b"404 page not found")).run() as fake,
        pytest.raises(AdvisorConnectionError, match="HTTP 404"),
    ):
        PrometheusLoader(fake.url).instant("up")


def test_range_query_returns_series_without_nan_points() -> None:
    matrix = {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"__name__": "toposcope_gpu_utilization_ratio", "gpu": "0"},
                "values": [[100, "0.1"], [160, "NaN"], [220, "0.2"]],
            }
        ],
    }
    with FakeServer(lambda r: ok(matrix)).run() as fake:
        window = Window.parse("2m", end=220.0)
        (history,) = queries(names=["gpu-utilization-history"])
        result = PrometheusLoader(fake.url).load(history, window)
    assert fake.requests[0].path == "/api/v1/query_range"
    assert fake.requests[0].params["start"] == "100.000"
    assert fake.requests[0].params["step"] == "2"
    assert result.series[0].points == ((100.0, 0.1), (220.0, 0.2))
    assert result.dropped == 1
    assert result.metric == "toposcope_gpu_utilization_ratio"


def test_queries_are_built_from_catalogue_names_with_selector() -> None:
    built = {q.name: q.promql(Window.parse("30m")) for q in queries('job="toposcope"')}
    counter = 'toposcope_workload_cpu_seconds_total{job="toposcope"}'
    age_so_far = (
        f"clamp_max(time() - (min_over_time(timestamp({counter})[1815s:15s])"
        f" or timestamp({counter})), 1800)"
    )
    age_so_far_upper = (
        f"clamp_max(time() + 150 - (min_over_time(timestamp({counter})[1950s:150s])"
        f" or timestamp({counter})), 1800)"
    )
    last_seen = f"timestamp({counter}) or max_over_time(timestamp({counter})[1815s:15s])"
    samples = f"count_over_time({counter}[30m])"
    assert built["workload-cpu"] == (
        f"increase({counter}[30m]) / clamp({age_so_far} - (time() - ({last_seen}) > 1.1 * "
        f"{age_so_far_upper} / ({samples} + 0.1) or 0 * {samples}), 15, 1800)"
    )
    assert built["gpu-utilization-max"] == (
        'max_over_time(toposcope_gpu_utilization_ratio{job="toposcope"}[30m])'
    )
    assert built["gpu-links"] == 'toposcope_gpu_link_info{job="toposcope"}'
    assert built["gpu-clock-events"] == (
        'avg_over_time(toposcope_gpu_clock_event_active{job="toposcope"}[30m]) > 0'
        ' or group(toposcope_gpu_clock_event_active{job="toposcope"})'
    )


@pytest.mark.parametrize("text", ["1x", "", "h", "-5m", "0s"])
def test_bad_windows_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        Window.parse(text)


def test_window_durations() -> None:
    assert Window.parse("1h30m").seconds == 5400
    assert Window.parse("90s").step_seconds() == 1.5


def test_url_must_be_http() -> None:
    with pytest.raises(AdvisorConnectionError, match="http"):
        PrometheusLoader("localhost:9090")
