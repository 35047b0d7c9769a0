"""Reports a person can read and act on: the table fits the terminal without splitting names,
a move says which workload goes where, and Markdown and HTML carry the evidence.

The fixture report is renamed to the demo scenario's long names (``pcie4-01``,
``vit-cross-socket.service``), the names the old table cut mid-word.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.advisor.conftest import ExporterScrape
from tests.helpers import FIXTURES
from toposcope.advisor.formatters import FormatOptions, find_formatter
from toposcope.advisor.formatters.cells import evidence_text
from toposcope.advisor.formatters.wrapping import shorten, wrap
from toposcope.cli import main
from toposcope.report.decoder import report_from_json
from toposcope.report.recommendation import Report

#: fixture name -> demo-like name
DEMO_NAMES = {
    "n1": "pcie4-01",
    "n8": "pcie8-02",
    "job-b": "vit-cross-socket.service",
    "train-a": "resnet-cross-socket.service",
    "db|cache": "serving-a.service",
    "notebook": "notebook-hoarder.service",
    "pending-c": "yolo-far-input.service",
}


@pytest.fixture
def demo() -> Report:
    """The fixture report with the demo scenario's node and workload names."""
    text = (FIXTURES / "advisor" / "report.json").read_text()
    for old, new in DEMO_NAMES.items():
        text = re.sub(rf'(?<=[" /:]){re.escape(old)}(?=[" /,)])', new, text)
    return report_from_json(text)


def _words(text: str) -> set[str]:
    return set(text.split())


@pytest.mark.parametrize("width", [80, 120])
def test_table_fits_the_width_and_keeps_names_whole(demo: Report, width: int) -> None:
    text = find_formatter("table")(demo, FormatOptions(width=width))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    words = _words(text)
    for rec in demo.recommendations:
        assert rec.id in words  # ids whole, to copy into `advise revert`
        if rec.target.workload:
            assert any(rec.target.workload in w for w in words), rec.target.workload
    assert not [w for w in words if re.search(r"\w[-./]$", w)]  # no name cut at a seam
    start = next(i for i, line in enumerate(lines) if line.startswith("KIND "))
    rows = [line for line in lines[start + 1 :] if line and not line.startswith(" ")][:6]
    assert [row.split()[0] for row in rows] == [r.kind for r in demo.by_gain()]  # one line each
    body = "\n".join(lines)
    assert "pcie8-02/vit-cross-socket.service" in body  # the target whole on its row


@pytest.mark.parametrize("width", [0, 80, 120])
def test_a_migrate_row_names_the_workload_and_where_it_goes(demo: Report, width: int) -> None:
    text = find_formatter("table")(demo, FormatOptions(width=width))
    row = next(line for line in text.splitlines() if line.startswith("migrate-job "))
    assert "pcie8-02/vit-cross-socket.service" in row
    flat = " ".join(text.split())
    assert "migrate pcie8-02 gpus=0,4 -> pcie8-02 gpus=0-1" in flat  # from -> to


def test_wide_puts_every_column_on_one_line(demo: Report) -> None:
    text = find_formatter("table")(demo, FormatOptions(width=80, wide=True))
    lines = text.splitlines()
    assert lines[2].split()[:4] == ["ID", "KIND", "TARGET", "GAIN"]
    for rec in demo.recommendations:
        (line,) = [line for line in lines if line.startswith(rec.id + " ")]
        assert rec.summary in line and f"{rec.confidence:.2f}" in line
    assert max(len(line) for line in lines) > 120


def test_long_words_break_only_at_seams_or_are_shortened() -> None:
    assert wrap("move vit-cross-socket.service now", 12) == [
        "move",
        "vit-cross-",
        "socket.",
        "service now",
    ]
    assert shorten("pcie4-01/vit-cross-socket.service", 20, middle=True) == ("pcie4-01/....service")
    assert wrap("x" * 30, 10) == ["xxxx...xxx"]


def test_markdown_and_html_carry_the_escaped_evidence(demo: Report) -> None:
    markdown = find_formatter("markdown")(demo)
    page = find_formatter("html")(demo)
    for rec in demo.recommendations:
        assert f"### {rec.id}" in markdown
        for evidence in rec.evidence:
            shown = evidence_text(evidence)
            assert shown.replace("_", "\\_") in markdown
            assert shown.replace('"', "&quot;") in page
    assert 'toposcope\\_workload\\_memory\\_bytes{node="pcie4-01",numa\\_node="1",' in markdown
    assert page.count("<details>") == sum(1 for r in demo.recommendations if r.evidence)


def test_html_is_small_by_default_and_standalone_inlines_plotly(demo: Report) -> None:
    small = find_formatter("html")(demo)
    assert len(small.encode()) < 200_000
    assert "<script" not in small and "cdn" not in small.lower()
    full = find_formatter("html")(demo, FormatOptions(standalone=True))
    assert "Plotly.newPlot" in full and len(full.encode()) > 1_000_000  # the bundle, inlined
    assert "<script src=" not in full.replace('<script src="data:', "")  # fetches nothing


def test_advise_honours_width_and_columns(
    exporter_scrape: ExporterScrape,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scrape = tmp_path / "n1.prom"
    scrape.write_text(exporter_scrape.text)
    argv = ["advise", "--scrape", f"pcie4-01={scrape.as_uri()}", "--min-gain", "0"]
    monkeypatch.setenv("COLUMNS", "80")
    assert main(argv) == 0
    by_columns = capsys.readouterr().out.splitlines()
    assert main([*argv, "--width", "70"]) == 0
    by_width = capsys.readouterr().out.splitlines()
    monkeypatch.delenv("COLUMNS")
    assert main([*argv, "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in by_columns) <= 80
    assert max(len(line) for line in by_width) <= 70
    assert max(len(line) for line in wide) > 80  # not a terminal, no COLUMNS: no limit
    assert main([*argv, "--format", "html", "--html-standalone"]) == 0
    assert "Plotly.newPlot" in capsys.readouterr().out
