"""Every report format neutralises what it prints: names taken from metrics cannot become
spreadsheet formulas (CSV), HTML, links or emphasis (Markdown, HTML), or terminal commands
(every text format).

Names that pass the loaders (no C0 control character) go through the real command line;
terminal escapes, which the loaders already drop, are fed to each formatter in a report.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from tests.advisor.conftest import ExporterScrape
from tests.advisor.hostile import (
    C1_AND_BIDI,
    LINK,
    SCRIPT,
    SPREADSHEET,
    TERMINAL,
    renamed_workloads,
)
from tests.helpers import FIXTURES
from toposcope.advisor.formatters import FORMATTERS, find_formatter
from toposcope.advisor.formatters.escaping import FORMULA_START
from toposcope.cli import main
from toposcope.report.decoder import report_from_json

#: names that pass the loaders and reach the formatters
PASSING = (SPREADSHEET, SCRIPT, LINK, C1_AND_BIDI, "+cmd|' /C calc'!A0", "@SUM(A1)", "-2+3")
#: what may never be written: C0 controls but tab and newline (plotly's script has tabs),
#: DEL, C1 controls, bidirectional overrides
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: the CSV columns the formatter fills with numbers of its own
NUMBER_COLUMNS = {"gpus", "estimated_gain", "confidence"}


def _without_plotly(page: str) -> str:
    """``page`` without the inlined plotly bundle (which holds control characters of its own)
    but with the chart's data (the script that calls ``Plotly.newPlot``).
    """
    scripts = re.findall(r"<script[^>]*>.*?</script>", page, flags=re.S)
    bundle = [s for s in scripts if "Plotly.newPlot" not in s]
    for script in bundle:
        page = page.replace(script, "")
    return page


def _advise(scrape: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> str:
    argv = ["advise", "--scrape", f"n1={scrape.as_uri()}", "--min-gain", "0", "--format", fmt]
    assert main(argv) == 0
    return capsys.readouterr().out


@pytest.fixture
def hostile_scrapes(
    exporter_scrape: ExporterScrape, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> list[tuple[Path, tuple[str, ...]]]:
    """Scrapes whose recommended workloads are renamed, together, to every :data:`PASSING`
    name; each with the names it holds.
    """
    plain = tmp_path / "plain.prom"
    plain.write_text(exporter_scrape.text)
    report = json.loads(_advise(plain, "json", capsys))
    advised = sorted({r["target"]["workload"] for r in report["recommendations"]} - {None})
    assert len(advised) >= 2
    scrapes = []
    for start in range(0, len(PASSING), len(advised)):
        chosen = PASSING[start : start + len(advised)]
        path = tmp_path / f"hostile-{start}.prom"
        path.write_text(
            renamed_workloads(exporter_scrape.text, dict(zip(advised, chosen, strict=False)))
        )
        scrapes.append((path, chosen))
    return scrapes


def test_csv_cells_cannot_be_formulas(
    hostile_scrapes: list[tuple[Path, tuple[str, ...]]], capsys: pytest.CaptureFixture[str]
) -> None:
    for scrape, names in hostile_scrapes:
        text = _advise(scrape, "csv", capsys)
        assert RAW_CONTROL.search(text) is None
        rows = list(csv.DictReader(io.StringIO(text)))
        workloads = {row["workload"] for row in rows}
        for name in names:
            shown = name.replace("\x9b", "\\x9b").replace("\u202e", "\\u202e")
            assert ("'" + shown if name.startswith(FORMULA_START) else shown) in workloads
        for row in rows:
            for column, cell in row.items():
                if column not in NUMBER_COLUMNS:
                    assert not cell.startswith(FORMULA_START), (column, cell)
            float(row["estimated_gain"])  # numbers stay numbers


def test_markdown_renders_names_as_text(
    hostile_scrapes: list[tuple[Path, tuple[str, ...]]], capsys: pytest.CaptureFixture[str]
) -> None:
    markdown_it = pytest.importorskip("markdown_it")
    renderer = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table")
    for scrape, names in hostile_scrapes:
        text = _advise(scrape, "markdown", capsys)
        assert RAW_CONTROL.search(text) is None
        assert "<" not in text and "](" not in text.replace("\\](", "")
        page = renderer.render(text)
        assert "<script" not in page and "<a " not in page and "<em>" not in page
        rows = [line for line in text.splitlines() if line.startswith("| ")]
        assert all(line.count(" | ") == 8 for line in rows)  # still nine cells
        if SCRIPT in names:
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # shown, as text
        if LINK in names:
            assert "[x](javascript:alert(1))" in page


def test_table_and_html_show_names_without_acting_on_them(
    hostile_scrapes: list[tuple[Path, tuple[str, ...]]], capsys: pytest.CaptureFixture[str]
) -> None:
    for scrape, names in hostile_scrapes:
        table = _advise(scrape, "table", capsys)
        page = _advise(scrape, "html", capsys)
        assert RAW_CONTROL.search(table) is None
        assert RAW_CONTROL.search(_without_plotly(page)) is None
        if C1_AND_BIDI in names:
            assert "evil\\x9b2J\\u202e" in table and "evil\\x9b2J\\u202e" in page
        if SCRIPT in names:
            assert SCRIPT in table
            assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page


def test_every_format_shows_terminal_escapes_as_text() -> None:
    data = json.loads((FIXTURES / "advisor" / "report.json").read_text())
    rec = data["recommendations"][0]
    rec["target"]["workload"] = TERMINAL
    rec["summary"] = f"move {TERMINAL} now"
    data["notes"][0]["reason"] = TERMINAL
    report = report_from_json(json.dumps(data))
    for name in sorted(FORMATTERS):
        text = find_formatter(name)(report)
        assert "\x1b" not in text and "\x07" not in text, name
        if name in ("table", "markdown", "csv", "html"):
            assert "evil\\x1b[2J\\x07" in text.replace("\\\\", "\\").replace("\\[", "["), name
    assert json.loads(find_formatter("json")(report))["notes"][0]["reason"] == TERMINAL
