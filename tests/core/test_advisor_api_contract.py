"""The advisor API's answers are defined once, in the core: the service answers with them and
the Dash app's client reads into them.
"""

from __future__ import annotations

from toposcope.advisor.audit import AuditEntry
from toposcope.advisor.gpu_sets import Placement
from toposcope.dashboards.app import advisorclient
from toposcope.report import advisor_api


def test_the_client_reads_answers_into_the_types_the_service_answers_with() -> None:
    assert advisorclient.AuditRow is advisor_api.AuditRow
    assert advisorclient.RankedPlacement is advisor_api.RankedPlacement
    assert issubclass(AuditEntry, advisor_api.AuditRecord)
    assert issubclass(Placement, advisor_api.GpuSet)


def test_a_row_the_service_sends_reads_back_whole_and_unknown_fields_are_ignored() -> None:
    sent = {
        "seq": 3, "request_id": "pin-1-0", "recommendation_id": "pin-1", "kind": "pin",
        "workload": "train", "node": "n1", "request": {"kind": "pin"}, "actor": "a",
        "backend": "sim", "intent_at": "t0",
        "before": {"node": "n1", "cpus": [0, 1], "mems": [0], "gpus": [0]},
        "result": "succeeded", "result_at": "t1", "action_id": "a1", "after": None,
        "error": "", "reverts": None, "reverted_by": None, "irreversible": False,
        "state": "succeeded", "added_by_a_newer_service": 1,
    }  # fmt: skip
    row = advisor_api.AuditRow.from_json(sent)
    assert row.state == "succeeded" and row.before is not None and row.before.mems == [0]
    assert row.request == {"kind": "pin"} and row.irreversible is False
