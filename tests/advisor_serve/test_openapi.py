"""The advisor API's OpenAPI document: committed copy up to date, served by the service,
versioned, and built from the contract types it answers with.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.advisor_serve.conftest import Bench, call, serving
from tests.helpers import REPO
from toposcope.advisor import api
from toposcope.advisor.audit import AuditEntry
from toposcope.report.recommendation import SCHEMA_VERSION, Recommendation

COMMITTED = REPO / "docs" / "advisor-openapi.json"
BASE = "/api/v1"


def committed() -> dict[str, object]:
    document: dict[str, object] = json.loads(COMMITTED.read_text(encoding="utf-8"))
    return document


def test_the_committed_document_is_what_the_code_generates() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == api.openapi_text(), (
        "docs/advisor-openapi.json is stale: run "
        "python -m toposcope.advisor.api --write-openapi docs/advisor-openapi.json"
    )


def test_the_service_serves_the_same_document(bench: Bench) -> None:
    with serving(bench.dry_service()) as url:
        status, headers, document = call(f"{url}{BASE}/openapi.json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert document == committed()


def test_the_command_writes_the_document(tmp_path: Path) -> None:
    target = tmp_path / "advisor-openapi.json"
    assert api.main(["--write-openapi", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == COMMITTED.read_text(encoding="utf-8")


def test_the_command_can_print_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert api.main(["--write-openapi", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == committed()


def test_the_document_is_versioned_and_describes_every_route() -> None:
    document = api.openapi_document()
    assert document["openapi"].startswith("3.1")
    assert document["info"]["version"] == api.API_VERSION
    assert sorted(document["paths"]) == [
        f"{BASE}/{path}"
        for path in (
            "audit",
            "auto-apply",
            "auto-apply/resume",
            "auto-apply/stop",
            "placement",
            "recommendations",
            "recommendations/{rec_id}",
            "recommendations/{rec_id}/apply",
            "recommendations/{rec_id}/revert",
        )
    ]
    operations = {
        (method, path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    changes = {key for key, op in operations.items() if "security" in op}
    switches = {("post", f"{BASE}/auto-apply/stop"), ("post", f"{BASE}/auto-apply/resume")}
    assert changes - switches == {
        ("post", f"{BASE}/recommendations/{{rec_id}}/apply"),
        ("post", f"{BASE}/recommendations/{{rec_id}}/revert"),
    }
    for key in switches:
        assert operations[key]["security"] == [{"BearerAuth": []}]
        assert {"400", "401", "403", "404", "413"} <= set(operations[key]["responses"])
    for key in changes - switches:
        assert operations[key]["security"] == [{"BearerAuth": []}]
        assert {"400", "401", "403", "409", "413", "502"} <= set(operations[key]["responses"])
        assert "requestBody" in operations[key]
        assert operations[key]["requestBody"].get("required") is not True
    assert set(operations[("post", f"{BASE}/recommendations/{{rec_id}}/revert")]["responses"]) >= {
        "200",
        "202",
    }
    scheme = document["components"]["securitySchemes"]["BearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")


def test_the_report_answer_is_the_versioned_recommendation_contract() -> None:
    schemas = api.openapi_document()["components"]["schemas"]
    answer = schemas["RecommendationsAnswer"]
    assert answer["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    assert answer["additionalProperties"] is False
    opened = schemas["OpenRecommendation"]["properties"]
    assert list(opened) == [f.name for f in dataclasses.fields(Recommendation)] + ["first_seen"]
    row = schemas["AuditRow"]["properties"]
    assert list(row) == [f.name for f in dataclasses.fields(AuditEntry)] + ["state"]


def test_every_reference_resolves_to_a_schema_of_the_document() -> None:
    document = api.openapi_document()
    schemas = document["components"]["schemas"]
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                found.append(ref.removeprefix("#/components/schemas/"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert {"InProgress", "Error", "AppliedOutcome", "OneRecommendation"} <= set(found)
    assert sorted(set(found) - set(schemas)) == []
    assert not [name for name in schemas if "." in name]
