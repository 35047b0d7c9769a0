"""The recommendations page's "What the advice did": the verdict of each applied
recommendation in the table and, in its detail, the verdict, the measured against the
estimated gain, the figures before and after, when it was verified and whether it was
reverted; against a fake advisor answering what the service answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.dash.conftest import FakeApi
from toposcope.advisor.recommendations import make_recommendation
from toposcope.dashboards.app.access import Access
from toposcope.dashboards.app.advisorclient import AdvisorBadAnswer, AdvisorClient
from toposcope.dashboards.app.recommendations_page import detail_view, table_view
from toposcope.dashboards.app.verification_views import what_it_did
from toposcope.report.advisor_api import JobOutcome, Measurement, Verdict, Verification
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Report,
    Risk,
    RunInfo,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest

APPLIED_AT = 1_790_000_000.0
VERIFIED_AT = APPLIED_AT + 900


def recommend(
    kind: RecommendationKind, action: ActionRequest, proposed: dict[str, Any], gain: float
) -> Recommendation:
    return make_recommendation(
        kind=kind,
        policy="test",
        target=Target("n1", action.workload),
        summary=f"{kind} {action.workload}",
        current={},
        proposed=proposed,
        evidence=[Evidence("toposcope_gpu_info", {"node": "n1"}, 1.0)],
        estimated_gain=gain,
        gain_model="test",
        confidence=0.7,
        risk=Risk.LOW,
        actions=[action],
    )


MOVE = recommend(
    RecommendationKind.MIGRATE_JOB,
    ActionRequest("", ActionKind.MIGRATE, "train", "n2"),
    {"node": "n2"},
    0.25,
)
PIN = recommend(
    RecommendationKind.PIN,
    ActionRequest("", ActionKind.PIN, "etl", "n1", [1], [0]),
    {"cpus": [1]},
    0.4,
)
WAITING = recommend(
    RecommendationKind.PIN,
    ActionRequest("", ActionKind.PIN, "nb", "n1", [2], [0]),
    {"cpus": [2]},
    0.1,
)
OPEN = recommend(
    RecommendationKind.PIN,
    ActionRequest("", ActionKind.PIN, "idle", "n1", [3], [0]),
    {"cpus": [3]},
    0.05,
)
#: applied, paid, and so gone from the latest report
GONE = recommend(
    RecommendationKind.MIGRATE_MEMORY,
    ActionRequest("", ActionKind.MIGRATE_MEMORY, "db", "n1", mems=[1]),
    {"mems": [1]},
    0.2,
)

VERIFICATIONS = {
    MOVE.id: Verification(
        MOVE.id, "migrate-job", "n1", "train", None, APPLIED_AT,
        Measurement(sm_active=0.4, link_bytes_per_second=2e9, progress=100.0),
        Verdict.PAID,
        Measurement(sm_active=0.6, link_bytes_per_second=3e9, progress=130.0),
        VERIFIED_AT, "progress rose 30%", 0.25, "n2", (0, 1), 0.3,
    ),
    PIN.id: Verification(
        PIN.id, "pin", "n1", "etl", 1, APPLIED_AT,
        Measurement(remote_share=0.1, cores=4.0), Verdict.HARMFUL,
        Measurement(remote_share=0.5, cores=2.0),
        VERIFIED_AT, "remote share rose; reverted (reverted)", 0.4,
    ),
    WAITING.id: Verification(
        WAITING.id, "pin", "n1", "nb", 0, APPLIED_AT, Measurement(remote_share=0.3),
        Verdict.PENDING, None, None, "waiting for verify-after", 0.1,
    ),
    GONE.id: Verification(
        GONE.id, "migrate-memory", "n1", "db", 1, APPLIED_AT, Measurement(remote_share=0.6),
        Verdict.PAID, Measurement(remote_share=0.1), VERIFIED_AT, "memory is local", 0.2,
    ),
}  # fmt: skip


def audit_row(seq: int, rec: Recommendation, **extra: Any) -> dict[str, Any]:
    return {
        "seq": seq, "request_id": f"r{seq}", "recommendation_id": rec.id,
        "kind": str(rec.kind), "workload": rec.target.workload, "node": "n1",
        "actor": "a", "backend": "sim", "intent_at": "t", "result": "succeeded", **extra,
    }  # fmt: skip


AUDIT = {
    MOVE.id: [audit_row(1, MOVE)],
    PIN.id: [audit_row(2, PIN, reverted_by="r3"), audit_row(3, PIN, reverts="r2")],
    WAITING.id: [audit_row(4, WAITING)],
    OPEN.id: [],
    GONE.id: [audit_row(5, GONE)],
}
RECS = {r.id: r for r in (MOVE, PIN, WAITING, OPEN)}


def advisor_api(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
    if path == "/api/v1/recommendations":
        listed = [{**r.to_dict(), "first_seen": 1.0} for r in RECS.values()]
        report = Report(RunInfo("t", "http://prometheus:9090", "1h", ("test",), 0.05), (), ())
        return 200, {
            **report.to_dict(),
            "recommendations": listed,
            "service": {"last_error": None},
        }
    if path == "/api/v1/audit":
        wanted = params.get("recommendation")
        return 200, {
            "actions": [
                row for rec_id, rows in AUDIT.items() if wanted in (None, rec_id) for row in rows
            ],
            "verifications": [
                v.to_dict() for rec_id, v in VERIFICATIONS.items() if wanted in (None, rec_id)
            ],
        }
    rec_id = path.removeprefix("/api/v1/recommendations/")
    if rec_id in RECS:
        verification = VERIFICATIONS.get(rec_id)
        return 200, {
            **RECS[rec_id].to_dict(),
            "first_seen": 1.0,
            "state": "applied",
            "audit": AUDIT[rec_id],
            "verification": verification.to_dict() if verification else None,
        }
    return 404, {"error": f"no route {method} {path}"}


def text_of(component: Any) -> str:
    """Every string a Dash component tree shows, in order, one per line."""
    if component is None:
        return ""
    if isinstance(component, str | int | float):
        return str(component)
    if isinstance(component, list | tuple):
        return "\n".join(text_of(c) for c in component)
    return text_of(getattr(component, "children", None))


@pytest.fixture(scope="module")
def advisor() -> Iterator[AdvisorClient]:
    with FakeApi(advisor_api) as api:
        yield AdvisorClient(api.url)


@pytest.fixture(scope="module")
def rows(advisor: AdvisorClient) -> list[dict[str, Any]]:
    table, _selected, messages, _audit = table_view(advisor, None, None, None)
    assert not messages
    return list(table)


def detail(advisor: AdvisorClient, rows: list[dict[str, Any]], rec_id: str) -> str:
    [index] = [i for i, r in enumerate(rows) if r["id"] == rec_id]
    shown, _apply_off, _revert_off = detail_view(advisor, Access(), [index], rows)
    return text_of(shown)


def test_the_table_shows_each_applied_recommendations_verdict(
    rows: list[dict[str, Any]],
) -> None:
    verdicts = {r["id"]: (r["status"], r["verdict"]) for r in rows}
    assert verdicts == {
        MOVE.id: ("applied", "paid"),
        PIN.id: ("reverted", "harmful"),
        WAITING.id: ("applied", "pending"),
        OPEN.id: ("open", ""),
        GONE.id: ("applied", "paid"),
    }


def test_a_paid_job_move_shows_its_gain_and_progress(
    advisor: AdvisorClient, rows: list[dict[str, Any]]
) -> None:
    text = detail(advisor, rows, MOVE.id)
    assert "What the advice did" in text
    assert "paid: the change gained what it was meant to" in text
    assert "measured gain +30.0% against an estimated 25.0%" in text
    assert "progress signal\n100\n130" in text
    assert "SM active\n40.0%\n60.0%" in text
    assert "link traffic (PCIe + NVLink)\n2 GB/s\n3 GB/s" in text
    assert "verified 2026-09-21 " in text
    assert "reverted: no" in text and "remote memory share" not in text


def test_a_harmful_pin_shows_it_was_reverted(
    advisor: AdvisorClient, rows: list[dict[str, Any]]
) -> None:
    text = detail(advisor, rows, PIN.id)
    assert "harmful: the change made things worse" in text
    assert "measured gain: none measured (an estimated 40.0%)" in text
    assert "remote memory share\n10.0%\n50.0%" in text and "CPU cores busy\n4\n2" in text
    assert "reverted: yes" in text and "remote share rose; reverted (reverted)" in text


def test_a_pending_verification_has_no_after_figures_yet(
    advisor: AdvisorClient, rows: list[dict[str, Any]]
) -> None:
    text = detail(advisor, rows, WAITING.id)
    assert "pending: not judged yet" in text
    assert "remote memory share\n30.0%\n-" in text
    assert "verified not yet" in text and "reverted: no" in text


def test_an_open_recommendation_has_nothing_to_verify(
    advisor: AdvisorClient, rows: list[dict[str, Any]]
) -> None:
    text = detail(advisor, rows, OPEN.id)
    assert "What the advice did" in text and "not applied: nothing to verify yet" in text


def test_one_gone_from_the_report_still_shows_what_it_did(
    advisor: AdvisorClient, rows: list[dict[str, Any]]
) -> None:
    """Applying a recommendation usually removes it from the next report: its verification
    comes from the audit log.
    """
    text = detail(advisor, rows, GONE.id)
    assert "no longer in the latest report" in text
    assert "paid: the change gained what it was meant to" in text
    assert "remote memory share\n60.0%\n10.0%" in text and "reverted: no" in text


def test_a_release_shows_the_gpus_it_freed_and_others_reused() -> None:
    """Read back as the client reads it (a newer service's extra field ignored), then shown."""
    release = Verification(
        "rel-1", "release-idle", "n1", "nb", None, APPLIED_AT, Measurement(), Verdict.PAID,
        Measurement(gpus_free=2.0, gpus_reused=1.0), VERIFIED_AT, "freed and reused",
    )  # fmt: skip
    assert Verification.from_json(release.to_dict()) == release
    answer = {**release.to_dict(), "something_newer": 1}
    assert Verification.from_json(answer) == release
    # an advisor of an earlier release answers with the verdict's earlier name
    assert Verification.from_json({**answer, "verdict": "effective"}) == release
    text = text_of(what_it_did(Verification.from_json(answer), ()))
    assert "GPUs freed\n-\n2" in text and "GPUs reused by others\n-\n1" in text
    assert "paid: the change gained what it was meant to" in text and "verified 2026-09-21 " in text


def test_a_malformed_verification_is_a_bad_answer() -> None:
    bad = {**VERIFICATIONS[MOVE.id].to_dict(), "verdict": "splendid"}

    def answer(method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
        return 200, {"actions": [], "verifications": [bad]}

    with FakeApi(answer) as api, pytest.raises(AdvisorBadAnswer, match="verification"):
        AdvisorClient(api.url).audit_log()


def test_a_change_of_several_jobs_shows_each_jobs_part() -> None:
    jobs = (
        JobOutcome("f", "n8", "n8", 0.5, True, Measurement(sm_active=0.5),
                   Measurement(sm_active=0.6), 0.2, "SM active 50% -> 60% (+20%)"),
        JobOutcome("h", "n8", "n8", 0.5, False, Measurement(sm_active=0.5),
                   Measurement(sm_active=0.25), -0.5, "SM active 50% -> 25% (-50%)"),
        JobOutcome("aside", "n1", "n2", 0.0, False, Measurement(sm_active=0.5)),
    )  # fmt: skip
    item = replace(VERIFICATIONS[MOVE.id], verdict=Verdict.HARMFUL, measured_gain=-0.15, jobs=jobs)
    shown = text_of(what_it_did(item, []))
    assert "measured gain -15.0% against an estimated 25.0%" in shown
    assert "f (target)\n0.5\n+20.0%\nSM active 50% -> 60% (+20%)" in shown
    assert "h\n0.5\n-50.0%\nSM active 50% -> 25% (-50%)" in shown
    assert "aside\nharm only\n-\n-" in shown
    # a change of one job shows no such table
    assert "harm only" not in text_of(what_it_did(VERIFICATIONS[MOVE.id], []))


def test_a_clearing_shows_the_job_it_cleared_for_and_the_gpus_each_moved_job_freed() -> None:
    jobs = (
        JobOutcome("dp", "g-01", "g-01", 1.0, True, Measurement(sm_active=0.4),
                   Measurement(sm_active=0.6), 0.5, "runs on the freed GPUs: g-01 GPUs [0, 1]"),
        JobOutcome("vision", "g-01", "g-03", 0.0, False, Measurement(sm_active=0.5),
                   Measurement(sm_active=0.5), 0.0, "SM active 50% -> 50% (+0%)",
                   from_gpus=(0, 1)),
    )  # fmt: skip
    item = replace(VERIFICATIONS[MOVE.id], measured_gain=0.5, jobs=jobs, made_for="dp")
    shown = text_of(what_it_did(item, []))
    assert "dp (cleared for)\n1\n+50.0%\nruns on the freed GPUs: g-01 GPUs [0, 1]" in shown
    assert "vision (freed g-01 GPUs [0, 1])\nharm only\n+0.0%" in shown
    assert "(target)" not in shown
