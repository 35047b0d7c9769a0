"""Property-based: what the advisor service answers conforms to its own OpenAPI document.

Schemathesis generates requests from ``/api/v1/openapi.json`` (valid and invalid bodies and
queries, odd recommendation ids) for each operation, against a service that has analysed
and one that has not, and checks every answer: no 5xx, a documented status code, content
type and body schema, invalid input refused, the bearer scheme enforced. The service acts
through the fake resource manager of the bench, so applies and reverts really happen. Runs
are bounded and derandomized (the same cases every time) to stay short and reproducible.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from tests.advisor_serve.conftest import API_TOKEN, Bench, the_pin
from tests.advisor_serve.test_openapi import COMMITTED
from toposcope.advisor.api import advisor_app
from toposcope.advisor.service import AdvisorService

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
#: the operations of the committed document, one test each ("GET /api/v1/audit"...)
OPERATIONS = [
    (method.upper(), path)
    for path, item in json.loads(COMMITTED.read_text(encoding="utf-8"))["paths"].items()
    for method in item
]
# A request can match the schema and still be refused by the service: an id that is in no
# report (404), nothing to revert (409), no analysis yet (503).
ACCEPTED = ["2xx", "401", "403", "404", "409", "503"]
#: the only server error allowed: 503 while no analysis has completed (an analysed service
#: with a reachable resource manager answers none)
NOT_READY = ["2xx", "3xx", "4xx", "503"]


def openapi_schema(service: AdvisorService, *, analysed: bool = True) -> Any:
    """The service's document as schemathesis loads it from the running app."""
    checks: dict[str, Any] = {"positive_data_acceptance": {"expected-statuses": ACCEPTED}}
    if not analysed:
        checks["not_a_server_error"] = {"expected-statuses": NOT_READY}
    config = schemathesis.config.SchemathesisConfig.from_dict({"checks": checks})
    app = advisor_app(service, API_TOKEN)
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app, config=config)


@pytest.mark.parametrize("analysed", [True, False], ids=["analysed", "not-analysed"])
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_the_service_conforms_to_its_openapi_document(
    bench: Bench, analysed: bool, method: str, path: str
) -> None:
    service = bench.service()
    if analysed:
        assert service.analyse_once() is not None
    operation = openapi_schema(service, analysed=analysed)[path][method]
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )

    @given(case=cases)
    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case[Any]) -> None:
        case.call_and_validate(headers=AUTH)

    check()


def test_applying_and_reverting_a_real_recommendation_conform(bench: Bench) -> None:
    service = bench.service()
    assert service.analyse_once() is not None
    rec_id = the_pin(service)
    schema = openapi_schema(service)
    one = schema["/api/v1/recommendations/{rec_id}"]["GET"]
    apply = schema["/api/v1/recommendations/{rec_id}/apply"]["POST"]
    revert = schema["/api/v1/recommendations/{rec_id}/revert"]["POST"]
    audit = schema["/api/v1/audit"]["GET"]
    ids = {"rec_id": rec_id}
    answers = [
        apply.Case(path_parameters=ids, body={"user": "alice"}).call_and_validate(headers=AUTH),
        apply.Case(path_parameters=ids).call_and_validate(headers=AUTH),
        one.Case(path_parameters=ids).call_and_validate(),
        audit.Case(query={"recommendation": rec_id}).call_and_validate(),
        revert.Case(path_parameters=ids, body={}).call_and_validate(headers=AUTH),
        revert.Case(path_parameters=ids).call_and_validate(headers=AUTH),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 200, 409]
    assert answers[0].json()["result"] == "applied"
    assert answers[1].json()["result"] == "skipped"
    assert (answers[2].json()["state"], len(answers[2].json()["audit"])) == ("applied", 2)
    assert [r["actor"] for r in answers[3].json()["actions"]] == ["alice via tester@host"] * 2
    assert answers[4].json()["state"] == "reverted"
    assert bench.rm.posts == 4  # two actions applied, two reverted
