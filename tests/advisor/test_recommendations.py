"""Recommendations: stable ids, JSON round trip through the core decoder (the committed
fixture and the real ``toposcope advise --format json``), the kind/action table, conflicts,
the min-gain filter."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from tests.advisor.builders import GIB, cluster, pcie4, pcie8, workload
from tests.helpers import FIXTURES, REPO
from toposcope.advisor import cli as advise_cli
from toposcope.advisor.policies import build
from toposcope.advisor.recommendations import (
    conflict_value,
    filter_min_gain,
    make_recommendation,
    recommendation_id,
    resolve_conflicts,
    severity_for,
)
from toposcope.advisor.runner import advise
from toposcope.report.decoder import report_from_json
from toposcope.report.recommendation import (
    ACTIONS_BY_KIND,
    SCHEMA_VERSION,
    Evidence,
    Recommendation,
    RecommendationError,
    RecommendationKind,
    Report,
    Risk,
    RunInfo,
    Severity,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest

#: an action of each kind of recommendation that has one
ACTION_OF = {
    RecommendationKind.PIN: ActionKind.PIN,
    RecommendationKind.MIGRATE_MEMORY: ActionKind.MIGRATE_MEMORY,
    RecommendationKind.PLACE: ActionKind.PLACE,
    RecommendationKind.MIGRATE_JOB: ActionKind.MIGRATE,
    RecommendationKind.RELEASE_IDLE: ActionKind.RELEASE,
}


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
        actions=[ActionRequest("", ACTION_OF[kind], name, node, gpus=[0])],
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
    assert report_from_json(text) == report
    data = json.loads(text)
    assert data["schema_version"] == SCHEMA_VERSION == "1"
    assert data["recommendations"][0]["actions"][0]["kind"] == "place"
    assert data["recommendations"][0]["severity"] == "critical"


def test_the_committed_report_fixture_decodes_and_encodes_to_the_same_json() -> None:
    text = (FIXTURES / "advisor" / "report.json").read_text()
    report = report_from_json(text)
    kinds = {r.kind for r in report.recommendations}
    assert kinds == set(RecommendationKind) - {RecommendationKind.MIGRATE_MEMORY}
    assert json.loads(report.to_json()) == json.loads(text)


def test_the_advisors_json_output_round_trips_through_the_core_decoder(
    scrape_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="toposcope")
    advise_cli.add_arguments(parser)
    argv = ["--scrape", f"n1={scrape_file.as_uri()}", "--format", "json", "--min-gain", "0"]
    assert advise_cli.run(parser.parse_args(argv)) == 0
    printed = capsys.readouterr().out
    report = report_from_json(printed)
    assert report.recommendations and report.run.source.startswith("scrape:")
    assert json.loads(report.to_json()) == json.loads(printed)
    assert report_from_json(report.to_json()) == report


def test_every_kind_has_its_row_in_the_action_table() -> None:
    assert set(ACTIONS_BY_KIND) == set(RecommendationKind)
    assert ACTIONS_BY_KIND[RecommendationKind.CONFIG] == frozenset()
    for kind, action in ACTION_OF.items():
        assert action in ACTIONS_BY_KIND[kind]


def test_the_documented_action_table_is_the_code() -> None:
    text = (REPO / "docs" / "policies.md").read_text()
    table = text.split("| kind | actions |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    documented = {
        kind: set(re.findall(r"`([a-z-]+)`", actions))
        for kind, actions in re.findall(r"^\| `([a-z-]+)` \| (.*) \|$", table, re.MULTILINE)
    }
    assert documented == {str(k): {str(a) for a in v} for k, v in ACTIONS_BY_KIND.items()}


@pytest.mark.parametrize(
    ("kind", "action"),
    [
        (RecommendationKind.PIN, ActionKind.RELEASE),
        (RecommendationKind.RELEASE_IDLE, ActionKind.MIGRATE),
        (RecommendationKind.MIGRATE_JOB, ActionKind.PLACE),
        (RecommendationKind.CONFIG, ActionKind.PIN),
    ],
)
def test_actions_that_do_not_fit_the_kind_are_refused_when_built(
    kind: RecommendationKind, action: ActionKind
) -> None:
    with pytest.raises(RecommendationError, match=f"a {kind} recommendation cannot be applied by"):
        make_recommendation(
            kind=kind,
            policy="test",
            target=Target("n1", "w"),
            summary="s",
            current={},
            proposed={},
            evidence=[],
            estimated_gain=0.2,
            gain_model="test",
            confidence=0.5,
            risk=Risk.LOW,
            actions=[ActionRequest("", action, "w", "n1")],
        )


def test_every_policy_builds_actions_the_table_allows() -> None:
    model = cluster(
        [pcie4(), pcie8()],
        [
            workload("train", cpu={1: 4.0}, memory={1: 8 * GIB}, gpus=[0]),
            workload("job", node="n8", gpus=[0, 4]),
        ],
    )
    recs = advise(model, build(), min_gain=0).recommendations
    assert {r.kind for r in recs} >= {RecommendationKind.PIN, RecommendationKind.MIGRATE_JOB}
    for r in recs:
        assert {a.kind for a in r.actions} <= ACTIONS_BY_KIND[r.kind]


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
    assert severity_for(0.2) == Severity.CRITICAL
    assert severity_for(0.06) == Severity.WARNING
    assert severity_for(0.02) == Severity.INFO
    assert severity_for(0.0) == Severity.OK


def test_severity_follows_value_not_the_raw_gain() -> None:
    """A 30 % gain trusted at 0.5 is worth 0.15 (critical); the same gain needing a
    checkpoint-restore of a job and trusted at 0.3 is worth less (warning).
    """
    assert rec(0.3, []).severity == Severity.CRITICAL
    shaky = make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy="test",
        target=Target("n1", "w"),
        summary="move",
        current={},
        proposed={"gpus": [1]},
        evidence=[],
        estimated_gain=0.3,
        gain_model="test",
        confidence=0.3,
        risk=Risk.MEDIUM,
        actions=[ActionRequest("", ActionKind.MIGRATE, "w", "n1", gpus=[1])],
    )
    assert shaky.severity == Severity.WARNING
    assert conflict_value(shaky) < conflict_value(rec(0.3, []))


def test_a_move_costs_its_checkpoint_restore_in_the_ranking() -> None:
    """Equal gain and confidence: the pin (no stop) beats the move (a checkpoint-restore)."""
    move = rec(0.2, ["workload:n1/w"], kind=RecommendationKind.MIGRATE_JOB)
    pin = rec(0.2, ["workload:n1/w"], kind=RecommendationKind.PIN)
    kept, _ = resolve_conflicts([move, pin])
    assert [r.kind for r in kept] == ["pin"]


def test_calibration_can_turn_a_conflict_around() -> None:
    """A kind whose past estimates came out at a third of the truth loses to another."""
    pin = rec(0.3, ["workload:n1/w"], kind=RecommendationKind.PIN)
    memory = rec(0.2, ["workload:n1/w"], kind=RecommendationKind.MIGRATE_MEMORY)
    assert [r.kind for r in resolve_conflicts([pin, memory])[0]] == ["pin"]
    kept, _ = resolve_conflicts([pin, memory], calibration={"pin": 0.33})
    assert [r.kind for r in kept] == ["migrate-memory"]
