"""The OpenAPI document: committed copy up to date, served by the app, models in step."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from tests.helpers import REPO
from tests.sim_api.conftest import BASE
from toposcope.rm import ActionRequest, ActionState, Allocation, NodeView, WorkloadView, api
from toposcope.rm.validation import adapter

COMMITTED = REPO / "docs" / "openapi.json"


def test_the_committed_document_is_what_the_app_generates() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == api.openapi_text(), (
        "docs/openapi.json is stale: run "
        "python -m toposcope.rm.api --write-openapi docs/openapi.json"
    )


def test_the_app_serves_the_same_document(client: FlaskClient) -> None:
    response = client.get(f"{BASE}/openapi.json")
    assert response.status_code == 200
    assert response.get_json() == json.loads(COMMITTED.read_text(encoding="utf-8"))


def test_the_command_writes_the_document(tmp_path: Path) -> None:
    target = tmp_path / "openapi.json"
    assert api.main(["--write-openapi", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == COMMITTED.read_text(encoding="utf-8")


def test_the_command_can_print_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert api.main(["--write-openapi", "-", "--prefix", "/v2"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert "/v2/actions" in document["paths"]


def test_the_document_describes_every_route_and_the_bearer_scheme() -> None:
    document = api.openapi_document()
    assert document["openapi"].startswith("3.1")
    assert sorted(document["paths"]) == [
        f"{BASE}/{path}"
        for path in (
            "actions",
            "actions/{action_id}",
            "healthz",
            "nodes",
            "nodes/{name}",
            "workloads",
            "workloads/{name}",
        )
    ]
    post = document["paths"][f"{BASE}/actions"]["post"]
    assert post["security"] == [{"BearerAuth": []}]
    assert set(post["responses"]) == {
        "200", "202", "400", "401", "403", "404", "409", "422", "429", "503"
    }  # fmt: skip
    scheme = document["components"]["securitySchemes"]["BearerAuth"]
    assert scheme["type"] == "http"
    assert scheme["scheme"] == "bearer"
    reads = [op for item in document["paths"].values() for m, op in item.items() if m == "get"]
    assert len(reads) == 6
    assert not any("security" in operation for operation in reads)


@pytest.mark.parametrize(
    "model", [Allocation, NodeView, WorkloadView, ActionRequest, ActionState], ids=str
)
def test_each_schema_is_the_core_model_itself(model: type) -> None:
    document = api.openapi_document()
    schema = document["components"]["schemas"][model.__name__]
    assert list(schema["properties"]) == [f.name for f in dataclasses.fields(model)]
    generated = adapter(model).json_schema(ref_template="#/components/schemas/{model}")
    generated.pop("$defs", None)
    assert schema == generated


def test_no_wrapper_is_left_in_the_document() -> None:
    text = api.openapi_text()
    assert "Body" not in json.loads(text)["components"]["schemas"]
    assert "Body" not in "".join(re.findall(r'"\$ref": "([^"]+)"', text))
