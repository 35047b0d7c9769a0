"""The repeat rule, the same on every backend, in process and over the API.

The same ``request_id`` with the same request (CPU, NUMA node and GPU lists compared as sets)
is a repeat, answered with the first action and done once; the same ``request_id`` with a
different request is a 409 naming ``request_id``, and nothing is done. Before, the
simulator refused ``[1, 0]`` after ``[0, 1]`` (409) while the agent took it as a repeat.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.sim_api.backends import Backend
from tests.sim_api.conftest import AUTH, BASE, TOKEN
from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ResourceManagerError,
    request_key,
    same_request,
    to_json,
)
from toposcope.rm.api import make_api_app


def test_the_same_cpus_in_another_order_are_a_repeat(each_backend: Backend) -> None:
    rm, (a, b) = each_backend.rm, each_backend.cpus
    first = rm.apply_once(each_backend.pin("rep-1", [a, b]))
    again = rm.apply_once(each_backend.pin("rep-1", [b, a]))
    assert (first.repeat, again.repeat) == (False, True)
    assert again.state == first.state
    assert rm.recorded() == [first.state]
    assert rm.action("rep-1") == first.state


def test_other_cpus_under_the_same_request_id_are_a_conflict(each_backend: Backend) -> None:
    rm, (a, b) = each_backend.rm, each_backend.cpus
    first = rm.apply(each_backend.pin("rep-2", [a, b]))
    with pytest.raises(ResourceManagerError) as conflict:
        rm.apply(each_backend.pin("rep-2", [a]))
    assert (conflict.value.status, conflict.value.field) == (409, "request_id")
    assert "rep-2" in str(conflict.value)
    assert rm.recorded() == [first]


def test_the_api_answers_202_then_200_then_409(each_backend: Backend) -> None:
    client = make_api_app(each_backend.rm, token=TOKEN).test_client()
    a, b = each_backend.cpus

    def post(cpus: list[int]) -> tuple[int, object]:
        body = to_json(each_backend.pin("rep-3", cpus))
        response = client.post(f"{BASE}/actions", json=body, headers=AUTH)
        return response.status_code, response.get_json()

    created, first = post([a, b])
    repeated, again = post([b, a])
    conflicted, refusal = post([a])
    assert (created, repeated, conflicted) == (202, 200, 409)
    assert again == first
    assert isinstance(refusal, dict) and refusal["field"] == "request_id"
    assert len(each_backend.rm.recorded()) == 1


def test_a_refused_request_leaves_its_id_free(each_backend: Backend) -> None:
    a, _ = each_backend.cpus
    with pytest.raises(ResourceManagerError):
        each_backend.rm.apply(each_backend.pin("rep-4", []))
    assert not each_backend.rm.apply_once(each_backend.pin("rep-4", [a])).repeat


def test_the_rule_compares_sets_and_ignores_only_the_reason() -> None:
    base = ActionRequest("r", ActionKind.PIN, "w", "n1", [3, 1, 2], [1, 0], [])
    assert same_request(base, replace(base, cpus=[1, 2, 3, 3], mems=[0, 1]))
    assert request_key(replace(base, reason="another reason")) == request_key(base)
    for other in (
        replace(base, cpus=[1, 2]),
        replace(base, mems=[0]),
        replace(base, gpus=[0]),
        replace(base, node="n2"),
        replace(base, workload="v"),
        replace(base, kind=ActionKind.MIGRATE_MEMORY),
    ):
        assert not same_request(base, other), other
