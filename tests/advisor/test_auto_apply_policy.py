"""The automatic loop's policy file, its blackout windows and its limits, without a service."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from toposcope.advisor.autoapply.config import AutoApplyPolicy, Scope, load_policy, parse_policy
from toposcope.advisor.autoapply.decisions import APPLIED, Decision
from toposcope.advisor.autoapply.limits import WorkloadScope, refusal
from toposcope.advisor.label_selector import parse_selector
from toposcope.advisor.recommendations import make_recommendation
from toposcope.errors import ConfigError
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest

FULL = """\
kinds: [pin, place]
min_confidence: 0.7
min_gain: 0.2
max_risk: low
include:
  namespaces: [train]
  labels: "team=ml"
exclude:
  labels: "canary"
limits:
  per_node: 2
  per_namespace: 3
  per_hour: 4
  cooldown: 30m
blackouts:
  - {name: office, days: [mon, fri], from: "08:00", to: "18:00", timezone: Europe/Berlin}
  - {cron: "0 22 * * fri", duration: 60h}
dry_run_first: false
kill_switch_file: /run/stop-auto
"""


def at(text: str, zone: str = "UTC") -> float:
    """Unix seconds of local time ``text`` (ISO) in ``zone``."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def test_a_full_policy_reads_back() -> None:
    policy = parse_policy(FULL, "auto.yaml")
    assert policy.kinds == frozenset({"pin", "place"})
    assert (policy.min_confidence, policy.min_gain, policy.max_risk) == (0.7, 0.2, "low")
    assert policy.include.namespaces == frozenset({"train"})
    assert (policy.per_node, policy.per_namespace, policy.per_hour) == (2, 3, 4)
    assert policy.cooldown == 1800
    assert [b.label for b in policy.blackouts] == ["office", "blackouts[1]"]
    assert policy.dry_run_first is False and policy.kill_switch_file == Path("/run/stop-auto")
    assert parse_policy("", "empty.yaml") == AutoApplyPolicy(source="empty.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kinds: [pin]\nmin_confidance: 0.5\n", "auto.yaml:2: min_confidance: unknown key"),
        ("kinds: [release-idle]\n", "auto.yaml:1: kinds: release-idle is never applied"),
        ("kinds: [migrate-job]\n", "auto.yaml:1: kinds: migrate-job is never applied"),
        ("kinds: [pin, pim]\n", "auto.yaml:1: kinds: unknown kind 'pim'"),
        ("min_confidence: 1.5\n", "auto.yaml:1: min_confidence: must be between 0 and 1"),
        ("limits:\n  per_hour: -1\n", "auto.yaml:2: limits.per_hour: must be 0 or more"),
        ("limits:\n  cooldown: soon\n", "auto.yaml:2: limits.cooldown: 'soon' is not"),
        ("max_risk: 1\n", "auto.yaml:1: max_risk: must be a string"),
        ("min_gain: 0.1\nmin_gain: 0.2\n", "auto.yaml:2: min_gain: duplicate key"),
        (
            "blackouts:\n  - {from: '08:00', to: '18:00', timezone: Mars/Base}\n",
            "auto.yaml:2: blackouts[0].timezone: unknown time zone 'Mars/Base'",
        ),
        (
            "blackouts:\n  - {cron: '0 25 * * *', duration: 1h}\n",
            "auto.yaml:2: blackouts[0].cron: hour: 25 is not within 0-23",
        ),
        (
            "blackouts:\n  - {cron: '0 22 * * fri'}\n",
            "auto.yaml:2: blackouts[0]: a cron window needs a duration",
        ),
        (
            "blackouts:\n  - {days: [mon, funday], from: '08:00', to: '18:00'}\n",
            "auto.yaml:2: blackouts[0].days[1]: 'funday' is not a day",
        ),
        ("include:\n  labels: 'a in (b'\n", "auto.yaml:2: include.labels:"),
        ("dry_run_first: maybe\n", "auto.yaml:1: dry_run_first: must be true or false"),
        ("kinds: [pin\n", "auto.yaml:2: not valid YAML"),
    ],
)
def test_a_bad_policy_names_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "auto.yaml")
    assert str(caught.value).startswith(message), str(caught.value)


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_policy(tmp_path / "missing.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_policy(tmp_path / "bin.yaml")


def test_a_time_range_is_local_and_runs_past_midnight() -> None:
    policy = parse_policy(
        "blackouts:\n  - {days: [fri], from: '22:00', to: '06:00', timezone: Europe/Berlin}\n",
        "night.yaml",
    )
    [night] = policy.blackouts
    berlin = "Europe/Berlin"
    assert night.active(at("2026-11-27T22:30", berlin))  # Friday night
    assert night.active(at("2026-11-28T05:59", berlin))  # into Saturday morning
    assert not night.active(at("2026-11-28T06:00", berlin))
    assert not night.active(at("2026-11-27T21:59", berlin))
    assert not night.active(at("2026-11-26T23:00", berlin))  # a Thursday
    # 22:30 in Berlin is 21:30 UTC in winter: the zone decides, not UTC
    assert night.active(at("2026-11-27T21:30"))


def test_a_cron_window_lasts_its_duration() -> None:
    policy = parse_policy("blackouts:\n  - {cron: '0 22 * * 5', duration: 2h}\n", "c.yaml")
    [weekend] = policy.blackouts
    assert weekend.active(at("2026-11-27T22:00"))  # a Friday, as it fires
    assert weekend.active(at("2026-11-27T23:59"))
    assert not weekend.active(at("2026-11-28T00:00"))  # two hours later
    assert not weekend.active(at("2026-11-27T21:59"))
    assert not weekend.active(at("2026-11-26T22:30"))  # Thursday
    assert datetime.fromtimestamp(at("2026-11-27T22:00"), UTC).weekday() == 4


def pin(node: str = "n1", workload: str = "train", **fields: object) -> Recommendation:
    """A pin recommendation as the numa-pinning policy writes one."""
    values: dict[str, object] = {"estimated_gain": 0.3, "confidence": 0.9, "risk": Risk.LOW}
    values.update(fields)
    return make_recommendation(
        kind=RecommendationKind.PIN,
        policy="numa-pinning",
        target=Target(node, workload),
        summary=f"pin {workload}",
        current={},
        proposed={"numa_node": 0},
        evidence=[Evidence("toposcope_workload_cpu_seconds_total", {"workload": workload}, 1.0)],
        gain_model="test",
        actions=[ActionRequest("", ActionKind.PIN, workload, node, [0, 1], [0])],
        **values,  # type: ignore[arg-type]
    )


def acted(node: str, workload: str, at_s: float, group: str = "") -> Decision:
    """An earlier automatic action."""
    return Decision(at_s, f"pin-{workload}", "pin", node, workload, group, APPLIED, "")


def test_the_refusals_in_order() -> None:
    policy = AutoApplyPolicy(
        min_confidence=0.8,
        min_gain=0.1,
        include=Scope(namespaces=frozenset({"train"})),
        exclude=Scope(labels=parse_selector("canary")),
        per_node=1,
        per_namespace=2,
        per_hour=3,
        cooldown=600,
    )
    inside = WorkloadScope(namespace="train", labels={"namespace": "train"})
    now = 100_000.0
    assert refusal(pin(), inside, policy, [], now) == ("", "")
    assert refusal(pin(confidence=0.5), inside, policy, [], now)[0] == "confidence"
    assert refusal(pin(estimated_gain=0.05), inside, policy, [], now)[0] == "gain"
    assert refusal(pin(risk=Risk.HIGH), inside, policy, [], now)[0] == "risk"
    outside = WorkloadScope(namespace="web", labels={"namespace": "web"})
    code, text = refusal(pin(), outside, policy, [], now)
    assert (code, text) == ("scope", "namespace web is not included")
    canary = WorkloadScope(namespace="train", labels={"namespace": "train", "canary": ""})
    assert refusal(pin(), canary, policy, [], now) == ("excluded", "excluded: its labels")
    irreversible = frozenset({ActionKind.PIN})
    assert refusal(pin(), inside, policy, [], now, irreversible)[0] == "irreversible"
    assert refusal(pin(), inside, policy, [acted("n1", "train", now - 599)], now)[0] == "cooldown"
    assert refusal(pin(), inside, policy, [acted("n1", "other", now - 10)], now)[0] == "limit-node"
    two = [acted("n2", "a", now - 10, "train"), acted("n3", "b", now - 10, "train")]
    assert refusal(pin(), inside, policy, two, now)[0] == "limit-namespace"
    three = [acted(f"n{i + 2}", "w", now - 100) for i in range(3)]
    assert refusal(pin(), inside, policy, three, now)[0] == "limit-hour"
    # an hour later the same history no longer counts
    assert refusal(pin(), inside, policy, three, now + 3600)[0] == ""


def test_flags_cannot_widen_past_the_rules(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="never applied automatically"):
        AutoApplyPolicy(kinds=frozenset({"release-idle"}))
    with pytest.raises(ConfigError, match="min_confidence must be between 0 and 1"):
        AutoApplyPolicy(min_confidence=2.0)
