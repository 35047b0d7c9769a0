"""The JSON Schema of the advisor's report (``toposcope advise --format json``).

It is generated from the core's report types (:mod:`toposcope.report.recommendation`), the same
dataclasses the JSON is written from, and published as ``docs/advisor-report.schema.json``
for the scripts and pipelines that read the report; a test fails when the two drift apart.
Readers refuse fields they do not know, so every object in the schema closes its properties.

    python -m toposcope.advisor.report_schema [--write FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toposcope.report.recommendation import SCHEMA_VERSION, Note, Recommendation, RunInfo

#: the JSON Schema dialect the document declares
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class ReportDocument(BaseModel):
    """The report JSON: its schema version, the run, the recommendations and the notes."""

    model_config = ConfigDict(extra="forbid", title="toposcope advisor report")

    schema_version: str = Field(
        description="the version of the report JSON; readers refuse any other",
        json_schema_extra={"const": SCHEMA_VERSION},
    )
    run: RunInfo
    recommendations: list[Recommendation] = Field(description="highest estimated gain first")
    notes: list[Note] = Field(description="what a policy could not decide, or left out")


def _close(node: Any) -> None:
    """Set ``additionalProperties: false`` on every object schema that lists properties."""
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            node.setdefault("additionalProperties", False)
        for value in node.values():
            _close(value)
    elif isinstance(node, list):
        for value in node:
            _close(value)


def report_schema() -> dict[str, Any]:
    """The JSON Schema of the report, as a dict."""
    schema = ReportDocument.model_json_schema(mode="serialization")
    _close(schema)
    return {"$schema": DIALECT, **schema}


def schema_text() -> str:
    """The schema as the committed file holds it (indented, keys sorted, final newline)."""
    return json.dumps(report_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the schema, or write it to ``--write FILE``."""
    parser = argparse.ArgumentParser(prog="python -m toposcope.advisor.report_schema")
    parser.add_argument("--write", metavar="FILE", help="write the schema here")
    args = parser.parse_args(argv)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as out:
            out.write(schema_text())
    else:
        sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
