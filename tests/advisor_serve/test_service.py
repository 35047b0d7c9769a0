"""The advisor service against a fake PromQL API and a fake resource manager: /metrics,
the JSON API and its authentication, the audit log across a crash, and verification.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence
from typing import TextIO

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.advisor_serve.conftest import (
    API_TOKEN,
    PINNED,
    SPREAD,
    STARVED,
    Bench,
    Placement,
    call,
    serving,
    the_pin,
)
from tests.procs import poll, require_binary
from toposcope.advisor.acting import kind_of
from toposcope.report.advisor_api import Verdict
from toposcope.rm import (
    ActionRequest,
    ActionState,
    NodeView,
    ResourceManager,
    WorkloadView,
)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


def test_metrics_parse_and_pass_promtool(bench: Bench) -> None:
    service = bench.service()
    assert service.analyse_once() is not None
    rec_id = the_pin(service)
    bench.clock.now += 90
    with serving(service) as url:
        status, headers, text = call(f"{url}/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert value(text, "toposcope_advisor_recommendations", kind="pin", severity="critical") == 1
    assert value(text, "toposcope_advisor_recommendations", kind="config", severity="ok") == 0
    labels = {"recommendation": rec_id, "kind": "pin", "workload": "n1/train"}
    gain = value(text, "toposcope_advisor_estimated_gain_ratio", **labels)
    assert gain is not None and gain > 0.25
    assert value(text, "toposcope_advisor_recommendation_age_seconds", **labels) == 90
    for kind in ("pin", "migrate-memory", "place", "migrate-job", "release-idle", "config"):
        for result in ("failed", "harmful"):
            assert value(text, "toposcope_advisor_actions_total", kind=kind, result=result) == 0
    assert value(text, "toposcope_advisor_analyses_total", result="success") == 1
    assert value(text, "toposcope_advisor_last_success_timestamp_seconds") == bench.clock.now - 90
    duration = value(text, "toposcope_advisor_analysis_duration_seconds")
    assert duration is not None and duration >= 0
    assert value(text, "toposcope_advisor_verifications", kind="pin", verdict="pending") == 0
    rss = value(text, "process_resident_memory_bytes")
    assert rss is not None and rss > 0
    assert any(name == "toposcope_build_info" for name, _ in samples(text))
    checked = subprocess.run(
        [require_binary("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_reads_are_open_and_changes_need_the_token(bench: Bench) -> None:
    service = bench.service()
    service.analyse_once()
    rec_id = the_pin(service)
    apply = f"/api/v1/recommendations/{rec_id}/apply"
    with serving(service) as url:
        status, _, body = call(f"{url}/api/v1/recommendations")
        assert status == 200 and [r["id"] for r in body["recommendations"]] == [rec_id]
        status, headers, body = call(f"{url}{apply}", "POST")
        assert status == 401 and "Bearer" in headers["WWW-Authenticate"]
        assert "missing Authorization" in body["error"]
        status, _, body = call(f"{url}{apply}", "POST", token="wrong")
        assert status == 403 and "not valid" in body["error"]
        status, _, body = call(f"{url}/api/v1/recommendations/{rec_id}/revert", "POST")
        assert status == 401
        assert call(f"{url}/api/v1/recommendations/pin-000000000000", token=API_TOKEN)[0] == 404
        assert call(f"{url}/api/v1/recommendations/{rec_id}", "PUT")[0] == 405
    assert bench.rm.posts == 0
    unguarded = bench.service()
    unguarded.analyse_once()
    with serving(unguarded, token=None) as url:
        status, _, body = call(f"{url}{apply}", "POST", token=API_TOKEN)
    assert status == 403 and "--api-token-file" in body["error"]
    assert bench.rm.posts == 0


def test_apply_records_the_audit_and_is_idempotent(bench: Bench) -> None:
    service = bench.service()
    service.analyse_once()
    rec_id = the_pin(service)
    with serving(service) as url:
        status, _, body = call(f"{url}/api/v1/recommendations/{rec_id}/apply", "POST", API_TOKEN)
        assert status == 200 and body["result"] == "applied", body
        assert bench.rm.allocations["train"].cpus == list(range(8))
        assert bench.rm.allocations["train"].mems == [0]
        status, _, audit = call(f"{url}/api/v1/audit")
        rows = audit["actions"]
        assert [(r["kind"], r["result"]) for r in rows] == [
            ("pin", "succeeded"),
            ("migrate-memory", "succeeded"),
        ]
        assert rows[0]["before"]["cpus"] == list(range(16))
        assert rows[0]["actor"] == "tester@host" and rows[0]["backend"] == "sim"
        assert audit["verifications"][0]["verdict"] == "pending"
        status, _, one = call(f"{url}/api/v1/recommendations/{rec_id}")
        assert len(one["audit"]) == 2 and one["verification"]["verdict"] == "pending"
        status, _, again = call(f"{url}/api/v1/recommendations/{rec_id}/apply", "POST", API_TOKEN)
        assert status == 200 and again["result"] == "skipped"
        assert "already applied" in again["detail"]
        text = call(f"{url}/metrics")[2]
    assert bench.rm.posts == 2
    assert value(text, "toposcope_advisor_actions_total", kind="pin", result="applied") == 1
    assert value(text, "toposcope_advisor_verifications", kind="pin", verdict="pending") == 1


def test_revert_through_the_api(bench: Bench) -> None:
    service = bench.service()
    service.analyse_once()
    rec_id = the_pin(service)
    service.apply(rec_id)
    with serving(service) as url:
        status, _, body = call(f"{url}/api/v1/recommendations/{rec_id}/revert", "POST", API_TOKEN)
        assert status == 200, body
        assert [o["result"] for o in body["outcomes"]] == ["reverted", "reverted"]
        status, _, body = call(f"{url}/api/v1/recommendations/{rec_id}/revert", "POST", API_TOKEN)
        assert status == 409 and "nothing applied" in body["error"]
        text = call(f"{url}/metrics")[2]
    assert bench.rm.allocations["train"].cpus == list(range(16))
    assert bench.rm.allocations["train"].mems == [0, 1]
    assert value(text, "toposcope_advisor_actions_total", kind="pin", result="reverted") == 1
    verification = service.outcomes.get(rec_id)
    assert verification is not None and verification.verdict == Verdict.REVERTED


def test_dry_run_by_default_changes_nothing(bench: Bench) -> None:
    service = bench.dry_service()
    service.analyse_once()
    rec_id = the_pin(service)
    with serving(service) as url:
        status, _, body = call(f"{url}/api/v1/recommendations/{rec_id}/apply", "POST", API_TOKEN)
        assert status == 200 and body["result"] == "dry-run"
        assert len(body["dry_run_calls"]) == 2
        assert body["dry_run_calls"][0].startswith("dry-run: POST /api/v1/actions")
        status, _, body = call(f"{url}/api/v1/recommendations/{rec_id}/revert", "POST", API_TOKEN)
        assert status == 409 and "needs a resource manager" in body["error"]
        assert call(f"{url}/api/v1/audit")[2]["actions"] == []
    assert bench.rm.posts == 0


class Killed(BaseException):
    """The advisor process dies at this point (nothing after it runs)."""


class DiesMidApply:
    """A resource manager whose caller dies during its first apply, after the intent row.

    ``after_call``: the resource manager carried the action out before the death (the result
    was lost), else it never saw it.
    """

    def __init__(self, inner: ResourceManager, after_call: bool) -> None:
        self.inner = inner
        self.after_call = after_call

    def nodes(self) -> list[NodeView]:
        return self.inner.nodes()

    def workloads(self) -> list[WorkloadView]:
        return self.inner.workloads()

    def apply(self, request: ActionRequest) -> ActionState:
        if self.after_call:
            self.inner.apply(request)
        raise Killed

    def action(self, action_id: str) -> ActionState:
        return self.inner.action(action_id)


@pytest.mark.parametrize("after_call", [True, False])
def test_a_crash_mid_apply_loses_and_duplicates_nothing(bench: Bench, after_call: bool) -> None:
    healthy = bench.http_factory()

    def dying(nodes: Sequence[str], out: TextIO) -> ResourceManager:
        return DiesMidApply(healthy(nodes, out), after_call)

    first = bench.service(factory=dying)
    first.analyse_once()
    rec_id = the_pin(first)
    with pytest.raises(Killed):
        first.apply(rec_id)
    [row] = first.audit.entries(rec_id)
    assert row.result is None  # the intent, committed before the call
    assert bench.rm.posts == (1 if after_call else 0)

    restarted = bench.service()
    [settled] = restarted.recover()
    assert settled.result == ("succeeded" if after_call else "not-applied")
    restarted.analyse_once()
    outcome, _ = restarted.apply(rec_id)
    assert outcome.result == "applied", outcome.detail
    rows = restarted.audit.entries(rec_id)
    assert [(r.kind, r.result) for r in rows] == [
        ("pin", "succeeded"),
        ("migrate-memory", "succeeded"),
    ]
    assert bench.rm.posts == 2  # each action reached the resource manager exactly once
    assert sorted(bench.rm.actions) == sorted(r.request_id for r in rows)
    assert restarted.apply(rec_id)[0].result == "skipped"
    assert bench.rm.posts == 2


@pytest.mark.parametrize(
    ("after", "verdict"),
    [(PINNED, Verdict.PAID), (SPREAD, Verdict.NEUTRAL), (STARVED, Verdict.HARMFUL)],
)
def test_verification_after_apply(bench: Bench, after: Placement, verdict: Verdict) -> None:
    service = bench.service()
    service.analyse_once()
    rec_id = the_pin(service)
    assert service.apply(rec_id)[0].result == "applied"
    bench.promql.set({"train": after})
    bench.clock.now += bench.verify_after - 1
    service.analyse_once()
    pending = service.outcomes.get(rec_id)
    assert pending is not None and pending.verdict == Verdict.PENDING  # too early to judge
    bench.clock.now += 2
    service.analyse_once()
    judged = service.outcomes.get(rec_id)
    assert judged is not None and judged.verdict == verdict, judged
    text = service.metrics_text().decode()
    assert value(text, "toposcope_advisor_verifications", kind="pin", verdict=str(verdict)) == 1
    harmful = value(text, "toposcope_advisor_actions_total", kind="pin", result="harmful")
    if verdict == Verdict.HARMFUL:
        assert "cores used fell from 4.00 to 2.00" in judged.detail
        assert "reverted" in judged.detail
        assert harmful == 1
        assert bench.rm.allocations["train"].cpus == list(range(16))  # reverted
        assert all(e.reverted_by for e in service.audit.entries(rec_id) if e.reverts is None)
        assert value(text, "toposcope_advisor_actions_total", kind="pin", result="reverted") == 1
    else:
        assert harmful == 0
        assert bench.rm.allocations["train"].cpus == list(range(8))  # kept


def test_verification_survives_a_restart(bench: Bench) -> None:
    service = bench.service()
    service.analyse_once()
    rec_id = the_pin(service)
    service.apply(rec_id)
    bench.promql.set({"train": PINNED})
    bench.clock.now += bench.verify_after + 1
    restarted = bench.service()
    restarted.analyse_once()
    judged = restarted.outcomes.get(rec_id)
    assert judged is not None and judged.verdict == Verdict.PAID


def test_ages_count_from_the_first_sighting_across_restarts(bench: Bench) -> None:
    first = bench.service()
    first.analyse_once()
    rec_id = the_pin(first)
    bench.clock.now += 3600
    restarted = bench.service()
    restarted.analyse_once()
    text = restarted.metrics_text().decode()
    labels = {"recommendation": rec_id, "kind": "pin", "workload": "n1/train"}
    assert value(text, "toposcope_advisor_recommendation_age_seconds", **labels) == 3600


def test_a_failed_analysis_is_reported(bench: Bench) -> None:
    bench.promql.down = True
    service = bench.service()
    assert service.analyse_once() is None
    with serving(service) as url:
        assert call(f"{url}/-/healthy")[0] == 200
        assert call(f"{url}/-/ready")[0] == 503
        status, _, body = call(f"{url}/api/v1/recommendations")
        assert status == 503 and "no analysis has completed yet" in body["error"]
        text = call(f"{url}/metrics")[2]
    assert value(text, "toposcope_advisor_analyses_total", result="failure") == 1
    assert value(text, "toposcope_advisor_last_success_timestamp_seconds") is None
    bench.promql.down = False
    assert service.analyse_once() is not None
    assert service.status()["last_error"] is None


def test_the_loop_analyses_until_stopped(bench: Bench) -> None:
    service = bench.service()
    service.start(interval=0.05)
    try:
        poll(lambda: service.analyses["success"] >= 2, deadline_s=20, interval_s=0.05)
    finally:
        service.stop()
    assert not service.running


def test_kind_of_a_recommendation_id() -> None:
    assert kind_of("migrate-memory-0123456789ab") == "migrate-memory"
    assert kind_of("pin-0123456789ab") == "pin"
    assert kind_of("nonsense") == "unknown"


def test_a_recommendation_that_went_away_counts_its_age_afresh(bench: Bench) -> None:
    service = bench.service()
    service.analyse_once()
    rec_id = the_pin(service)
    bench.clock.now += 600
    bench.promql.set({"train": PINNED})
    service.analyse_once()
    assert service.report is not None and not service.report.recommendations
    bench.clock.now += 600
    bench.promql.set({"train": SPREAD})
    service.analyse_once()
    bench.clock.now += 5
    text = service.metrics_text().decode()
    labels = {"recommendation": rec_id, "kind": "pin", "workload": "n1/train"}
    assert value(text, "toposcope_advisor_recommendation_age_seconds", **labels) == 5


def test_unknown_routes_and_methods_answer_json_and_the_landing_page_links_the_api(
    bench: Bench,
) -> None:
    service = bench.dry_service()
    with serving(service) as url:
        status, headers, body = call(f"{url}/api/v1/nope")
        assert (status, body) == (404, {"error": "no route GET /api/v1/nope"})
        status, headers, body = call(f"{url}/api/v1/recommendations", "POST", API_TOKEN)
        assert status == 405 and "GET" in headers["Allow"] and "POST" in body["error"]
        status, headers, page = call(f"{url}/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert 'href="api/v1/openapi.json"' in page and 'href="metrics"' in page
        status, headers, text = call(f"{url}/-/ready")
        assert (status, text) == (503, "no analysis yet\n")


def test_a_second_apply_while_the_first_is_at_the_resource_manager_is_a_409(
    bench: Bench,
) -> None:
    service = bench.service()
    service.analyse_once()
    rec_id = the_pin(service)
    apply = f"/api/v1/recommendations/{rec_id}/apply"
    gate = bench.rm.hold()
    first: list[tuple[int, object]] = []
    with serving(service) as url:
        caller = threading.Thread(
            target=lambda: first.append(call(f"{url}{apply}", "POST", API_TOKEN)[::2]), daemon=True
        )
        caller.start()
        poll(gate.reached.is_set, what="the resource manager holding the first apply")
        status, _, body = call(f"{url}{apply}", "POST", API_TOKEN)
        gate.open()
        caller.join(timeout=30)
    assert status == 409, body
    assert body["state"] == "in_progress" and "in progress" in body["error"]
    assert [e["state"] for e in body["entries"]] == ["pending"]  # the first call's intent
    [(first_status, first_body)] = first
    assert first_status == 200 and first_body["result"] == "applied"  # type: ignore[index]
    assert set(bench.rm.carried.values()) == {1}
