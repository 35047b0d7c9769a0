"""The applier: dry run, a fake resource-manager API, limits, idempotency, crash, revert."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.fakes import Answer, FakeResourceManager, FakeServer, Request
from tests.procs import free_port
from toposcope.advisor.applying import Applier
from toposcope.advisor.audit import AuditLog, AuditStateError, recommendation_state
from toposcope.advisor.recommendations import make_recommendation
from toposcope.advisor.rmclients import (
    DryRunResourceManager,
    HttpResourceManager,
    make_resource_manager,
    read_token,
    resolver_from_options,
)
from toposcope.errors import ConfigError
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)
from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    Allocation,
    ResourceManagerError,
)

TOKEN = "t0ken"
ACTOR = "tester@host"


def pin(workload: str, node: str = "n1", gain: float = 0.5) -> Recommendation:
    return make_recommendation(
        kind=RecommendationKind.PIN,
        policy="numa-pinning",
        target=Target(node, workload),
        summary=f"pin {workload}",
        current={},
        proposed={"numa_node": 0, "gain": gain},
        evidence=[Evidence("toposcope_workload_memory_bytes", {"numa_node": "1"}, 1.0)],
        estimated_gain=gain,
        gain_model="test",
        confidence=0.8,
        risk=Risk.LOW,
        actions=[
            ActionRequest("", ActionKind.PIN, workload, node, [0, 1, 2, 3], [0]),
            ActionRequest("", ActionKind.MIGRATE_MEMORY, workload, node, mems=[0]),
        ],
        claims=[f"workload:{node}/{workload}"],
    )


def release(workload: str) -> Recommendation:
    return make_recommendation(
        kind=RecommendationKind.RELEASE_IDLE,
        policy="idle-release",
        target=Target("n1", workload, (2,)),
        summary=f"release {workload}",
        current={},
        proposed={"gpus": []},
        evidence=[],
        estimated_gain=0.25,
        gain_model="test",
        confidence=0.8,
        risk=Risk.MEDIUM,
        actions=[ActionRequest("", ActionKind.RELEASE, workload, "n1", gpus=[2])],
    )


def start_allocations() -> dict[str, Allocation]:
    return {
        "train": Allocation("n1", list(range(8)), [0, 1], [0]),
        "db": Allocation("n1", list(range(8)), [0, 1], []),
        "other": Allocation("n2", list(range(8)), [0, 1], []),
        "idle": Allocation("n1", [], [], [2]),
    }


@pytest.fixture
def rm() -> Iterator[tuple[FakeResourceManager, FakeServer]]:
    fake = FakeResourceManager(TOKEN, start_allocations())
    with FakeServer(fake).run() as server:
        yield fake, server


@pytest.fixture
def audit(tmp_path: Path) -> AuditLog:
    return AuditLog(tmp_path / "audit.sqlite")


def applier(
    server: FakeServer,
    audit: AuditLog | None,
    token: str = TOKEN,
    max_per_run: int = 10,
    max_per_node: int = 2,
) -> Applier:
    manager = HttpResourceManager(server.url + "/api/v1", token, timeout=5)
    return Applier(
        manager,
        audit,
        actor=ACTOR,
        backend="sim",
        max_per_run=max_per_run,
        max_per_node=max_per_node,
    )


def test_dry_run_prints_the_calls_and_changes_nothing() -> None:
    out = io.StringIO()
    runner = Applier(DryRunResourceManager(out), None, actor=ACTOR, backend="dry-run")
    outcomes = runner.apply([pin("train"), pin("db", gain=0.2)])
    assert [o.result for o in outcomes] == ["dry-run", "dry-run"]
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    body = json.loads(lines[0].split(" ", 3)[3])
    assert body["kind"] == "pin" and body["request_id"] == pin("train").actions[0].request_id
    assert runner.counts[("pin", "dry-run")] == 2


def test_applies_and_records_before_and_after(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    fake, server = rm
    rec = pin("train")
    [outcome] = applier(server, audit).apply([rec])
    assert outcome.result == "applied"
    assert fake.allocations["train"].cpus == [0, 1, 2, 3]
    assert fake.allocations["train"].mems == [0]
    entries = audit.entries(rec.id)
    assert [e.kind for e in entries] == ["pin", "migrate-memory"]
    first = entries[0]
    assert (first.result, first.actor, first.backend) == ("succeeded", ACTOR, "sim")
    assert first.before == start_allocations()["train"]
    assert first.after is not None and first.after.cpus == [0, 1, 2, 3]
    assert first.intent_at <= (first.result_at or "")


def test_second_run_is_idempotent(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    fake, server = rm
    applier(server, audit).apply([pin("train")])
    posts = fake.posts
    [again] = applier(server, audit).apply([pin("train")])
    assert again.result == "skipped" and again.detail == "already applied"
    assert fake.posts == posts


def test_auth_failure_stops_before_any_change(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    fake, server = rm
    with pytest.raises(ResourceManagerError, match="refused the token") as raised:
        applier(server, audit, token="wrong").apply([pin("train")])
    assert raised.value.status == 401
    assert fake.posts == 0 and audit.entries() == []
    assert fake.allocations == start_allocations()


def test_refused_action_is_recorded_as_failed(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    _, server = rm
    rec = pin("ghost")
    [outcome] = applier(server, audit).apply([rec])
    assert outcome.result == "failed" and "unknown workload ghost" in outcome.detail
    [entry] = audit.entries(rec.id)
    assert entry.result == "failed"
    [again] = applier(server, audit).apply([rec])
    assert again.result == "skipped" and again.detail.startswith("failed before")


def test_limits_per_run_and_per_node(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    _, server = rm
    recs = [pin("train", gain=0.5), pin("db", gain=0.4), pin("other", node="n2", gain=0.3)]
    outcomes = applier(server, audit, max_per_node=1, max_per_run=5).apply(recs)
    assert [o.result for o in outcomes] == ["applied", "skipped", "applied"]
    assert "per-node limit of 1 reached on n1" in outcomes[1].detail
    outcomes = applier(server, audit, max_per_run=0).apply([pin("db")])
    assert outcomes[0].detail == "per-run limit of 0 reached"


def test_failed_action_reverts_the_rest_of_its_recommendation(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    fake, server = rm
    fake.fail_kinds.add("migrate-memory")
    rec = pin("train")
    [outcome] = applier(server, audit).apply([rec])
    assert outcome.result == "failed"
    assert "reverted" in outcome.detail
    assert fake.allocations["train"] == start_allocations()["train"]
    results = {e.request_id: (e.result, e.reverted_by) for e in audit.entries(rec.id)}
    pin_id, mem_id = (a.request_id for a in rec.actions)
    assert results[pin_id] == ("succeeded", f"revert-{pin_id}")
    assert results[mem_id][0] == "failed"
    assert results[f"revert-{pin_id}"][0] == "succeeded"
    [again] = applier(server, audit).apply([rec])
    assert again.result == "skipped"


class CrashAfterCall:
    """Stands for the advisor process dying right after the resource manager acted."""

    def __init__(self, inner: HttpResourceManager) -> None:
        self.inner = inner

    def nodes(self) -> list[object]:
        return []

    def workloads(self) -> list[object]:
        return list(self.inner.workloads())

    def apply(self, request: ActionRequest) -> ActionState:
        self.inner.apply(request)
        raise SystemExit("simulated crash between call and result")

    def action(self, action_id: str) -> ActionState:
        return self.inner.action(action_id)


def test_crash_between_intent_and_result_is_recovered(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    fake, server = rm
    rec = pin("train")
    crashing = Applier(
        CrashAfterCall(HttpResourceManager(server.url, TOKEN)),  # type: ignore[arg-type]
        audit,
        actor=ACTOR,
        backend="sim",
    )
    with pytest.raises(SystemExit):
        crashing.apply([rec])
    [row] = audit.entries(rec.id)
    assert row.result is None  # intent written, result never
    restarted = applier(server, audit)
    [settled] = restarted.recover()
    assert settled.result == "succeeded"
    assert settled.after is not None and settled.after.mems == [0]
    posts = fake.posts
    [outcome] = restarted.apply([rec])
    assert outcome.result == "applied"
    assert fake.posts == posts + 1  # only the second action was still to do


def test_intent_never_sent_becomes_not_applied_and_is_retried(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    _, server = rm
    rec = pin("db")
    audit.record_intent(rec.id, rec.actions[0], actor=ACTOR, backend="sim", before=None)
    [settled] = applier(server, audit).recover()
    assert settled.result == "not-applied"
    [outcome] = applier(server, audit).apply([rec])
    assert outcome.result == "applied"
    assert audit.entry(rec.actions[0].request_id).result == "succeeded"  # type: ignore[union-attr]


def test_unreachable_during_recovery_is_unknown(audit: AuditLog) -> None:
    rec = pin("db")
    audit.record_intent(rec.id, rec.actions[0], actor=ACTOR, backend="sim", before=None)
    dead = HttpResourceManager(f"http://127.0.0.1:{free_port()}", TOKEN, timeout=2)
    Applier(dead, audit, actor=ACTOR, backend="sim").recover()
    entry = audit.entry(rec.actions[0].request_id)
    assert entry is not None and entry.result == "unknown" and "unreachable" in entry.error
    assert audit.unresolved()[0].request_id == rec.actions[0].request_id


def test_revert_restores_the_before_state(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    fake, server = rm
    rec = pin("train")
    applier(server, audit).apply([rec])
    outcomes = applier(server, audit).revert(rec.id)
    assert [o.result for o in outcomes] == ["reverted", "reverted"]
    assert fake.allocations["train"] == start_allocations()["train"]
    assert all(e.reverted_by for e in audit.entries(rec.id) if e.reverts is None)
    with pytest.raises(ConfigError, match="nothing applied"):
        applier(server, audit).revert(rec.id)
    [skipped] = applier(server, audit).apply([rec])
    assert skipped.detail == "reverted earlier; not applied again"


def test_release_cannot_be_reverted(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    _, server = rm
    rec = release("idle")
    applier(server, audit).apply([rec])
    [outcome] = applier(server, audit).revert(rec.id)
    assert outcome.result == "failed" and "cannot be reverted" in outcome.detail


def test_manager_factory_and_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    token.chmod(0o600)
    assert read_token(token) == "abc"
    (tmp_path / "empty").write_text("")
    (tmp_path / "empty").chmod(0o600)
    with pytest.raises(ConfigError, match="empty"):
        read_token(tmp_path / "empty")
    assert isinstance(make_resource_manager("dry-run"), DryRunResourceManager)
    with pytest.raises(ConfigError, match="needs --rm-url"):
        make_resource_manager("sim")
    with pytest.raises(ConfigError, match="audit log"):
        Applier(make_resource_manager("sim", url="http://x"), None, actor="a", backend="sim")


def test_agent_backend_routes_each_action_to_its_node() -> None:
    agents = {
        "n1": FakeResourceManager(TOKEN, {"a": Allocation("n1", [0], [0], [])}),
        "n2": FakeResourceManager(TOKEN, {"b": Allocation("n2", [0], [0], [])}),
    }

    def route(request: Request) -> Answer:
        _, _, node, rest = request.path.split("/", 3)
        return agents[node](replace(request, path="/" + rest))

    with FakeServer(route).run() as server:
        agents_map = f"n1={server.url}/agents/n1,n2={server.url}/agents/n2"
        allowed = resolver_from_options(url=None, url_map=agents_map, endpoints=None, token=TOKEN)
        manager = make_resource_manager("agent", token=TOKEN, nodes=["n1", "n2"], agents=allowed)
        assert sorted(w.name for w in manager.workloads()) == ["a", "b"]
        state = manager.apply(ActionRequest("r-1", ActionKind.PIN, "b", "n2", [1], [1]))
        assert state.after is not None and state.after.cpus == [1]
        assert agents["n2"].posts == 1 and agents["n1"].posts == 0
        assert manager.action("r-1").id == "r-1"
        with pytest.raises(ResourceManagerError) as raised:
            manager.action("missing")
        assert raised.value.status == 404
    with pytest.raises(ConfigError, match="allow-list"):
        make_resource_manager("agent", url="http://{node}:1/", nodes=["n1"])


def test_the_audit_log_refuses_moves_its_state_machine_forbids(audit: AuditLog) -> None:
    rec = pin("train")
    action = rec.actions[0]
    rid = action.request_id
    with pytest.raises(AuditStateError, match="not recorded; it cannot become succeeded"):
        audit.record_result(rid, "succeeded")
    audit.record_intent(rec.id, action, actor=ACTOR, backend="sim", before=None)
    with pytest.raises(AuditStateError, match="'done' is not a result"):
        audit.record_result(rid, "done")
    audit.record_result(rid, "running")
    with pytest.raises(AuditStateError, match="is running; it cannot become pending"):
        audit.record_intent(rec.id, action, actor=ACTOR, backend="sim", before=None)
    with pytest.raises(AuditStateError, match="is running; it cannot become reverted"):
        audit.mark_reverted(rid, f"revert-{rid}")
    audit.record_result(rid, "running")
    audit.record_result(rid, "succeeded")
    with pytest.raises(AuditStateError, match="is succeeded; it cannot become running"):
        audit.record_result(rid, "running")

    undo = replace(action, request_id=f"revert-{rid}")
    audit.record_intent(rec.id, undo, actor=ACTOR, backend="sim", before=None, reverts=rid)
    with pytest.raises(AuditStateError, match=f"while its revert revert-{rid} is pending"):
        audit.mark_reverted(rid, undo.request_id)
    audit.record_result(undo.request_id, "failed")
    audit.record_intent(rec.id, undo, actor=ACTOR, backend="sim", before=None, reverts=rid)
    audit.record_result(undo.request_id, "succeeded")
    with pytest.raises(AuditStateError, match=r"revert revert-.* is succeeded; it cannot become"):
        audit.mark_reverted(undo.request_id, rid)
    audit.mark_reverted(rid, undo.request_id)
    assert audit.entry(rid).state == "reverted"  # type: ignore[union-attr]
    with pytest.raises(AuditStateError, match="is reverted; it cannot become"):
        audit.mark_reverted(rid, undo.request_id)

    failed = rec.actions[1]
    audit.record_intent(rec.id, failed, actor=ACTOR, backend="sim", before=None)
    audit.record_result(failed.request_id, "failed", error="refused")
    with pytest.raises(AuditStateError, match=r"action .* is failed; it cannot become pending"):
        audit.record_intent(rec.id, failed, actor=ACTOR, backend="sim", before=None)
    assert [e.state for e in audit.entries(rec.id)] == ["reverted", "succeeded", "failed"]
    assert recommendation_state(audit.entries(rec.id)) == "failed"


def test_a_running_action_the_manager_forgot_is_unknown_before_it_is_sent_again(
    rm: tuple[FakeResourceManager, FakeServer], audit: AuditLog
) -> None:
    fake, server = rm
    rec = pin("db")
    rid = rec.actions[0].request_id
    audit.record_intent(rec.id, rec.actions[0], actor=ACTOR, backend="sim", before=None)
    audit.record_result(rid, "running", action_id="act-1")
    [settled] = applier(server, audit).recover()
    assert (settled.state, settled.action_id) == ("unknown", "act-1")
    assert "unknown action" in settled.error
    [outcome] = applier(server, audit).apply([rec])
    assert outcome.result == "applied"
    assert audit.entry(rid).state == "succeeded"  # type: ignore[union-attr]
    assert fake.allocations["db"].cpus == [0, 1, 2, 3]
