"""``toposcope advise`` options: exit codes with ``--fail-on``, filters, policy choice,
the PromQL selector's names, ``--scrape`` beside a sub-action and ``--dry-run``.
"""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.advisor.conftest import ExporterScrape
from tests.advisor.fakes import ExpositionPrometheus, FakeResourceManager, FakeServer, ok, vector
from toposcope.advisor import cli as advise_cli
from toposcope.advisor.advise_options import FAIL_ON
from toposcope.rm import Allocation

LABELS = {"job": "toposcope", "instance": "10.1.2.3:9400"}
RANK = ["ok", "info", "warning", "critical"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="toposcope advise")
    advise_cli.add_arguments(parser)
    return parser.parse_args(argv)


def invoke(argv: list[str]) -> int:
    code: int = advise_cli.run(parse(argv))
    return code


@pytest.fixture(scope="module")
def prometheus(exporter_scrape: ExporterScrape) -> Iterator[FakeServer]:
    with FakeServer(ExpositionPrometheus(exporter_scrape.text, LABELS)).run() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


def report_of(prometheus: FakeServer, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    assert invoke(["--prometheus", prometheus.url, "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_fail_on_exits_1_only_for_findings_at_or_above_the_level(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    report = report_of(prometheus, capsys)
    worst = max(RANK.index(r["severity"]) for r in report["recommendations"])
    for level, severity in FAIL_ON.items():
        code = invoke(["--prometheus", prometheus.url, "--format", "json", "--fail-on", level])
        assert code == (1 if worst >= RANK.index(severity) else 0), level
    assert invoke(["--prometheus", prometheus.url, "--fail-on", "low"]) == 1


def test_fail_on_without_findings_exits_0_and_a_bad_level_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with FakeServer(lambda r: ok(vector())).run() as fake:
        assert invoke(["--prometheus", fake.url, "--fail-on", "low"]) == 0
    with pytest.raises(SystemExit) as exit_info:
        parse(["--prometheus", "http://x", "--fail-on", "urgent"])
    assert exit_info.value.code == 2
    assert "--fail-on" in capsys.readouterr().err


def test_scrape_is_repeatable_and_leaves_the_action_word_alone() -> None:
    args = parse(["--scrape", "http://a/metrics", "--scrape", "b=http://b/metrics", "log"])
    assert args.scrape == ["http://a/metrics", "b=http://b/metrics"]
    assert args.advise_command == "log"
    args = parse(["--scrape", "http://x/metrics", "revert", "pin-123"])
    assert (args.scrape, args.advise_command, args.id) == (
        ["http://x/metrics"],
        "revert",
        "pin-123",
    )


def test_prometheus_selector_and_its_deprecated_alias(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse(["--prometheus-selector", 'job="a"']).selector == 'job="a"'
    assert 'job="a"' not in capsys.readouterr().err
    assert parse(["--selector", 'job="b"']).selector == 'job="b"'
    assert "--selector is deprecated, use --prometheus-selector" in capsys.readouterr().err
    before = len(prometheus.requests)
    report_of(prometheus, capsys, "--prometheus-selector", 'job="toposcope"')
    queries = [r.params.get("query", "") for r in prometheus.requests[before:]]
    assert queries and all('job="toposcope"' in q for q in queries)


def test_workload_glob_keeps_only_that_workload(
    prometheus: FakeServer, exporter_scrape: ExporterScrape, capsys: pytest.CaptureFixture[str]
) -> None:
    everything = report_of(prometheus, capsys)
    targets = {r["target"]["workload"] for r in everything["recommendations"]}
    name = sorted(t for t in targets if t)[0]
    only = report_of(prometheus, capsys, "--workload", name[:-1] + "*")
    kept = {r["target"]["workload"] for r in only["recommendations"]}
    assert kept and all(k is not None and k.startswith(name[:-1]) for k in kept)
    assert len(only["recommendations"]) < len(everything["recommendations"])
    assert any(n["policy"] == "filter" for n in only["notes"])


def test_namespace_filters_and_selector(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    everything = report_of(prometheus, capsys)
    count = len(everything["recommendations"])
    # the generated host's workloads carry no namespace: asking for one leaves none
    assert report_of(prometheus, capsys, "--namespace", "ml")["recommendations"] == []
    assert len(report_of(prometheus, capsys, "--exclude-namespace", "ml")["recommendations"]) == (
        count
    )
    node_only = report_of(prometheus, capsys, "--workload-selector", "node=n1,!namespace")
    assert len(node_only["recommendations"]) == sum(
        1 for r in everything["recommendations"] if r["target"]["workload"]
    )
    assert invoke(["--prometheus", prometheus.url, "--workload-selector", "a in (b"]) == 2
    assert "--workload-selector: unbalanced '('" in capsys.readouterr().err


def test_enable_and_disable_policies(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    report = report_of(prometheus, capsys, "--disable-policy", "numa-pinning")
    assert "numa-pinning" not in report["run"]["policies"]
    assert all(r["policy"] != "numa-pinning" for r in report["recommendations"])
    report = report_of(prometheus, capsys, "--enable-policy", "config")
    assert report["run"]["policies"] == ["config"]
    for argv, message in [
        (["--disable-policy", "nope"], "known policies"),
        (["--enable-policy", "config", "--disable-policy", "config"], "both enabled"),
    ]:
        assert invoke(["--prometheus", prometheus.url, *argv]) == 2
        assert message in capsys.readouterr().err


def test_dry_run_prints_api_calls_and_changes_nothing(
    prometheus: FakeServer,
    exporter_scrape: ExporterScrape,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    start = Allocation("n1", [4, 5, 6, 7], [1], [0])
    rm = FakeResourceManager("secret", {w.name: start for w in exporter_scrape.tree.workloads})
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o600)
    with FakeServer(rm).run() as server:
        argv = [
            "--prometheus",
            prometheus.url,
            "--resource-manager",
            "sim",
            "--rm-url",
            server.url,
            "--rm-token-file",
            str(token),
            "--apply",
            "--dry-run",
        ]
        assert invoke(argv) == 0
    assert rm.posts == 0
    err = capsys.readouterr().err
    calls = [line for line in err.splitlines() if line.startswith("curl ")]
    assert calls and all(shlex.split(c)[-1] == f"{server.url}/api/v1/actions" for c in calls)
    assert all('-H "Authorization: Bearer $TOKEN"' in line for line in calls)
    assert "secret" not in err
    assert "apply " not in err


def test_dry_run_for_a_backend_without_commands_exits_2(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--prometheus", prometheus.url, "--resource-manager", "local", "--dry-run"]
    assert invoke(argv) == 2
    assert "--dry-run has no plan for --resource-manager local" in capsys.readouterr().err


def test_table_wraps_to_width(prometheus: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke(["--prometheus", prometheus.url, "--width", "120"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert invoke(["--prometheus", prometheus.url, "--width", "0"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) > 120
    assert invoke(["--prometheus", prometheus.url, "--width", "-1"]) == 2


def test_columns_is_honoured(
    prometheus: FakeServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert invoke(["--prometheus", prometheus.url]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 120
