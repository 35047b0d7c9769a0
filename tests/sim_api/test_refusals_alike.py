"""A bad request is refused with the same status, field and words by every backend, whether
it is built in Python or arrives as an API body: the checks live once, in the core.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.sim_api.backends import Backend
from tests.sim_api.conftest import AUTH, BASE, TOKEN
from toposcope.rm import ActionKind, ResourceManagerError, to_json
from toposcope.rm.api import make_api_app
from toposcope.rm.fields import INDEX_LIMIT

BAD: list[tuple[str, dict[str, Any], int, str, str]] = [
    ("negative-cpu", {"cpus": [-1]}, 422, "cpus", "greater than or equal to 0"),
    ("cpu-over-the-limit", {"cpus": [INDEX_LIMIT]}, 422, "cpus", f"less than {INDEX_LIMIT}"),
    ("too-many-cpus", {"cpus": [0] * (INDEX_LIMIT + 1)}, 422, "cpus", "at most"),
    ("node-not-a-host-name", {"node": "a b"}, 422, "node", "is not a host name"),
    ("empty-request-id", {"request_id": ""}, 422, "request_id", "request id ''"),
    ("request-id-with-space", {"request_id": "a b"}, 422, "request_id", "without spaces"),
    ("control-character", {"workload": "w\n"}, 422, "workload", "control characters"),
    ("long-reason", {"reason": "x" * 5000}, 422, "reason", "at most 4096"),
    ("pin-without-cpus", {"cpus": []}, 400, "cpus", "pin needs cpus"),
    ("move-without-mems", {"kind": ActionKind.MIGRATE_MEMORY}, 400, "mems", "needs mems"),
    ("place-without-node", {"kind": ActionKind.PLACE, "node": None}, 400, "node", "a node"),
]


@pytest.mark.parametrize(
    ("changes", "status", "field", "words"),
    [case[1:] for case in BAD],
    ids=[case[0] for case in BAD],
)
def test_a_bad_request_is_refused_alike_in_process_and_over_the_api(
    each_backend: Backend, changes: dict[str, Any], status: int, field: str, words: str
) -> None:
    request = replace(each_backend.pin("bad-1", list(each_backend.cpus)), **changes)
    with pytest.raises(ResourceManagerError) as refused:
        each_backend.rm.apply(request)
    assert (refused.value.status, refused.value.field) == (status, field)
    assert words in str(refused.value)
    client = make_api_app(each_backend.rm, token=TOKEN).test_client()
    answer = client.post(f"{BASE}/actions", json=to_json(request), headers=AUTH)
    assert answer.status_code == status
    assert answer.get_json() == {"error": str(refused.value), "field": field}
    assert each_backend.rm.recorded() == []


def test_every_problem_is_named_at_once(each_backend: Backend) -> None:
    request = replace(each_backend.pin("", [-1]), node="-x-")
    with pytest.raises(ResourceManagerError) as refused:
        each_backend.rm.apply(request)
    message = str(refused.value)
    assert refused.value.field == "request_id"
    for where in ("request_id:", "node:", "cpus.0:"):
        assert where in message
