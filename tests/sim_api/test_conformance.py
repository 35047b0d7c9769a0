"""Property-based: what the server answers conforms to its own OpenAPI document.

Schemathesis generates requests from ``/api/v1/openapi.json`` (valid and invalid bodies,
odd path names) and checks every answer: no 5xx, a documented status code, a documented
content type and headers, a body matching the response schema, invalid bodies refused and
the bearer scheme actually enforced. Runs are bounded and derandomized (same cases every
time) to keep them short and reproducible.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

from tests.sim_api.conftest import AUTH, BASE, TOKEN
from tests.sim_api.fake_rm import FakeResourceManager
from toposcope.rm.api import make_api_app

# Built at import: schemathesis makes one test per operation at collection time (its lazy
# fixture loader does not run under pytest 9). The fake's state carries across cases, which
# only widens what is exercised: every state it can reach is a legitimate one.
APP = make_api_app(FakeResourceManager(), token=TOKEN)
# A request can match the schema and still be refused by the resource manager (CPUs not on
# the node: 400; GPUs taken: 409; unknown workload: 404), so those count as accepting it.
CONFIG = schemathesis.config.SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "400", "401", "403", "404", "409"]
            }
        }
    }
)
schema = schemathesis.openapi.from_wsgi(f"{BASE}/openapi.json", APP, config=CONFIG)


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_server_conforms_to_its_openapi_document(case: schemathesis.Case[Any]) -> None:
    case.call_and_validate(headers=AUTH)
