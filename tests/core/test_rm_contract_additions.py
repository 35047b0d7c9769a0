"""The contract's retry-later refusal, unplace action and irreversible flag, over HTTP too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from toposcope.advisor.audit import AuditLog
from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    ActionStatus,
    BaseResourceManager,
    NodeView,
    ResourceManagerError,
    RetryLaterError,
    WorkloadView,
    is_retry_later,
    parse_request,
)
from toposcope.rm.api import make_api_app


class Recorder(BaseResourceManager):
    """A backend that refuses migrations for now and records what it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[ActionRequest] = []

    def nodes(self) -> list[NodeView]:
        return []

    def workloads(self) -> list[WorkloadView]:
        return []

    def _carry_out(self, request: ActionRequest) -> ActionState:
        self.asked.append(request)
        if request.kind == ActionKind.MIGRATE:
            raise RetryLaterError("a budget allows no disruption now", retry_after_s=30)
        return ActionState(f"a-{request.request_id}", request, ActionStatus.SUCCEEDED)


def test_retry_later_is_a_429_with_retry_after_over_http() -> None:
    rm = Recorder()
    client = make_api_app(rm, token="tok").test_client()
    body = {"request_id": "m1", "kind": "migrate", "workload": "w", "node": "n2"}
    answer = client.post("/api/v1/actions", json=body, headers={"Authorization": "Bearer tok"})
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "30"
    assert "no disruption" in answer.get_json()["error"]
    assert is_retry_later(ResourceManagerError("x", 429))
    assert not is_retry_later(ResourceManagerError("x", 409))
    again = client.post("/api/v1/actions", json=body, headers={"Authorization": "Bearer tok"})
    assert again.status_code == 429  # refused: nothing recorded, the id may be used again


def test_unplace_needs_a_node_and_defaults_to_the_release_of_the_placement() -> None:
    rm = Recorder()
    request = parse_request({"request_id": "u", "kind": "unplace", "workload": "w", "node": "n1"})
    state = rm.apply(request)
    assert state.request == request and state.request.kind == ActionKind.UNPLACE
    assert [a.kind for a in rm.asked] == [ActionKind.RELEASE]
    try:
        rm.apply(replace(request, request_id="v", node=None))
    except ResourceManagerError as exc:
        assert (exc.status, exc.field) == (400, "node")
    else:
        raise AssertionError("an unplace without a node was accepted")


def test_the_audit_log_keeps_irreversible_and_retry_later(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit.sqlite")
    request = ActionRequest("r1", ActionKind.MIGRATE, "w", "n2")
    audit.record_intent("rec", request, actor="a", backend="b", before=None)
    audit.record_result("r1", "retry-later", error="budget")
    assert audit.entry("r1").state == "retry-later"  # type: ignore[union-attr]
    audit.record_intent("rec", request, actor="a", backend="b", before=None)
    audit.record_result("r1", "succeeded", action_id="x", irreversible=True)
    reopened = AuditLog(tmp_path / "audit.sqlite").entry("r1")
    assert reopened is not None and reopened.irreversible is True
