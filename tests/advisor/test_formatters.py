"""Every formatter, fed the JSON report fixture."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.helpers import FIXTURES
from toposcope.advisor.formatters import FORMATTERS, find_formatter
from toposcope.errors import ConfigError
from toposcope.recommendation import Report, RunInfo
from toposcope.recommendation_decoder import report_from_json

REPORT_JSON = FIXTURES / "advisor" / "report.json"


@pytest.fixture
def report() -> Report:
    return report_from_json(REPORT_JSON.read_text())


def test_registry_has_the_documented_formats() -> None:
    assert set(FORMATTERS) >= {"table", "json", "csv", "markdown", "html"}
    with pytest.raises(ConfigError, match="known formats: csv, html, json"):
        find_formatter("yaml-ish")


def test_json_round_trips_the_fixture(report: Report) -> None:
    text = find_formatter("json")(report)
    assert json.loads(text) == json.loads(REPORT_JSON.read_text())


def test_table_is_aligned_and_sorted_by_gain(report: Report) -> None:
    text = find_formatter("table")(report)
    lines = text.splitlines()
    assert lines[0].startswith("toposcope advise: 6 recommendation(s) from http://prometheus")
    head = lines[2]
    assert head.split()[:4] == ["ID", "KIND", "TARGET", "GAIN"]
    rows = lines[3:9]
    gains = [float(row.split()[3].rstrip("%")) for row in rows]
    assert gains == sorted(gains, reverse=True)
    kind_at = head.index("KIND")
    assert [row[kind_at:].split()[0] for row in rows] == [r.kind for r in report.by_gain()]
    assert all(row[kind_at - 2 : kind_at] == "  " for row in rows)  # columns line up
    assert "notes:" in lines
    assert any("[config] *: numa balancing" in line for line in lines)


def test_csv_has_header_and_one_row_per_recommendation(report: Report) -> None:
    rows = list(csv.DictReader(io.StringIO(find_formatter("csv")(report))))
    assert [r["id"] for r in rows] == [r.id for r in report.by_gain()]
    pin = next(r for r in rows if r["workload"] == "db|cache")
    assert pin["kind"] == "pin" and pin["node"] == "n1"
    assert json.loads(pin["actions"])[0]["kind"] == "pin"
    assert float(rows[0]["estimated_gain"]) == pytest.approx(1.0)


def test_markdown_escapes_pipes(report: Report) -> None:
    text = find_formatter("markdown")(report)
    assert text.startswith("# toposcope advisor report")
    assert "db\\|cache" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 6  # header + rows (the separator starts with "|-")
    assert all(line.count(" | ") == 7 for line in table)
    assert "## Notes" in text


def test_html_is_self_contained_with_a_chart(report: Report) -> None:
    text = find_formatter("html")(report)
    assert text.startswith("<!DOCTYPE html>")
    assert "<script src=" not in text.replace('<script src="data:', "")  # no external js
    assert "Plotly.newPlot" in text
    assert "db|cache" in text and "<td>pin</td>" in text
    assert text.count("<tr class=") == 6


def test_empty_report_formats(report: Report) -> None:
    empty = Report(RunInfo("2026-01-01T00:00:00+00:00", "x", "1h", (), 0.05))
    assert "nothing to do" in find_formatter("table")(empty)
    assert "Nothing to do." in find_formatter("markdown")(empty)
    assert "Plotly" not in find_formatter("html")(empty)
    assert find_formatter("csv")(empty).count("\n") == 1
