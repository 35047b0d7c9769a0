"""The recording and alerting rules in alerts/*.rules.yml.

promtool checks and unit-tests them (alerts/tests/*.test.yml); the tests here check what
promtool does not: every alert and recording rule is covered by those unit tests, every alert
carries the labels and annotations the runbooks and Alertmanager rely on, every metric an
expression names exists (catalogue, recording rule or ``up``), and recording rule names
follow ``level:metric:operations``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import promql_parser as pp
import pytest
import yaml

from tests.procs import require_binary
from toposcope.catalogue import CATALOGUE

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "alerts"
RULE_FILES = sorted(ALERTS.glob("*.rules.yml"))
TEST_FILES = sorted((ALERTS / "tests").glob("*.test.yml"))
RUNBOOKS = REPO / "docs" / "runbooks.md"
RUNBOOK_BASE = "https://github.com/toposcope/toposcope/blob/main/docs/runbooks.md"
SEVERITIES = {"critical", "warning", "info"}
# Series Prometheus makes itself that rules may use besides the catalogue's.
PROMETHEUS_SERIES = {"up"}
# Labels Prometheus attaches to every scraped series.
TARGET_LABELS = {"job", "instance"}
# Labels that say what an alert is about: its text must name each one its alert carries.
IDENTITY_LABELS = {
    "instance",
    "gpu",
    "xid",
    "workload",
    "numa_node",
    "package",
    "peer_package",
    "collector",
    "recommendation",
    "kind",
}
ALERT_NAME = re.compile(r"^Toposcope[A-Z][A-Za-z0-9]+$")
RECORD_NAME = re.compile(
    r"^(?P<level>[a-z][a-z0-9_]*):(?P<metric>[a-z][a-z0-9_]*):(?P<operations>[a-z][a-z0-9_]*)$"
)


@dataclass(frozen=True)
class Rule:
    """One rule of a rule file: its file, group and YAML mapping."""

    file: Path
    group: str
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.body.get("alert") or self.body["record"])

    @property
    def expr(self) -> str:
        return str(self.body["expr"])

    @property
    def is_alert(self) -> bool:
        return "alert" in self.body

    def __str__(self) -> str:
        return f"{self.file.name}:{self.group}:{self.name}"


@cache
def load_yaml(path: Path) -> dict[str, Any]:
    """A YAML file's top-level mapping (parsed once; do not modify it)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


@cache
def all_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            rules.extend(Rule(path, str(group["name"]), body) for body in group["rules"])
    return tuple(rules)


def alerts() -> list[Rule]:
    return [rule for rule in all_rules() if rule.is_alert]


def records() -> list[Rule]:
    return [rule for rule in all_rules() if not rule.is_alert]


def metric_names(expr: str) -> set[str]:
    """Every metric name selected in a PromQL expression (also inside ranges, subqueries)."""
    names: set[str] = set()

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            if node.name:
                names.add(node.name)
            else:
                names.update(
                    m.value
                    for m in node.matchers.matchers
                    if m.name == "__name__" and m.op == pp.MatchOp.Equal
                )

    pp.walk(pp.parse(expr), pre_visit=visit)
    return names


def selectors(expr: str) -> Iterator[pp.VectorSelector]:
    """Every vector selector of a PromQL expression."""
    found: list[pp.VectorSelector] = []

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            found.append(node)

    pp.walk(pp.parse(expr), pre_visit=visit)
    return iter(found)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading (lower case, punctuation dropped, - for space)."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


@cache
def runbook_headings() -> tuple[tuple[int, str], ...]:
    """(level, text) of every heading of docs/runbooks.md outside fenced code."""
    headings: list[tuple[int, str]] = []
    fenced = False
    for line in RUNBOOKS.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = re.match(r"^(#{1,6}) +(.+?) *#* *$", line)
        if match and not fenced:
            headings.append((len(match.group(1)), match.group(2)))
    return tuple(headings)


def resolved_rule_files(test_file: Path) -> set[Path]:
    """The rule files a promtool test file loads (relative to the test file)."""
    return {
        (test_file.parent / name).resolve() for name in load_yaml(test_file).get("rule_files", [])
    }


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("promtool"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- promtool -------------------------------------------------------------------------


def test_rule_and_test_files_exist() -> None:
    assert RULE_FILES, "no alerts/*.rules.yml"
    assert TEST_FILES, "no alerts/tests/*.test.yml"
    assert alerts(), "no alerting rules"
    assert records(), "no recording rules"


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", *(str(p.relative_to(REPO)) for p in RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(test_file: Path) -> None:
    result = promtool("test", "rules", str(test_file.relative_to(REPO)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_rule_file_has_its_test_file() -> None:
    for rule_file in RULE_FILES:
        test_file = ALERTS / "tests" / rule_file.name.replace(".rules.yml", ".test.yml")
        assert test_file.exists(), f"{rule_file.name} has no {test_file.name}"
        assert rule_file.resolve() in resolved_rule_files(test_file), (
            f"{test_file.name} does not load {rule_file.name}"
        )


def test_one_group_per_rule_file() -> None:
    for path in RULE_FILES:
        groups = load_yaml(path)["groups"]
        assert len(groups) == 1, f"{path.name}: one rule group per file, so one test file each"


# --- test coverage -------------------------------------------------------------------------


@cache
def coverage() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]]]:
    """Per alert: test files where it fires, where it stays quiet; per record: where queried.

    A case counts only in a test file that loads the rule's own file: elsewhere promtool would
    accept an empty exp_alerts for an alert it does not know.
    """
    defined = {rule.name: rule.file.resolve() for rule in all_rules()}
    fires: dict[str, set[str]] = {}
    quiet: dict[str, set[str]] = {}
    queried: dict[str, set[str]] = {}
    for test_file in TEST_FILES:
        loaded = resolved_rule_files(test_file)
        for case in load_yaml(test_file)["tests"]:
            for check in case.get("alert_rule_test", []):
                name = str(check["alertname"])
                if defined.get(name) not in loaded:
                    continue
                target = fires if check.get("exp_alerts") else quiet
                target.setdefault(name, set()).add(test_file.name)
            for check in case.get("promql_expr_test", []):
                for name in metric_names(str(check["expr"])):
                    if defined.get(name) in loaded:
                        queried.setdefault(name, set()).add(test_file.name)
    return fires, quiet, queried


@pytest.mark.parametrize("rule", alerts(), ids=str)
def test_alert_has_firing_and_quiet_cases(rule: Rule) -> None:
    fires, quiet, _ = coverage()
    assert rule.name in fires, f"no promtool case where {rule.name} fires"
    assert rule.name in quiet, f"no promtool case where {rule.name} does not fire"


@pytest.mark.parametrize("rule", records(), ids=str)
def test_recording_rule_is_queried_in_tests(rule: Rule) -> None:
    _, _, queried = coverage()
    assert rule.name in queried, f"no promql_expr_test queries {rule.name}"


def test_firing_cases_give_exact_labels_and_annotations() -> None:
    for test_file in TEST_FILES:
        for case in load_yaml(test_file)["tests"]:
            for check in case.get("alert_rule_test", []):
                for alert in check.get("exp_alerts") or []:
                    where = f"{test_file.name}: {check['alertname']} at {check['eval_time']}"
                    labels = alert.get("exp_labels", {})
                    assert labels.get("severity") in SEVERITIES, where
                    assert "instance" in labels, where
                    annotations = alert.get("exp_annotations", {})
                    assert {"summary", "description", "runbook_url"} <= annotations.keys(), where


# --- alert metadata -------------------------------------------------------------------------


def test_names_are_unique() -> None:
    names = [rule.name for rule in all_rules()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("rule", alerts(), ids=str)
def test_alert_metadata(rule: Rule) -> None:
    assert ALERT_NAME.match(rule.name), f"{rule.name}: alert names are Toposcope<CamelCase>"
    labels = rule.body.get("labels", {})
    assert labels.get("severity") in SEVERITIES, f"{rule}: severity {labels.get('severity')!r}"
    annotations = rule.body.get("annotations", {})
    for key in ("summary", "description", "runbook_url"):
        assert str(annotations.get(key, "")).strip(), f"{rule}: no {key} annotation"


@pytest.mark.parametrize("rule", alerts(), ids=str)
def test_alert_text_names_what_it_is_about(rule: Rule) -> None:
    """Summary and description name the node, and the GPU, workload, ... the alert is about.

    Which labels an alert has is read from its firing cases in the promtool tests.
    """
    annotations = rule.body["annotations"]
    text = f"{annotations['summary']} {annotations['description']}"
    kept: set[str] = set()
    for test_file in TEST_FILES:
        for case in load_yaml(test_file)["tests"]:
            for check in case.get("alert_rule_test", []):
                if check["alertname"] == rule.name:
                    for alert in check.get("exp_alerts") or []:
                        kept |= set(alert.get("exp_labels", {})) & IDENTITY_LABELS
    assert "instance" in kept, f"{rule}: no firing case with an instance label"
    for label in sorted(kept):
        assert f"$labels.{label}" in text, f"{rule}: has label {label} but does not name it"


@pytest.mark.parametrize("rule", alerts(), ids=str)
def test_runbook_url_points_at_a_runbook_section(rule: Rule) -> None:
    url = str(rule.body["annotations"]["runbook_url"])
    base, _, anchor = url.partition("#")
    assert base == RUNBOOK_BASE, f"{rule}: runbook_url must start with {RUNBOOK_BASE}#"
    assert anchor == rule.name.lower(), f"{rule}: anchor should be #{rule.name.lower()}"
    anchors = {github_anchor(text) for _, text in runbook_headings()}
    assert anchor in anchors, f"docs/runbooks.md has no heading for #{anchor}"


def test_runbook_sections_are_the_alerts() -> None:
    sections = {text for level, text in runbook_headings() if level == 2 and ALERT_NAME.match(text)}
    assert sections == {rule.name for rule in alerts()}


# --- expressions -------------------------------------------------------------------------


@pytest.mark.parametrize("rule", all_rules(), ids=str)
def test_expression_names_only_known_metrics(rule: Rule) -> None:
    recorded = {r.name for r in records()}
    known = set(CATALOGUE) | recorded | PROMETHEUS_SERIES
    unknown = metric_names(rule.expr) - known
    assert not unknown, f"{rule}: not in the catalogue, not a recording rule: {sorted(unknown)}"


@pytest.mark.parametrize("rule", all_rules(), ids=str)
def test_expression_matches_only_known_labels(rule: Rule) -> None:
    for selector in selectors(rule.expr):
        spec = CATALOGUE.get(selector.name or "")
        if spec is None:
            continue
        allowed = set(spec.labels) | TARGET_LABELS | {"__name__"}
        for matcher in selector.matchers.matchers:
            assert matcher.name in allowed, (
                f"{rule}: {spec.name} has no label {matcher.name!r} (labels: {spec.labels})"
            )


def test_recording_rules_are_defined_before_use_in_their_group() -> None:
    recorded = {r.name: r for r in records()}
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            seen: set[str] = set()
            for body in group["rules"]:
                rule = Rule(path, str(group["name"]), body)
                for name in metric_names(rule.expr) & recorded.keys():
                    assert name in seen, (
                        f"{rule} uses {name}, which is not recorded earlier in its group "
                        "(other groups' rules lag by an evaluation or more)"
                    )
                if not rule.is_alert:
                    seen.add(rule.name)


def label_words() -> set[str]:
    return {label for spec in CATALOGUE.values() for label in spec.labels} | TARGET_LABELS


def is_label_list(level: str) -> bool:
    """True when ``level`` is label names joined by ``_`` (``workload_gpu``, ``numa_node``)."""
    words = label_words()
    parts = level.split("_")
    reachable = [True] + [False] * len(parts)
    for end in range(1, len(parts) + 1):
        reachable[end] = any(
            reachable[start] and "_".join(parts[start:end]) in words for start in range(end)
        )
    return reachable[-1]


@pytest.mark.parametrize("rule", records(), ids=str)
def test_recording_rule_name(rule: Rule) -> None:
    match = RECORD_NAME.match(rule.name)
    assert match, f"{rule.name}: recording rules are named level:metric:operations"
    assert is_label_list(match["level"]), (
        f"{rule.name}: level {match['level']!r} should name the labels kept (or be 'instance')"
    )
    assert match["metric"].startswith("toposcope_"), f"{rule.name}: metric keeps its namespace"
    assert not match["metric"].endswith("_total"), f"{rule.name}: drop _total after rate()"
    assert "by (" not in rule.expr.replace("by(", "by ("), (
        f"{rule.name}: aggregate with without (...) so that target labels are kept"
    )


def test_metric_names_parser_sees_inside_ranges_and_name_matchers() -> None:
    expr = 'sum without (x) (rate(a_total[5m])) / on (job) group_left () {__name__="b"} and c'
    assert metric_names(expr) == {"a_total", "b", "c"}
