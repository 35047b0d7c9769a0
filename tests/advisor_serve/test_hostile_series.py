"""The advisor service keeps answering when the metrics hold a hostile name: the series is
dropped and counted, and a recommendation that the API's answer model would refuse is left
out of the list rather than failing it for everyone.
"""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.advisor.hostile import HOSTILE_NODE, with_labels
from tests.advisor_serve.conftest import SPREAD, Bench, call, host_text, serving


def _dropped(metrics: str) -> dict[str, float]:
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "toposcope_advisor_series_dropped_total"
    }


def test_the_list_answers_200_with_a_hostile_node_in_the_metrics(bench: Bench) -> None:
    hostile = with_labels(host_text({"train2": SPREAD}, hostname="evil"), node=HOSTILE_NODE)
    bench.promql.text = host_text({"train": SPREAD}) + hostile
    service = bench.dry_service()
    assert service.analyse_once() is not None
    with serving(service) as url:
        status, _, body = call(f"{url}/api/v1/recommendations")
        assert status == 200, body
        targets = {(r["target"]["node"], r["target"]["workload"]) for r in body["recommendations"]}
        assert targets == {("n1", "train")}
        rec_id = body["recommendations"][0]["id"]
        assert call(f"{url}/api/v1/recommendations/{rec_id}")[0] == 200
        dropped = _dropped(call(f"{url}/metrics")[2])
    assert dropped["invalid_node_name"] > 0
    assert dropped["invalid_workload_name"] == 0
    assert any("invalid_node_name" in note["reason"] for note in body["notes"])


def test_a_recommendation_the_answer_model_refuses_is_left_out_of_the_list(
    bench: Bench, caplog: pytest.LogCaptureFixture
) -> None:
    # without the exporter's build info, the node is named by its instance, an address
    text = host_text({"train": SPREAD})
    bench.promql.text = "\n".join(
        line for line in text.splitlines() if "toposcope_exporter_build_info" not in line
    )
    service = bench.dry_service()
    report = service.analyse_once()
    assert report is not None and [r.target.node for r in report.recommendations] == [
        "10.0.0.1:9847"
    ]
    rec_id = report.recommendations[0].id
    with serving(service) as url, caplog.at_level(logging.ERROR, logger="toposcope.advisor.api"):
        status, _, body = call(f"{url}/api/v1/recommendations")
        one_status, _, one = call(f"{url}/api/v1/recommendations/{rec_id}")
    assert status == 200, body
    assert body["recommendations"] == []
    assert one_status == 404, one
    assert "does not serve" in one["error"]
    assert "left out of the list" in caplog.text
