"""``toposcope advise`` and ``toposcope place``: exit codes, formats, apply, revert."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.advisor.conftest import ExporterScrape
from tests.advisor.fakes import (
    ExpositionPrometheus,
    FakeResourceManager,
    FakeServer,
    ok,
    vector,
)
from tests.advisor.test_legacy_verdicts import legacy_audit_db
from tests.procs import free_port
from toposcope.advisor import cli as advise_cli
from toposcope.advisor import place_cli
from toposcope.advisor.calibration import PRIOR_WEIGHT, RATIO_FLOOR
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.report.advisor_api import Measurement, Verdict
from toposcope.report.decoder import decode_recommendation
from toposcope.rm import Allocation

LABELS = {"job": "toposcope", "instance": "10.1.2.3:9400"}


def invoke(module: ModuleType, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="toposcope")
    module.add_arguments(parser)
    code: int = module.run(parser.parse_args(argv))
    return code


@pytest.fixture
def prometheus(exporter_scrape: ExporterScrape) -> Iterator[FakeServer]:
    with FakeServer(ExpositionPrometheus(exporter_scrape.text, LABELS)).run() as fake:
        yield fake


def holder_of_gpu(exporter_scrape: ExporterScrape) -> str:
    return next(w.name for w in exporter_scrape.tree.workloads if w.gpu_minor is not None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "exactly one of --prometheus"),
        (["--prometheus", "http://x", "--scrape", "http://y"], "exactly one of"),
        (["--prometheus", "http://x", "--window", "1 hour"], "not a PromQL duration"),
        (["--prometheus", "http://x", "--policy", "numa"], "known policies: config"),
        (["--prometheus", "http://x", "--set", "numa-pinning.nope=1"], "unknown setting"),
        (["--prometheus", "http://x", "--min-gain", "-1"], "--min-gain"),
        (["--prometheus", "http://x", "--selector", "job=x"], "label matchers"),
        (["--prometheus", "ftp://x"], "http"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert invoke(advise_cli, argv) == 2
    assert message in capsys.readouterr().err


def test_prometheus_down_exits_2_naming_the_url(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert invoke(advise_cli, ["--prometheus", url, "--retries", "0"]) == 2
    assert url in capsys.readouterr().err


def test_nothing_to_do_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeServer(lambda r: ok(vector())).run() as fake:
        assert invoke(advise_cli, ["--prometheus", fake.url]) == 0
    out = capsys.readouterr().out
    assert "nothing to do" in out
    assert "no series for toposcope_numa_node_info" in out


def test_recommendations_exit_0_without_fail_on(
    prometheus: FakeServer, exporter_scrape: ExporterScrape, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--prometheus", prometheus.url, "--format", "json", "--window", "30m"]
    assert invoke(advise_cli, argv) == 0
    report = json.loads(capsys.readouterr().out)
    pins = [r for r in report["recommendations"] if r["kind"] == "pin"]
    holder = holder_of_gpu(exporter_scrape)
    mine = next(r for r in pins if r["target"]["workload"] == holder)
    assert mine["target"]["node"] == "n1"  # the exporter's hostname, not the instance
    assert mine["estimated_gain"] > 0.5 * 0.4  # a GPU holder pays gpu_job_share of the penalty
    assert report["run"]["window"] == "30m"
    assert report["run"]["source"] == prometheus.url
    assert any(
        "increase(toposcope_workload_cpu_seconds_total[30m])" in r.params.get("query", "")
        for r in prometheus.requests
    )


def test_min_gain_and_policy_selection(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--prometheus", prometheus.url, "--policy", "idle-release", "--policy", "config"]
    assert invoke(advise_cli, argv) == 0
    argv = ["--prometheus", prometheus.url, "--min-gain", "5"]
    assert invoke(advise_cli, argv) == 0
    assert "below --min-gain 5 left out" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("fmt", "start"),
    [
        ("csv", "id,kind"),
        ("yaml", "notes:"),
        ("json", "{"),
        ("markdown", "# toposcope"),
        ("html", "<!DOCTYPE html>"),
        ("table", "toposcope"),
    ],
)
def test_formats_to_a_file(fmt: str, start: str, prometheus: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / f"report.{fmt}"
    argv = ["--prometheus", prometheus.url, "--format", fmt, "--output", str(out)]
    assert invoke(advise_cli, argv) == 0
    assert out.read_text().startswith(start)


def test_scrape_mode(scrape_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke(advise_cli, ["--scrape", f"n1={scrape_file.as_uri()}"]) == 0
    assert "pin-" in capsys.readouterr().out


def test_apply_dry_run_prints_calls_on_stderr(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert invoke(advise_cli, ["--prometheus", prometheus.url, "--apply"]) == 0
    captured = capsys.readouterr()
    assert "dry-run: POST /api/v1/actions" in captured.err
    assert "apply pin-" in captured.err and ": dry-run" in captured.err
    assert "dry-run:" not in captured.out


def test_apply_revert_and_log_against_a_resource_manager(
    prometheus: FakeServer,
    exporter_scrape: ExporterScrape,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    holder = holder_of_gpu(exporter_scrape)
    start = Allocation("n1", [4, 5, 6, 7], [1], [0])
    allocations = {w.name: start for w in exporter_scrape.tree.workloads}
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o600)
    audit = tmp_path / "audit.sqlite"
    rm = FakeResourceManager("secret", allocations)
    with FakeServer(rm).run() as server:
        manager = [
            "--resource-manager", "sim", "--rm-url", server.url, "--rm-token-file", str(token)
        ]  # fmt: skip
        argv = ["--prometheus", prometheus.url, "--format", "json", "--apply", *manager]
        assert invoke(advise_cli, [*argv, "--audit-db", str(audit)]) == 0
        report = json.loads(capsys.readouterr().out)
        rec = next(r for r in report["recommendations"] if r["target"]["workload"] == holder)
        assert rm.allocations[holder].mems == [0]
        assert invoke(advise_cli, ["log", "--audit-db", str(audit)]) == 0
        assert rec["actions"][0]["request_id"] in capsys.readouterr().out
        revert = ["revert", rec["id"], *manager, "--audit-db", str(audit)]
        assert invoke(advise_cli, revert) == 0
        assert rm.allocations[holder] == start
        assert invoke(advise_cli, revert) == 2  # nothing left to revert
        assert "nothing applied and not yet reverted" in capsys.readouterr().err
        wrong = tmp_path / "wrong"
        wrong.write_text("nope")
        wrong.chmod(0o600)
        bad = [*argv, "--rm-token-file", str(wrong), "--audit-db", str(audit)]
        assert invoke(advise_cli, bad) == 2
        assert "refused the token" in capsys.readouterr().err


def test_list_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert invoke(advise_cli, ["--list-policies"]) == 0
    assert "numa-pinning: pin workloads" in capsys.readouterr().out


def test_place_picks_the_switch_pair(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # GPU 0 is held by a workload: of 1,2,3 the pair 2,3 shares a socket (NODE), 1-x is SYS
    assert invoke(place_cli, ["--gpus", "2", "--prometheus", prometheus.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].split()[:4] == ["1", "n1", "2,3", "NODE"]
    argv = ["--gpus", "1", "--node", "n1", "--format", "json", "--prometheus", prometheus.url]
    assert invoke(place_cli, argv) == 0
    assert json.loads(capsys.readouterr().out)[0]["gpus"] == [1]


def test_place_exit_codes(
    prometheus: FakeServer, scrape_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # no room is an answer (exit 0), a failure only when the caller asks for one
    assert invoke(place_cli, ["--gpus", "4", "--prometheus", prometheus.url]) == 0
    assert "no 4 free GPU(s) on any node" in capsys.readouterr().err
    argv = ["--gpus", "4", "--fail-on", "no-placement", "--prometheus", prometheus.url]
    assert invoke(place_cli, argv) == 1
    argv = ["--gpus", "2", "--fail-on", "no-placement", "--prometheus", prometheus.url]
    assert invoke(place_cli, argv) == 0
    assert invoke(place_cli, ["--gpus", "1", "--node", "zz", "--scrape", str(scrape_file)]) == 2
    assert invoke(place_cli, ["--gpus", "0", "--prometheus", prometheus.url]) == 2


def test_calibrate_from_a_missing_audit_log_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.sqlite"
    assert invoke(advise_cli, ["--prometheus", "http://x", "--calibrate-from", str(missing)]) == 2
    assert "--calibrate-from: no audit log at" in capsys.readouterr().err
    assert not missing.exists()


def test_calibrate_from_scales_estimates_by_verified_outcomes(
    prometheus: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--prometheus", prometheus.url, "--format", "json", "--policy", "numa-pinning"]
    assert invoke(advise_cli, argv) == 0
    before = {r["id"]: r for r in json.loads(capsys.readouterr().out)["recommendations"]}
    rec = next(iter(before.values()))
    log = OutcomeLog(tmp_path / "audit.sqlite")
    pin = decode_recommendation(rec)
    log.start(pin, Measurement(remote_share=0.5, cores=4.0), 1.0)
    log.settle(pin.id, Verdict.PAID, Measurement(0.0, 4.0), "", 2.0)  # no faster
    assert invoke(advise_cli, [*argv, "--calibrate-from", str(log.path)]) == 0
    after = {r["id"]: r for r in json.loads(capsys.readouterr().out)["recommendations"]}
    # one outcome that gained nothing (the ratio's floor), shrunk toward 1 in logarithms
    assert after[rec["id"]]["estimated_gain"] == pytest.approx(
        rec["estimated_gain"] * RATIO_FLOOR ** (1 / (PRIOR_WEIGHT + 1)), rel=1e-3
    )
    assert "calibration from 1 verified pin outcome(s)" in after[rec["id"]]["gain_model"]


def test_calibrate_from_an_audit_log_of_an_earlier_release(
    prometheus: FakeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its verdicts carry their earlier names (effective, ineffective, unverifiable)."""
    argv = ["--prometheus", prometheus.url, "--format", "json", "--policy", "numa-pinning"]
    old = legacy_audit_db(tmp_path)
    assert invoke(advise_cli, [*argv, "--calibrate-from", str(old)]) == 0
    recs = json.loads(capsys.readouterr().out)["recommendations"]
    assert recs and all(
        "calibration from 4 verified pin outcome(s)" in r["gain_model"] for r in recs
    )
