"""Recommendations: stable ids, JSON round trip, conflicts, the min-gain filter."""

from __future__ import annotations

import json

from tests.advisor.builders import GIB, cluster, pcie4, pcie8, workload
from toposcope.advisor.policies import build
from toposcope.advisor.recommendations import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Report,
    Risk,
    RunInfo,
    Severity,
    Target,
    filter_min_gain,
    make_recommendation,
    recommendation_id,
    resolve_conflicts,
    severity_for,
)
from toposcope.advisor.runner import advise
from toposcope.resources import ActionKind, ActionRequest


def rec(
    gain: float,
    claims: list[str],
    node: str = "n1",
    name: str = "w",
    kind: RecommendationKind = RecommendationKind.PLACE,
) -> Recommendation:
    return make_recommendation(
        kind=kind,
        policy="test",
        target=Target(node, name),
        summary=f"{name} {gain}",
        current={},
        proposed={"gain": gain, "claims": claims},
        evidence=[Evidence("toposcope_gpu_up", {"gpu": "0"}, 1.0)],
        estimated_gain=gain,
        gain_model="test",
        confidence=0.5,
        risk=Risk.LOW,
        actions=[ActionRequest("", ActionKind.PLACE, name, node, gpus=[0])],
        claims=claims,
    )


def test_ids_are_stable_and_depend_on_kind_target_and_proposal() -> None:
    target = Target("n1", "w")
    a = recommendation_id(RecommendationKind.PIN, target, {"mems": [0], "cpus": "0-7"})
    b = recommendation_id(RecommendationKind.PIN, target, {"cpus": "0-7", "mems": [0]})
    assert a == b and a.startswith("pin-") and len(a) == len("pin-") + 12
    assert a != recommendation_id(RecommendationKind.PIN, target, {"mems": [1], "cpus": "0-7"})
    assert a != recommendation_id(RecommendationKind.PIN, Target("n2", "w"), {"mems": [0]})
    assert a == "pin-0423e513bf14"  # must not change between releases: ids are tracked


def test_same_situation_same_ids_across_runs() -> None:
    def run() -> list[str]:
        model = cluster(
            [pcie4(), pcie8()],
            [
                workload("train", cpu={1: 4.0}, memory={1: 8 * GIB}, gpus=[0]),
                workload("job", node="n8", gpus=[0, 4]),
            ],
        )
        return sorted(r.id for r in advise(model, build(), min_gain=0).recommendations)

    first, second = run(), run()
    assert first == second and len(first) == 2


def test_action_request_ids_follow_the_recommendation() -> None:
    r = rec(0.3, ["gpu:n1/0"])
    assert [a.request_id for a in r.actions] == [f"{r.id}-0"]
    assert r.actions[0].reason == r.summary


def test_json_round_trip() -> None:
    r = rec(0.3, ["gpu:n1/0"])
    report = Report(RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("test",), 0.05), (r,))
    text = report.to_json()
    assert Report.from_json(text) == report
    data = json.loads(text)
    assert data["recommendations"][0]["actions"][0]["kind"] == "place"
    assert data["recommendations"][0]["severity"] == "critical"


def test_conflicts_keep_the_higher_gain_and_note_the_other() -> None:
    low, high, other = (
        rec(0.1, ["gpu:n1/0"], name="a"),
        rec(0.4, ["gpu:n1/0"], name="b"),
        rec(0.2, ["gpu:n1/1"], name="c"),
    )
    kept, notes = resolve_conflicts([low, high, other])
    assert [r.id for r in kept] == [high.id, other.id]
    [note] = notes
    assert low.id in note.reason and high.id in note.reason and "gpu:n1/0" in note.reason


def test_min_gain_filter_notes_how_many_per_policy() -> None:
    low = rec(0.01, [], kind=RecommendationKind.PIN)
    kept, notes = filter_min_gain([low, rec(0.2, [], name="x", kind=RecommendationKind.PIN)], 0.05)
    assert len(kept) == 1
    assert notes[0].reason == "1 recommendation(s) below --min-gain 0.05 left out"


def test_placing_a_pending_job_is_kept_whatever_its_gain_over_first_fit() -> None:
    """First fit would pick the same GPUs (gain 0), but nothing places a pending job."""
    kept, notes = filter_min_gain([rec(0.0, [], name="queued")], 0.05)
    assert [r.target.workload for r in kept] == ["queued"] and notes == []


def test_severity_thresholds() -> None:
    assert severity_for(0.3) == Severity.CRITICAL
    assert severity_for(0.1) == Severity.WARNING
    assert severity_for(0.05) == Severity.INFO
    assert severity_for(0.0) == Severity.OK
