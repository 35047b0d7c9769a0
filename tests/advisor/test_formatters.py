"""Every formatter, fed the JSON report fixture."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml

from tests.helpers import FIXTURES
from toposcope.advisor.formatters import FORMATTERS, FormatOptions, find_formatter
from toposcope.advisor.formatters.table import fit_widths
from toposcope.errors import ConfigError
from toposcope.report.decoder import report_from_json
from toposcope.report.recommendation import Report, RunInfo

REPORT_JSON = FIXTURES / "advisor" / "report.json"


@pytest.fixture
def report() -> Report:
    return report_from_json(REPORT_JSON.read_text())


def test_registry_has_the_documented_formats() -> None:
    assert set(FORMATTERS) >= {"table", "json", "yaml", "csv", "markdown", "html"}
    with pytest.raises(ConfigError, match="known formats: csv, html, json, markdown, table, yaml"):
        find_formatter("yaml-ish")


def test_json_round_trips_the_fixture(report: Report) -> None:
    text = find_formatter("json")(report)
    assert json.loads(text) == json.loads(REPORT_JSON.read_text())


def test_table_is_aligned_and_sorted_by_gain(report: Report) -> None:
    text = find_formatter("table")(report)
    lines = text.splitlines()
    assert lines[0].startswith("toposcope advise: 6 recommendation(s) from http://prometheus")
    head = lines[2]
    assert head.split() == ["KIND", "TARGET", "GAIN", "CONF", "CHANGE"]
    body = lines[3 : lines.index("", 3)]
    rows = [row for row in body if not row.startswith(" ")]  # the others are indented under it
    assert len(rows) == 6
    gains = [float(row.split()[2].rstrip("%")) for row in rows]
    assert gains == sorted(gains, reverse=True)
    assert [row.split()[0] for row in rows] == [r.kind for r in report.by_gain()]
    change_at = head.index("CHANGE")
    assert all(row[change_at - 2 : change_at] == "  " for row in rows)  # columns line up
    assert "pin cpus=0-7 mems=0; migrate-memory mems=0" in [row[change_at:] for row in rows]
    for rec in report.recommendations:  # id and summary on the indented line under the row
        assert f"    {rec.id} ({rec.severity}, {rec.risk} risk): {rec.summary}" in lines
    assert "notes:" in lines
    assert any("[config] *: numa balancing" in line for line in lines)


def test_csv_has_header_and_one_row_per_recommendation(report: Report) -> None:
    rows = list(csv.DictReader(io.StringIO(find_formatter("csv")(report))))
    assert [r["id"] for r in rows] == [r.id for r in report.by_gain()]
    pin = next(r for r in rows if r["workload"] == "db|cache")
    assert pin["kind"] == "pin" and pin["node"] == "n1"
    assert json.loads(pin["actions"])[0]["kind"] == "pin"
    assert float(rows[0]["estimated_gain"]) == pytest.approx(1.0)
    assert pin["change"] == "pin node=n1 cpus=0-7 mems=0; migrate-memory node=n1 mems=0"


def test_markdown_escapes_pipes(report: Report) -> None:
    text = find_formatter("markdown")(report)
    assert text.startswith("# toposcope advisor report")
    assert "db\\|cache" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 6  # header + rows (the separator starts with "|-")
    assert all(line.count(" | ") == 8 for line in table)  # nine columns
    assert "| pin node=n1 cpus=0-7 mems=0; migrate-memory node=n1 mems=0 |" in text
    assert "## Notes" in text


def test_html_is_self_contained_with_a_chart(report: Report) -> None:
    text = find_formatter("html")(report)
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text  # the default page runs and fetches nothing
    assert text.count('class="bar"') == 6  # the gains drawn in CSS
    assert "db|cache" in text and "<td>pin</td>" in text
    assert text.count("<tr class=") == 6
    assert "pin node=n1 cpus=0-7 mems=0" in text  # compact CPU lists
    assert "migrate job-b n8 gpus=0,4 -&gt; n8 gpus=0-1" in text  # a move names its workload


def test_empty_report_formats(report: Report) -> None:
    empty = Report(RunInfo("2026-01-01T00:00:00+00:00", "x", "1h", (), 0.05))
    assert "nothing to do" in find_formatter("table")(empty)
    assert "Nothing to do." in find_formatter("markdown")(empty)
    assert "Plotly" not in find_formatter("html")(empty, FormatOptions(standalone=True))
    assert find_formatter("csv")(empty).count("\n") == 1


def test_yaml_is_the_json_document(report: Report) -> None:
    text = find_formatter("yaml")(report)
    assert yaml.safe_load(text) == json.loads(find_formatter("json")(report))
    assert "cpus: [0, 1, 2, 3, 4, 5, 6, 7]" in text  # lists of numbers stay on one line


@pytest.mark.parametrize("width", [0, 20, 60])
def test_fit_widths_never_widens_and_fits_when_it_can(width: int) -> None:
    names = ["ID", "SUMMARY", "CHANGE", "TARGET"]
    natural = [10, 200, 40, 12]
    widths = fit_widths(natural, names, width, {"SUMMARY": 3, "CHANGE": 2, "TARGET": 2})
    assert all(w <= n for w, n in zip(widths, natural, strict=True))
    assert widths[0] == 10
    if width == 60:
        assert sum(widths) + 2 * 3 <= 60
        assert widths[3] == 12  # a column needing less than its share keeps its width
    if width == 0:
        assert widths == natural
