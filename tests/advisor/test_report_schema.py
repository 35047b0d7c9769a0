"""The published JSON Schema of the report: in step with the code, and met by real output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.advisor.conftest import ExporterScrape
from tests.helpers import FIXTURES, REPO
from toposcope.advisor.formatters import find_formatter
from toposcope.advisor.report_schema import main, schema_text
from toposcope.cli import main as toposcope_main
from toposcope.report.decoder import report_from_json

COMMITTED = REPO / "docs" / "advisor-report.schema.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(COMMITTED.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_committed_schema_matches_the_code() -> None:
    assert COMMITTED.read_text() == schema_text(), (
        "docs/advisor-report.schema.json is stale: run python -m toposcope.advisor.report_schema "
        "--write docs/advisor-report.schema.json"
    )


def test_real_output_meets_the_schema(
    validator: jsonschema.Draft202012Validator,
    exporter_scrape: ExporterScrape,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scrape = tmp_path / "n1.prom"
    scrape.write_text(exporter_scrape.text)
    argv = ["advise", "--scrape", f"n1={scrape.as_uri()}", "--format", "json", "--min-gain", "0"]
    assert toposcope_main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["recommendations"]
    validator.validate(report)
    validator.validate(json.loads((FIXTURES / "advisor" / "report.json").read_text()))


def test_the_schema_refuses_what_readers_refuse(
    validator: jsonschema.Draft202012Validator,
) -> None:
    good = json.loads(
        find_formatter("json")(report_from_json((FIXTURES / "advisor" / "report.json").read_text()))
    )
    changes: list[Callable[[dict[str, Any]], None]] = [
        lambda d: d.update(schema_version="2"),
        lambda d: d.update(extra=1),
        lambda d: d["recommendations"][0].update(kind="reboot"),
        lambda d: d["recommendations"][0]["actions"][0].update(cpu=[1]),
    ]
    for change in changes:
        bad = json.loads(json.dumps(good))
        change(bad)
        assert not validator.is_valid(bad)


def test_module_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert json.loads(capsys.readouterr().out)["properties"]["schema_version"]["const"] == "1"
