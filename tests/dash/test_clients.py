"""The Prometheus and advisor clients against fake HTTP APIs on loopback: answers become
typed values, every failure a clear error, NaN is dropped and counted, the token is sent only
on apply and revert."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.dash.conftest import FakeApi, matrix, vector
from tests.procs import free_port
from toposcope.dashboards.app.advisorclient import (
    ActionInProgress,
    AdvisorBadAnswer,
    AdvisorClient,
    AdvisorRefused,
    AdvisorUnreachable,
)
from toposcope.dashboards.app.promclient import (
    PromClient,
    PrometheusBadAnswer,
    PrometheusQueryError,
    PrometheusTimeout,
    PrometheusUnreachable,
)
from toposcope.report.recommendation import (
    Evidence,
    Note,
    Recommendation,
    RecommendationKind,
    Report,
    Risk,
    RunInfo,
    Severity,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest


def test_instant_query_drops_nan_and_keeps_labels() -> None:
    answer = vector(
        ({"__name__": "m", "gpu": "0"}, 0.5), ({"gpu": "1"}, "NaN"), ({"gpu": "2"}, "+Inf")
    )
    with FakeApi(lambda m, p, q: (200, answer)) as api:
        got = PromClient(api.url).query("m", at=1700000000)
    assert [(dict(s.labels), s.value) for s in got.samples] == [
        ({"__name__": "m", "gpu": "0"}, 0.5)
    ]
    assert got.non_finite == 2
    method, path, params, _ = api.requests[0]
    assert (method, path, params["query"], params["time"]) == (
        "POST",
        "/api/v1/query",
        "m",
        "1700000000.000",
    )


def test_scalar_and_range_queries() -> None:
    def answer(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
        if path.endswith("query_range"):
            return 200, matrix(({"gpu": "0"}, [(1.0, 0.1), (2.0, "NaN"), (3.0, 0.3)]))
        return 200, {"status": "success", "data": {"resultType": "scalar", "result": [1, "4"]}}

    with FakeApi(answer) as api:
        client = PromClient(api.url)
        assert client.query("4").samples[0].value == 4.0
        got = client.query_range("m", 0, 100, 1)
        assert got.series[0].points == ((1.0, 0.1), (3.0, 0.3)) and got.non_finite == 1
        # a range longer than Prometheus' 11,000 points gets a wider step
        client.query_range("m", 0, 110_000, 1)
    assert float(api.requests[-1][2]["step"]) > 10
    with pytest.raises(ValueError):
        PromClient("http://127.0.0.1:1").query_range("m", 10, 10, 1)


@pytest.mark.parametrize(
    ("status", "body", "error", "needle"),
    [
        (
            400,
            {"status": "error", "error": "parse error at char 3"},
            PrometheusQueryError,
            "parse error",
        ),
        (200, b"<html>grafana</html>", PrometheusBadAnswer, "invalid JSON"),
        (
            200,
            {"status": "success", "data": {"resultType": "matrix", "result": []}},
            PrometheusBadAnswer,
            "not a vector",
        ),
        (
            200,
            {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "x"]}]},
            },
            PrometheusBadAnswer,
            "not a number",
        ),
        (503, b"overloaded", PrometheusUnreachable, "HTTP 503: overloaded"),
    ],
)
def test_prometheus_errors(status: int, body: Any, error: type[Exception], needle: str) -> None:
    with FakeApi(lambda m, p, q: (status, body)) as api, pytest.raises(error, match=needle):
        PromClient(api.url).query("up")


def test_prometheus_down_and_slow() -> None:
    with pytest.raises(PrometheusUnreachable, match="unreachable at"):
        PromClient(f"http://127.0.0.1:{free_port()}", timeout=2).query("up")
    holder: list[FakeApi] = []

    def stall(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
        holder[0].release.wait(10)
        return 200, vector()

    with FakeApi(stall) as api:
        holder.append(api)
        with pytest.raises(PrometheusTimeout, match=r"did not answer within 0\.3s"):
            PromClient(api.url, timeout=0.3).query("up")


RECOMMENDATION = Recommendation(
    id="pin-1",
    kind=RecommendationKind.PIN,
    policy="numa-pinning",
    target=Target("n1", "train"),
    summary="pin train",
    current={"cpus": [0]},
    proposed={"cpus": [1]},
    evidence=(Evidence("toposcope_workload_locality_ratio", {"resource": "cpu"}, 0.25),),
    estimated_gain=0.4,
    gain_model="model",
    confidence=0.8,
    risk=Risk.MEDIUM,
    severity=Severity.CRITICAL,
    actions=(ActionRequest("pin-1-0", ActionKind.PIN, "train", "n1", [1], [0]),),
)
REPORT = Report(
    RunInfo("t", "http://prometheus:9090", "1h", ("numa-pinning",), 0.05),
    (RECOMMENDATION,),
    (Note("p", "x", "r"),),
)
#: one recommendation as the service lists it (the contract plus when it was first seen)
REC = {**RECOMMENDATION.to_dict(), "first_seen": 1.0}
AUDIT = {
    "seq": 1, "request_id": "pin-1-0", "recommendation_id": "pin-1", "kind": "pin",
    "workload": "train", "node": "n1", "actor": "a@h", "backend": "sim",
    "intent_at": "t0", "result": "succeeded", "result_at": "t1", "error": "",
    "reverts": None, "reverted_by": None,
}  # fmt: skip


def advisor_api(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
    if path == "/api/v1/recommendations":
        return 200, {**REPORT.to_dict(), "recommendations": [REC], "service": {"last_error": None}}
    if path == "/api/v1/recommendations/pin-1":
        return 200, {**REC, "state": "applied", "audit": [AUDIT], "verification": None}
    if path == "/api/v1/recommendations/pin-1/apply":
        return 200, {
            "recommendation_id": "pin-1",
            "result": "applied",
            "detail": "1 action",
            "dry_run_calls": [],
        }
    if path == "/api/v1/recommendations/pin-1/revert":
        return 409, {"outcomes": [{"result": "failed", "detail": "busy"}]}
    if path == "/api/v1/audit":
        return 200, {"actions": [AUDIT], "verifications": []}
    if path == "/api/v1/placement":
        return 200, {
            "placements": [
                {
                    "node": "n1",
                    "gpus": [2, 3],
                    "worst_link": "PIX",
                    "link_factor": 1.0,
                    "link_sum": 1,
                    "broken_cells": 0,
                    "stranded": 0,
                    "numa_nodes": [1],
                }
            ]
        }
    return 404, {"error": f"no route {method} {path}"}  # fmt: skip


def test_advisor_reads_and_acts_with_the_token() -> None:
    with FakeApi(advisor_api) as api:
        client = AdvisorClient(api.url, "s3cret")
        report = client.report()
        [rec] = report.recommendations
        assert rec == RECOMMENDATION and rec.target.label() == "n1/train"
        assert report.notes == ("p: x: r",) and report.last_error is None
        one, audit = client.recommendation("pin-1")
        assert one == RECOMMENDATION and audit[0].result == "succeeded"
        assert client.audit("pin-1")[0].request_id == "pin-1-0"
        [option] = client.placement(2, "n1")
        assert option.gpus == (2, 3) and option.worst_link == "PIX"
        applied = client.apply("pin-1")
        assert applied.ok and applied.results == ("applied",)
        reverted = client.revert("pin-1")
        assert not reverted.ok and reverted.status == 409 and reverted.details == ("busy",)
        with pytest.raises(AdvisorRefused, match="no route") as refused:
            client.recommendation("nope")
        assert refused.value.status == 404
    auth = {path: headers.get("Authorization") for _, path, _, headers in api.requests}
    assert auth["/api/v1/recommendations/pin-1/apply"] == "Bearer s3cret"
    assert auth["/api/v1/recommendations"] is None and auth["/api/v1/audit"] is None
    assert "s3cret" not in repr(client)


def test_advisor_errors() -> None:
    with pytest.raises(AdvisorRefused, match="no advisor token"):
        AdvisorClient("http://127.0.0.1:1").apply("pin-1")
    with pytest.raises(AdvisorUnreachable, match="unreachable"):
        AdvisorClient(f"http://127.0.0.1:{free_port()}", timeout=2).report()
    with FakeApi(lambda m, p, q: (200, b"<html/>")) as api, pytest.raises(AdvisorBadAnswer):
        AdvisorClient(api.url).report()
    bad = {"recommendations": [{"id": "x"}]}
    with (
        FakeApi(lambda m, p, q: (200, bad)) as api,
        pytest.raises(AdvisorBadAnswer, match="malformed"),
    ):
        AdvisorClient(api.url).report()
    newer = {**REPORT.to_dict(), "schema_version": "2"}
    with (
        FakeApi(lambda m, p, q: (200, newer)) as api,
        pytest.raises(AdvisorBadAnswer, match="schema_version '2' is not supported"),
    ):
        AdvisorClient(api.url).report()
    wrong = {**REC, "actions": [{**REC["actions"][0], "kind": "release"}]}
    with (
        FakeApi(lambda m, p, q: (200, wrong)) as api,
        pytest.raises(AdvisorBadAnswer, match="pin recommendation cannot be applied by release"),
    ):
        AdvisorClient(api.url).recommendation("pin-1")
    busy = {"error": "no analysis has completed yet"}
    with (
        FakeApi(lambda m, p, q: (503, busy)) as api,
        pytest.raises(AdvisorRefused, match="no analysis") as refused,
    ):
        AdvisorClient(api.url).report()
    assert refused.value.status == 503


def test_apply_names_the_user_and_a_running_action_is_in_progress() -> None:
    running = {
        "error": "pin-1 is still being applied",
        "state": "in_progress",
        "entries": [{"seq": 1}, {"seq": 2}],
    }

    def answer(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
        if path.endswith("/revert"):
            return 409, running
        return 200, {"recommendation_id": "pin-1", "result": "applied", "detail": "1 action"}

    with FakeApi(answer) as api:
        client = AdvisorClient(api.url, "s3cret")
        assert client.apply("pin-1", user="alice").ok
        with pytest.raises(ActionInProgress, match=r"already in progress \(2 actions") as busy:
            client.revert("pin-1", user="alice")
    assert busy.value.status == 409 and busy.value.body["state"] == "in_progress"
    assert [json.loads(b) for b in api.bodies] == [{"user": "alice"}] * 2
    assert api.requests[0][3]["Content-Type"] == "application/json"


@pytest.mark.parametrize("status", [403, 502])
def test_an_error_page_is_reported_with_its_status_not_blamed_on_the_url(status: int) -> None:
    page = b"<html><body>upstream\n  went away</body></html>"
    with (
        FakeApi(lambda m, p, q: (status, page)) as api,
        pytest.raises(AdvisorRefused) as refused,
    ):
        AdvisorClient(api.url, "s3cret").apply("pin-1", user="alice")
    assert refused.value.status == status
    assert str(refused.value) == (
        f"the advisor answered HTTP {status}: <html><body>upstream went away</body></html>"
    )
