"""``toposcope place`` and ``advise`` with link prices: the PRICE and GB/S columns, a
measured file taking over its pairs, and a bad file refused with its line (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.advisor.conftest import ExporterScrape
from tests.advisor.fakes import ExpositionPrometheus, FakeServer
from toposcope.cli import main

LABELS = {"job": "toposcope", "instance": "10.1.2.3:9400"}
PAIRS = Path(__file__).resolve().parents[1] / "fixtures" / "p2p" / "pairs.txt"


@pytest.fixture
def prometheus(exporter_scrape: ExporterScrape) -> Iterator[FakeServer]:
    with FakeServer(ExpositionPrometheus(exporter_scrape.text, LABELS)).run() as fake:
        yield fake


def test_the_table_says_which_price_each_set_used(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["place", "--gpus", "2", "--prometheus", prometheus.url]) == 0
    table = capsys.readouterr().out.split("\n\n")[1]
    header, *rows = table.splitlines()
    assert "PRICE" in header and "GB/S" in header
    assert rows and all(" topology " in row for row in rows), rows


def test_a_measured_file_prices_its_pairs(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    source = ["--prometheus", prometheus.url, "--format", "json", "--top", "6"]
    assert main(["place", "--gpus", "2", *source, "--p2p-bandwidth", f"n*={PAIRS}"]) == 0
    ranked = json.loads(capsys.readouterr().out)
    by_gpus = {tuple(p["gpus"]): p for p in ranked}
    measured = [p for p in ranked if p["price_source"] == "measured"]
    assert measured, ranked
    assert all("pairs.txt:" in p["price_detail"] for p in measured)
    assert by_gpus[(2, 3)]["link_gbps"] == 20.0


def test_a_bad_file_exits_2_with_its_line(
    prometheus: FakeServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "p2p.txt"
    bad.write_text("# measured\n0 1 fast\n")
    source = ["--prometheus", prometheus.url]
    assert main(["place", "--gpus", "2", *source, "--p2p-bandwidth", f"n1={bad}"]) == 2
    assert f"{bad}:2: 'fast' is not a bandwidth" in capsys.readouterr().err
    advise = ["advise", *source, "--p2p-bandwidth", f"n1={bad}"]
    assert main(advise) == 2
    assert f"{bad}:2:" in capsys.readouterr().err


def test_advisor_serve_refuses_a_bad_file_before_serving(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "p2p.txt"
    bad.write_text("0 1 2 3 4\n")  # a matrix header of GPUs 0-4 without its rows
    serve = ["advisor", "serve", "--prometheus", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"]
    audit = ["--audit-db", str(tmp_path / "audit.sqlite")]
    assert main([*serve, *audit, "--p2p-bandwidth", f"gpu-*={bad}"]) == 2
    assert f"{bad}: no GPU pair with a figure" in capsys.readouterr().err
