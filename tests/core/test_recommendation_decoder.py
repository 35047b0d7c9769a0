"""The recommendation contract's decoder: what it accepts, and every malformed or unknown
input refused with an error that says where and what."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import FIXTURES
from toposcope.report.decoder import (
    decode_action,
    decode_recommendation,
    decode_report,
    report_from_json,
)
from toposcope.report.recommendation import RecommendationError, RecommendationKind
from toposcope.rm import ActionKind

REPORT = json.loads((FIXTURES / "advisor" / "report.json").read_text())


def report(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    """A copy of the committed report with ``change`` applied to it."""
    data: dict[str, Any] = copy.deepcopy(REPORT)
    change(data)
    return data


def pin(data: dict[str, Any]) -> dict[str, Any]:
    """The report's first ``pin`` recommendation."""
    return next(r for r in data["recommendations"] if r["kind"] == "pin")


def test_a_minimal_report_gets_the_defaults() -> None:
    run = {"started_at": "t", "source": "s", "window": "1h", "policies": [], "min_gain": 0.05}
    decoded = decode_report({"schema_version": "1", "run": run})
    assert decoded.recommendations == () and decoded.notes == ()
    assert decoded.run.settings == {} and decoded.run.duration_seconds == 0.0


def test_fields_an_api_adds_around_the_contract_are_let_through_when_named() -> None:
    served = report(lambda d: d.update(service={"last_error": None}))
    for rec in served["recommendations"]:
        rec["first_seen"] = 1.0
    with pytest.raises(RecommendationError, match="report: unknown field"):
        decode_report(served)
    decoded = decode_report(served, extra={"service"}, recommendation_extra={"first_seen"})
    assert len(decoded.recommendations) == len(REPORT["recommendations"])
    one = decode_recommendation({**pin(REPORT), "state": "open"}, extra={"state"})
    assert one.kind is RecommendationKind.PIN


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("schema_version"), r"^report: missing schema_version$"),
        (
            lambda d: d.update(schema_version="2"),
            r"schema_version '2' is not supported \(this version of toposcope reads '1'\)",
        ),
        (lambda d: d.update(schema_version=1), r"schema_version 1 is not supported"),
        (lambda d: d.update(extra=1), r"^report: unknown field\(s\) extra$"),
        (lambda d: d["run"].pop("window"), r"^run: missing window$"),
        (lambda d: d.update(recommendations={}), r"^recommendations: expected a list, got an"),
        (
            lambda d: d["recommendations"][0].update(kind="teleport"),
            r"^recommendations\[0\]\.kind: 'teleport' is not one of pin, migrate-memory",
        ),
        (
            lambda d: d["recommendations"][0].update(estimated_gain="0.5"),
            r"^recommendations\[0\]\.estimated_gain: expected a finite number, got \"0\.5\"",
        ),
        (
            lambda d: d["recommendations"][0].update(estimated_gain=True),
            r"estimated_gain: expected a finite number, got true",
        ),
        (
            lambda d: d["recommendations"][0].update(confidence=1.5),
            r"^recommendations\[0\]\.confidence: 1\.5 is outside 0\.0 to 1\.0$",
        ),
        (
            lambda d: d["recommendations"][0]["target"].update(gpus=[0, "1"]),
            r"^recommendations\[0\]\.target\.gpus\[1\]: expected a whole number >= 0",
        ),
        (
            lambda d: d["recommendations"][0]["target"].update(node=""),
            r"^recommendations\[0\]\.target\.node: must not be empty$",
        ),
        (
            lambda d: d["recommendations"][0]["evidence"][0]["labels"].update(gpu=0),
            r"^recommendations\[0\]\.evidence\[0\]\.labels\.gpu: expected a string, got 0$",
        ),
        (
            lambda d: d["recommendations"][0]["actions"][0].update(kind="reboot"),
            r"^recommendations\[0\]\.actions\[0\]: kind: Input should be 'pin',",
        ),
        (
            lambda d: pin(d)["actions"][0].update(kind="release"),
            r"^recommendations\[\d\]\.actions: a pin recommendation cannot be applied by "
            r"release \(it takes migrate-memory, pin\)$",
        ),
        (
            lambda d: pin(d).update(severity="dire"),
            r"\.severity: 'dire' is not one of ok, info, warning, critical$",
        ),
        (lambda d: pin(d).update(current=[]), r"\.current: expected an object, got a list$"),
        (lambda d: d["notes"].append("text"), r"^notes\[3\]: expected an object, got \"text\"$"),
    ],
)
def test_malformed_or_unknown_input_is_refused_naming_where(
    change: Callable[[dict[str, Any]], object], message: str
) -> None:
    with pytest.raises(RecommendationError, match=message):
        decode_report(report(change))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "the report is not JSON"),
        ('{"schema_version": "1", "run": NaN}', "NaN is not a JSON number"),
        ("[]", "report: expected an object, got a list"),
    ],
)
def test_text_that_is_not_a_report(text: str, message: str) -> None:
    with pytest.raises(RecommendationError, match=message):
        report_from_json(text)


def test_an_action_is_decoded_strictly() -> None:
    action = decode_action({"request_id": "r-0", "kind": "pin", "workload": "w", "cpus": [1]})
    assert (action.kind, action.cpus, action.node, action.gpus) == (ActionKind.PIN, [1], None, [])
    with pytest.raises(RecommendationError, match=r"^action: priority: unknown field$"):
        decode_action({"request_id": "r", "kind": "pin", "workload": "w", "priority": 1})
    with pytest.raises(RecommendationError, match=r"^action: cpus\.0: Input should be greater"):
        decode_action({"request_id": "r", "kind": "pin", "workload": "w", "cpus": [-1]})
