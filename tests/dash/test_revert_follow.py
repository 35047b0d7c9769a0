"""A revert the advisor answers while part of it still runs (HTTP 202: the resource manager
moves a large job's pages back for longer than the advisor's revert waits) is followed by
the page until the advisor settled it: the Dash app (Flask test client) in front of the real
advisor service, whose resource manager runs a pin's revert until the test lets it finish.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.advisor_serve.conftest import (
    API_TOKEN,
    serving,
    the_pin,
)
from tests.advisor_serve.test_revert_settles import SlowPinRevert, slow_revert_stand
from tests.dash.callbacks import (
    UPDATE,
    answered,
    apply_body,
    basic,
    csrf_header,
    follow_body,
    signed_in_app,
)
from toposcope.advisor.audit import REVERTED, recommendation_state
from toposcope.advisor.service import AdvisorService

ALICE = basic("alice", "alice-pw")


@dataclass(frozen=True)
class Bench:
    """The advisor service (its URL and its applied pin) and its resource manager."""

    service: AdvisorService
    url: str
    rec_id: str
    rm: SlowPinRevert


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    with slow_revert_stand(tmp_path) as stand:
        service = stand.service
        assert service.analyse_once() is not None
        rec_id = the_pin(service)
        assert service.apply(rec_id, user="alice")[0].result == "applied"
        with serving(service) as url:
            yield Bench(service, url, rec_id, stand.rm)


@pytest.fixture
def client(bench: Bench, tmp_path: Path) -> FlaskClient:
    return signed_in_app(bench.url, API_TOKEN, tmp_path, timeout=10)


def revert_body(client: FlaskClient, headers: dict[str, str], rec_id: str) -> dict[str, Any]:
    """What the renderer posts when the operator confirms Revert on the first table row."""
    body = apply_body(client, headers, rec_id)
    body["inputs"] = [
        {"id": "recs-confirm-apply", "property": "submit_n_clicks", "value": None},
        {"id": "recs-confirm-revert", "property": "submit_n_clicks", "value": 1},
    ]
    body["changedPropIds"] = ["recs-confirm-revert.submit_n_clicks"]
    return body


def test_a_revert_still_running_when_answered_is_followed_to_reverted(
    bench: Bench, client: FlaskClient
) -> None:
    signed = {**ALICE, **csrf_header(client)}
    sent = answered(
        client.post(UPDATE, json=revert_body(client, signed, bench.rec_id), headers=signed)
    )
    said = json.dumps(sent["recs-outcome"])
    assert f"revert {bench.rec_id}: reverted" in said and "running" in said, said
    following = sent["recs-follow"]["data"]
    assert following is not None and following["action"] == "revert"
    assert sent["recs-follow-tick"]["disabled"] is False

    def followed(tick: int) -> dict[str, dict[str, Any]]:
        body = follow_body(client, ALICE, following, tick)
        return answered(client.post(UPDATE, json=body, headers=ALICE))

    waiting = followed(1)
    assert "still running" in json.dumps(waiting["recs-outcome"])
    assert "recs-follow" not in waiting  # the page keeps following
    bench.rm.finished = True
    assert bench.service.analyse_once() is not None  # the advisor settles the revert
    assert recommendation_state(bench.service.audit.entries(bench.rec_id)) == REVERTED
    final = followed(2)
    shown = json.dumps(final["recs-outcome"])
    assert f"revert {bench.rec_id}: reverted" in shown and "still running" not in shown, shown
    assert final["recs-follow"]["data"] is None
    assert final["recs-follow-tick"]["disabled"] is True
    assert final["recs-version"]["data"] == 2  # the table and audit log are read again
