"""``--job-deadlines FILE``: a job's configured end keeps it from being moved, as Slurm's time
left does; a wrong file is refused naming its line and field.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, pcie4, workload
from toposcope.advisor.job_deadlines import (
    JobDeadline,
    load_deadlines,
    parse_deadlines,
    with_deadlines,
)
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.cli import main
from toposcope.errors import ConfigError

NOW = 1_795_000_000.0  # a Unix time; the deadlines below are relative to it


def test_a_job_whose_deadline_is_near_is_not_moved() -> None:
    """The cross-socket pair of the time-left tests: moved with hours left, not with 10 min."""
    job = workload("pair", gpus=[0, 2])
    model = cluster([pcie4()], [job])
    later = with_deadlines(model, [JobDeadline("pa*", NOW + 6 * 3600)], NOW)
    assert [r.kind for r in JobMigration().evaluate(later).recommendations] == ["migrate-job"]
    soon = with_deadlines(model, [JobDeadline("pa*", NOW + 600)], NOW)
    result = JobMigration().evaluate(soon)
    assert result.recommendations == ()
    [note] = result.undecided
    assert "ends in 600s" in note.reason


def test_the_sooner_of_the_deadline_and_the_schedulers_time_left_counts() -> None:
    jobs = [
        replace(workload("a", gpus=[0]), time_left_seconds=300.0),
        replace(workload("b", gpus=[1]), time_left_seconds=9000.0),
        workload("c", gpus=[2]),
        workload("d", gpus=[3]),
    ]
    deadlines = [
        JobDeadline("[abc]", NOW + 1200),
        JobDeadline("c", NOW + 60),  # the first entry that matches wins
        JobDeadline("d", NOW - 60, node="other-*"),  # another node: does not cover d
    ]
    left = {
        w.name: w.time_left_seconds
        for w in with_deadlines(cluster([pcie4()], jobs), deadlines, NOW).workloads
    }
    assert left == {"a": 300.0, "b": 1200.0, "c": 1200.0, "d": None}
    past = with_deadlines(cluster([pcie4()], jobs[2:3]), [JobDeadline("c", NOW - 5)], NOW)
    assert past.workloads[0].time_left_seconds == 0.0


def test_the_file_format() -> None:
    text = (
        "deadlines:\n"
        "  - workload: 'llm-*'\n"
        "    ends_at: 2026-11-28T18:00:00Z\n"
        "  - workload: eval-42.service\n"
        "    node: 'dgx-0*'\n"
        "    ends_at: '2026-11-28T12:00:00+01:00'\n"
    )
    first, second = parse_deadlines(text, "d.yaml")
    assert first == JobDeadline("llm-*", 1_795_888_800.0)
    assert second == JobDeadline("eval-42.service", 1_795_863_600.0, "dgx-0*")
    assert parse_deadlines("", "d.yaml") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("deadline: []\n", "d.yaml:1: deadline: unknown key"),
        ("deadlines:\n  - workload: a\n", "d.yaml:2: deadlines[0].ends_at: missing"),
        (
            "deadlines:\n  - {workload: a, ends_at: 2026-11-28T18:00:00}\n",
            "d.yaml:2: deadlines[0].ends_at: has no zone",
        ),
        (
            "deadlines:\n  - {workload: a, ends_at: tomorrow}\n",
            "d.yaml:2: deadlines[0].ends_at: must be an RFC 3339 time",
        ),
        (
            "deadlines:\n  - {workload: a, ends_at: 1795000000}\n",
            "d.yaml:2: deadlines[0].ends_at: must be an RFC 3339 time",
        ),
        (
            "deadlines:\n  - {workload: a, ends_at: 2026-11-28T18:00:00Z, user: x}\n",
            "d.yaml:2: deadlines[0].user: unknown key",
        ),
        (
            'deadlines:\n  - {workload: "a\\nb", ends_at: 2026-11-28T18:00:00Z}\n',
            "deadlines[0].workload: must be 1-253 printable chars",
        ),
        ("deadlines: [\n", "d.yaml:2: not valid YAML"),
    ],
)
def test_a_wrong_file_is_refused_naming_line_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_deadlines(text, "d.yaml")
    assert message in str(caught.value)


def test_an_unreadable_or_huge_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_deadlines(str(tmp_path / "missing.yaml"))
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (1024 * 1024 + 1))
    with pytest.raises(ConfigError, match="over 1048576 bytes"):
        load_deadlines(str(huge))
    assert load_deadlines(None) == ()


def test_advise_exits_2_on_a_bad_deadline_file(
    scrape_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "deadlines.yaml"
    bad.write_text("deadlines:\n  - {workload: x, ends_at: soon}\n")
    assert main(["advise", "--scrape", str(scrape_file), "--job-deadlines", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "deadlines.yaml:2: deadlines[0].ends_at" in err and "Traceback" not in err
    good = tmp_path / "good.yaml"
    good.write_text("deadlines:\n  - {workload: '*', ends_at: 2099-01-01T00:00:00Z}\n")
    assert main(["advise", "--scrape", str(scrape_file), "--job-deadlines", str(good)]) == 0
