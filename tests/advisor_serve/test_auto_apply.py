"""The automatic loop inside the advisor service: ticks driven by analyses on a fake clock,
a dry run first, limits, blackouts, the kill switch (file and API), the audit log, the
metrics, and the revert of an automatic change measured harmful.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import pytest

from tests.advisor_serve.conftest import (
    API_TOKEN,
    SPREAD,
    STARVED,
    Bench,
    Placement,
    call,
    host_text,
    serving,
    the_pin,
)
from tests.advisor_serve.test_service import value
from tests.procs import poll
from toposcope.advisor.autoapply.config import AutoApplyPolicy, parse_policy
from toposcope.advisor.autoapply.decisions import Decision, DecisionLog
from toposcope.advisor.autoapply.flags import add_auto_apply_arguments, policy_from_args
from toposcope.advisor.autoapply.loop import AutoApplier
from toposcope.advisor.service import AdvisorService
from toposcope.errors import UsageError
from toposcope.report.advisor_api import Verdict
from toposcope.rm import (
    ActionRequest,
    ActionState,
    Allocation,
    NodeView,
    ResourceManager,
    WorkloadView,
)


def with_loop(bench: Bench, policy: AutoApplyPolicy) -> AdvisorService:
    """A service acting through the fake resource manager, its loop on."""
    service = bench.service()
    service.auto_apply = AutoApplier(policy, service.acting, DecisionLog(bench.db), bench.clock)
    return service


def decisions(service: AdvisorService) -> list[tuple[str, str]]:
    """The loop's (decision, code) so far, oldest first."""
    assert service.auto_apply is not None
    return [(d.decision, d.code) for d in reversed(service.auto_apply.decisions.recent())]


def test_off_by_default_nothing_is_applied(bench: Bench) -> None:
    service = bench.service()
    service.analyse_once()
    assert service.auto_apply is None and bench.rm.posts == 0
    with serving(service) as url:
        status, _, body = call(f"{url}/api/v1/auto-apply")
    assert status == 404 and "--auto-apply" in body["error"]


def test_dry_run_first_then_apply_audited_and_counted(bench: Bench) -> None:
    service = with_loop(bench, AutoApplyPolicy())
    service.analyse_once()
    rec_id = the_pin(service)
    assert decisions(service) == [("dry-run", "")]
    assert bench.rm.posts == 0  # the rehearsal sent nothing
    assert service.auto_apply is not None
    [rehearsal] = service.auto_apply.decisions.recent()
    assert "POST /api/v1/actions" in rehearsal.reason and '"kind": "pin"' in rehearsal.reason

    bench.clock.now += 60
    service.analyse_once()
    assert decisions(service)[-1] == ("applied", "")
    assert bench.rm.allocations["train"].cpus == list(range(8))
    rows = service.audit.entries(rec_id)
    assert rows and all(r.actor == "auto-apply via tester@host" for r in rows)
    verification = service.outcomes.get(rec_id)
    assert verification is not None and verification.verdict == Verdict.PENDING

    bench.clock.now += 60
    service.analyse_once()  # the report still holds it: the workload is cooling down
    assert decisions(service)[-1] == ("skipped", "cooldown")
    bench.clock.now += 60
    service.analyse_once()  # the same skip again is not recorded again
    assert len(decisions(service)) == 3
    text = service.metrics_text().decode()
    assert (
        value(text, "toposcope_advisor_auto_decisions_total", kind="pin", decision="applied") == 1
    )
    assert (
        value(text, "toposcope_advisor_auto_decisions_total", kind="pin", decision="dry-run") == 1
    )
    assert value(text, "toposcope_advisor_auto_skipped_total", reason="cooldown") == 1
    assert value(text, "toposcope_advisor_auto_skipped_total", reason="limit-hour") == 0
    assert value(text, "toposcope_advisor_auto_active") == 1
    assert value(text, "toposcope_advisor_auto_stopped") == 0
    assert value(text, "toposcope_advisor_auto_last_tick_timestamp_seconds") == bench.clock.now


def test_an_automatic_change_measured_harmful_is_reverted(bench: Bench) -> None:
    policy = AutoApplyPolicy(dry_run_first=False, cooldown=0, per_node=5)
    service = with_loop(bench, policy)
    service.analyse_once()
    rec_id = the_pin(service)
    assert decisions(service) == [("applied", "")]
    bench.promql.set({"train": STARVED})
    bench.clock.now += bench.verify_after + 1
    service.analyse_once()
    judged = service.outcomes.get(rec_id)
    assert judged is not None and judged.verdict == Verdict.HARMFUL, judged
    assert "reverted" in judged.detail
    assert bench.rm.allocations["train"].cpus == list(range(16))
    # spread again, the same pin is recommended: reverted earlier, it is not applied again
    bench.promql.set({"train": SPREAD})
    bench.clock.now += 60
    service.analyse_once()
    assert the_pin(service) == rec_id
    assert decisions(service)[-1] == ("skipped", "applier")
    assert bench.rm.allocations["train"].cpus == list(range(16))


def test_limits_and_cooldown_hold_across_a_restart(bench: Bench) -> None:
    policy = AutoApplyPolicy(dry_run_first=False, per_node=1, cooldown=7200)
    service = with_loop(bench, policy)
    service.analyse_once()
    rec_id = the_pin(service)
    assert decisions(service) == [("applied", "")]
    service.revert(rec_id)  # a person undoes it; the report offers it again
    # a new service on the same audit database: the last hour is not forgotten
    bench.clock.now += 1800
    again = with_loop(bench, policy)
    again.auto_apply = AutoApplier(
        policy, again.acting, DecisionLog(bench.db), bench.clock, groups=dict
    )
    again.analyse_once()
    [*_, last] = again.auto_apply.decisions.recent(1)
    assert (last.decision, last.code) == ("skipped", "cooldown"), last
    assert "1800s ago" in last.reason


def test_blackout_window_and_dry_run_only(bench: Bench) -> None:
    blackout = parse_policy(
        "dry_run_first: false\nblackouts:\n  - {cron: '* * * * *', duration: 1m}\n", "b.yaml"
    )
    service = with_loop(bench, blackout)
    service.analyse_once()
    assert service.auto_apply is not None
    assert decisions(service) == [] and bench.rm.posts == 0
    assert service.auto_apply.last_state == "blackout: blackouts[0]"
    assert value(service.metrics_text().decode(), "toposcope_advisor_auto_active") == 0

    watching = with_loop(bench, AutoApplyPolicy(dry_run_first=False, dry_run_only=True))
    watching.analyse_once()
    assert decisions(watching) == [("would-apply", "")] and bench.rm.posts == 0


def test_kill_switch_file_and_api_stop_at_once(bench: Bench, tmp_path: Path) -> None:
    switch = tmp_path / "stop"
    service = with_loop(bench, AutoApplyPolicy(dry_run_first=False, kill_switch_file=switch))
    switch.touch()
    service.analyse_once()
    assert service.auto_apply is not None
    assert decisions(service) == [] and bench.rm.posts == 0
    assert service.auto_apply.last_state == f"kill switch: {switch} exists"
    assert value(service.metrics_text().decode(), "toposcope_advisor_auto_stopped") == 1
    switch.unlink()
    with serving(service) as url:
        assert call(f"{url}/api/v1/auto-apply/stop", "POST")[0] == 401
        assert call(f"{url}/api/v1/auto-apply/stop", "POST", token="wrong")[0] == 403
        body = json.dumps({"user": "alice@example.org"}).encode()
        status, _, answer = call(f"{url}/api/v1/auto-apply/stop", "POST", API_TOKEN, body)
        assert status == 200 and answer["active"] is False, answer
        assert answer["stopped"] == "stopped by alice@example.org: stopped through the API"
        service.analyse_once()
        assert bench.rm.posts == 0
        # the stop is kept in the audit database: a restarted loop stays stopped
        restarted = AutoApplier(
            service.auto_apply.policy, service.acting, DecisionLog(bench.db), bench.clock
        )
        assert restarted.halted().startswith("stopped by alice@example.org")
        status, _, answer = call(f"{url}/api/v1/auto-apply/resume", "POST", API_TOKEN)
        assert status == 200 and answer["active"] is True
        service.analyse_once()
        status, _, answer = call(f"{url}/api/v1/auto-apply?limit=5")
    assert status == 200
    assert [d["decision"] for d in answer["decisions"]] == ["applied"]
    assert answer["policy"]["kill_switch_file"] == str(switch)
    assert bench.rm.allocations["train"].cpus == list(range(8))


def test_flags_override_the_file_and_bad_config_exits_2(bench: Bench, tmp_path: Path) -> None:
    policy_file = tmp_path / "auto.yaml"
    policy_file.write_text("kinds: [pin]\nlimits:\n  per_hour: 9\n")
    parser = argparse.ArgumentParser()
    parser.add_argument("--x")
    add_auto_apply_arguments(parser)
    args = parser.parse_args(
        ["--auto-apply", "--auto-apply-config", str(policy_file), "--auto-apply-max-per-node", "3"]
    )
    policy = policy_from_args(args)
    assert policy is not None and (policy.per_hour, policy.per_node) == (9, 3)
    assert policy_from_args(parser.parse_args([])) is None
    with pytest.raises(UsageError, match="--auto-apply-config needs --auto-apply"):
        policy_from_args(parser.parse_args(["--auto-apply-config", str(policy_file)]))
    with pytest.raises(UsageError, match="release-idle is never applied"):
        policy_from_args(parser.parse_args(["--auto-apply", "--auto-apply-kinds", "release-idle"]))

    policy_file.write_text("kinds: [pin]\nper_hour: 3\n")
    command = [
        sys.executable, "-m", "toposcope.cli", "advisor", "serve",
        "--prometheus", bench.prometheus.url, "--audit-db", str(tmp_path / "a.sqlite"),
        "--auto-apply", "--auto-apply-config", str(policy_file),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert f"{policy_file}:2: per_hour: unknown key" in done.stderr


#: a second workload, mostly on NUMA node 1: pinned there, with a smaller gain than "train"
EVAL = Placement({0: 0.6, 1: 1.4}, {0: 1.0, 1: 3.0}, pid=4343)


def two_pins(bench: Bench) -> None:
    """Have the fake exporter report "train" and "eval", each spread over both nodes."""
    bench.promql.text = host_text({"train": SPREAD, "eval": EVAL})
    bench.rm.allocations["eval"] = Allocation("n1", list(range(16)), [0, 1], [])


def test_the_kill_switch_file_stops_the_tick_between_two_actions(
    bench: Bench, tmp_path: Path
) -> None:
    two_pins(bench)
    switch = tmp_path / "stop"
    http = bench.http_factory()

    def factory(nodes: Sequence[str], out: TextIO) -> ResourceManager:
        return Tripping(http(nodes, out), switch)

    service = bench.service(factory=factory)
    policy = AutoApplyPolicy(dry_run_first=False, per_node=5, kill_switch_file=switch)
    service.auto_apply = AutoApplier(policy, service.acting, DecisionLog(bench.db), bench.clock)
    service.analyse_once()
    assert service.report is not None and len(service.report.recommendations) == 2
    # the first (highest gain) was applied, then the switch appeared: nothing more
    assert decisions(service) == [("applied", "")]
    assert bench.rm.allocations["train"].cpus == list(range(8))
    assert bench.rm.allocations["eval"].cpus == list(range(16))
    assert service.auto_apply.last_state == f"kill switch: {switch} exists"


class Tripping:
    """A resource manager that creates the kill-switch file after each action it carries
    out (an operator pulling the switch while the loop is under way).
    """

    def __init__(self, inner: ResourceManager, switch: Path) -> None:
        self.inner = inner
        self.switch = switch

    def nodes(self) -> list[NodeView]:
        return self.inner.nodes()

    def workloads(self) -> list[WorkloadView]:
        return self.inner.workloads()

    def apply(self, request: ActionRequest) -> ActionState:
        state = self.inner.apply(request)
        self.switch.touch()
        return state

    def action(self, action_id: str) -> ActionState:
        return self.inner.action(action_id)


def test_a_stop_through_the_api_waits_for_the_action_under_way(bench: Bench) -> None:
    two_pins(bench)
    service = with_loop(bench, AutoApplyPolicy(dry_run_first=False, per_node=5))
    gate = bench.rm.hold()
    ticking = threading.Thread(target=service.analyse_once, daemon=True)
    ticking.start()
    poll(gate.reached.is_set, what="the first automatic action held at the resource manager")
    stopped = threading.Event()
    with serving(service) as url:

        def stop() -> None:
            call(f"{url}/api/v1/auto-apply/stop", "POST", API_TOKEN)
            stopped.set()

        stopping = threading.Thread(target=stop, daemon=True)
        stopping.start()
        assert service.auto_apply is not None
        poll(
            lambda: service.auto_apply is not None and bool(service.auto_apply.halted()),
            what="the stop recorded",
        )
        assert not stopped.is_set()  # it waits for the action under way
        gate.open()
        stopping.join(timeout=30)
        ticking.join(timeout=30)
    assert stopped.is_set()
    assert decisions(service) == [("applied", "")]  # the second never started
    assert bench.rm.allocations["eval"].cpus == list(range(16))


def test_a_stop_sent_to_one_replica_halts_the_other(bench: Bench) -> None:
    leader = with_loop(bench, AutoApplyPolicy(dry_run_first=False))
    standby = with_loop(bench, AutoApplyPolicy(dry_run_first=False))
    assert leader.auto_apply is not None and standby.auto_apply is not None
    standby.auto_apply.stop("alice", "maintenance")
    assert leader.auto_apply.halted() == "stopped by alice: maintenance"
    leader.analyse_once()
    assert bench.rm.posts == 0
    leader.auto_apply.resume("bob")
    assert standby.auto_apply.halted() == ""
    leader.analyse_once()
    assert decisions(leader) == [("applied", "")]


def test_old_decisions_are_pruned_but_the_cooldown_is_kept(bench: Bench) -> None:
    log = DecisionLog(bench.db)
    month = 31 * 86400.0
    old = Decision(bench.clock.now - month, "pin-old", "pin", "n9", "w", "", "applied", "")
    recent = Decision(bench.clock.now - 3600, "pin-new", "pin", "n9", "w", "", "applied", "")
    log.record(old)
    log.record(recent)
    service = with_loop(bench, AutoApplyPolicy(dry_run_first=False))
    service.analyse_once()
    assert [d.recommendation_id for d in log.acted_since(0)] == ["pin-new", the_pin(service)]
    longer = with_loop(bench, AutoApplyPolicy(dry_run_first=False, cooldown=2 * month))
    log.record(old)
    longer.analyse_once()
    assert "pin-old" in {d.recommendation_id for d in log.acted_since(0)}


def test_a_kill_switch_that_cannot_be_checked_stops_the_loop(bench: Bench, tmp_path: Path) -> None:
    switch = tmp_path / ("x" * 5000)  # checking it fails: the name is too long
    service = with_loop(bench, AutoApplyPolicy(dry_run_first=False, kill_switch_file=switch))
    assert service.auto_apply is not None
    service.analyse_once()
    assert bench.rm.posts == 0
    assert service.auto_apply.last_state.endswith("cannot be checked: File name too long")
