"""Verification of job moves, placements and releases by the advisor service, against the
fake PromQL API and the fake resource manager: a move judged by its job's progress signals
(reverted when it slowed the job), a placement by the placed job running, a release by its
GPUs being freed and reused, and a ``--progress-metric`` template fed a hostile name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.fakes import FakeResourceManager, FakeServer
from tests.advisor_serve.conftest import (
    RATE_DIVISOR,
    RM_TOKEN,
    SPREAD,
    Bench,
    Clock,
    Placement,
    PromQL,
    call,
    host_text,
    serving,
)
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.loaders import PrometheusLoader, Window
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule
from toposcope.advisor.policies import build
from toposcope.advisor.progress_metrics import parse_progress_metric
from toposcope.advisor.rmclients import HttpResourceManager
from toposcope.advisor.service import AdvisorService, AnalysisSettings
from toposcope.errors import ConfigError
from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionState,
    Allocation,
    ResourceManager,
    WorkloadState,
    WorkloadView,
)

#: GPU k on NUMA node k // 2; 0-1 and 2-3 share a PCIe switch, pairs across are SYS
LINKS = {(0, 1): "PIX", (2, 3): "PIX"}
#: a workload name that would end the label matcher and add PromQL if pasted in unescaped
HOSTILE = 'evil"} or vector(1) or x{a="\\'


def _label(value: str) -> str:
    """``value`` escaped as an exposition-format label value."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def gpu_text(
    holders: Mapping[str, Sequence[int]],
    sm_active: Mapping[str, float],
    link_bytes: Mapping[str, float] | None = None,
    steps: Mapping[str, float] | None = None,
) -> str:
    """Four GPUs; each workload of ``holders`` holds its GPUs at 90% utilization with the
    given SM-active share, PCIe bytes per second and (``steps``) training steps per second.
    """
    busy = {g for gpus in holders.values() for g in gpus}
    lines = ["# TYPE toposcope_gpu_info gauge"]
    for g in range(4):
        lines.append(
            f'toposcope_gpu_info{{gpu="{g}",UUID="GPU-{g}",pci_bus_id="0000:0{g}:00.0",'
            f'modelName="A100",numa_node="{g // 2}",cpu_affinity="",driver_version="1",'
            'mig_mode="",GPU_I_ID="",GPU_I_PROFILE=""} 1'
        )
    lines.append("# TYPE toposcope_gpu_up gauge")
    lines += [f'toposcope_gpu_up{{gpu="{g}"}} 1' for g in range(4)]
    lines.append("# TYPE toposcope_gpu_utilization_ratio gauge")
    lines += [
        f'toposcope_gpu_utilization_ratio{{gpu="{g}"}} {0.9 if g in busy else 0}' for g in range(4)
    ]
    lines.append("# TYPE toposcope_gpu_link_info gauge")
    for a in range(4):
        for b in range(4):
            if a != b:
                link = LINKS.get((min(a, b), max(a, b)), "SYS")
                lines.append(f'toposcope_gpu_link_info{{gpu="{a}",peer_gpu="{b}",link="{link}"}} 1')
    info, sm, pcie, progress = [], [], [], []
    for name, gpus in sorted(holders.items()):
        for g in gpus:
            who = f'workload="{_label(name)}",gpu="{g}"'
            info.append(f"toposcope_workload_gpu_info{{{who}}} 1")
            sm.append(
                f'toposcope_workload_gpu_sm_active_ratio{{{who},source="gpm"}} {sm_active[name]}'
            )
            rate = (link_bytes or {}).get(name, 1e9) * RATE_DIVISOR
            pcie.append(
                f'toposcope_workload_gpu_pcie_bytes_total{{{who},direction="tx",source="gpm"}} '
                f"{rate}"
            )
        if steps and name in steps:
            progress.append(
                f'toposcope_test_steps_total{{job="{_label(name)}"}} {steps[name] * RATE_DIVISOR}'
            )
    lines += ["# TYPE toposcope_workload_gpu_info gauge", *info]
    lines += ["# TYPE toposcope_workload_gpu_sm_active_ratio gauge", *sm]
    lines += ["# TYPE toposcope_workload_gpu_pcie_bytes_total counter", *pcie]
    if progress:
        lines += ["# TYPE toposcope_test_steps_total counter", *progress]
    return "\n".join(lines) + "\n"


class OneWayRM(FakeResourceManager):
    """The fake resource manager, answering that its job moves cannot be undone (as a
    backend that restarted the job from a checkpoint elsewhere would).
    """

    def _carry_out(self, request: ActionRequest) -> ActionState:
        state = super()._carry_out(request)
        return replace(state, irreversible=request.kind == ActionKind.MIGRATE)


class QueueingRM(FakeResourceManager):
    """The fake resource manager, with ``queued`` workloads pending (waiting for GPUs)."""

    def __init__(self, token: str, workloads: dict[str, Allocation], queued: set[str]) -> None:
        super().__init__(token, workloads)
        self.queued = queued

    def workloads(self) -> list[WorkloadView]:
        views = super().workloads()
        return [
            WorkloadView(v.name, v.kind, WorkloadState.PENDING, None, 2)
            if v.name in self.queued
            else v
            for v in views
        ]


def service_for(
    bench: Bench, policies: list[str], progress_metrics: Sequence[str] = ()
) -> AdvisorService:
    """The advisor service on ``bench`` with ``policies`` and ``--progress-metric`` settings."""

    def factory(nodes: Sequence[str], out: object) -> ResourceManager:
        return HttpResourceManager(bench.rm_server.url, RM_TOKEN, timeout=5)

    return AdvisorService(
        PrometheusLoader(bench.prometheus.url, timeout=5, retries=0),
        build(policies),
        AnalysisSettings(Window.parse("10m")),
        manager_factory=factory,
        backend_name="sim",
        audit=AuditLog(bench.db),
        outcomes=OutcomeLog(bench.db),
        rule=VerificationRule(verify_after_seconds=bench.verify_after, reuse_window_seconds=600),
        actor="tester@host",
        clock=bench.clock,
        wait_seconds=5.0,
        progress_metrics=[parse_progress_metric(t) for t in progress_metrics],
    )


def gpu_bench(
    tmp_path: Path, allocations: dict[str, Allocation], queued: set[str], one_way: bool = False
) -> Iterator[Bench]:
    promql = PromQL(host_text({"train": SPREAD}))
    rm = OneWayRM(RM_TOKEN, allocations) if one_way else QueueingRM(RM_TOKEN, allocations, queued)
    with FakeServer(promql).run() as prometheus, FakeServer(rm).run() as rm_server:
        yield Bench(promql, prometheus, rm, rm_server, tmp_path / "audit.sqlite", Clock())


@pytest.fixture
def mover(tmp_path: Path) -> Iterator[Bench]:
    """``train`` runs on GPUs 0 and 2 (a SYS link) while the PIX pair 0-1 could be its."""
    yield from gpu_bench(
        tmp_path, {"train": Allocation("n1", list(range(16)), [0, 1], [0, 2])}, set()
    )


def the_one(service: AdvisorService, kind: str) -> str:
    assert service.report is not None
    [rec] = [r for r in service.report.recommendations if r.kind == kind]
    return rec.id


#: a workload that keeps no CPU busy (an idle one)
RESTING = Placement({0: 0.0}, {0: 1.0})


def workloads_text(names: Sequence[str], idle: Sequence[str] = ()) -> str:
    """The host with ``names`` running and ``idle`` resting (names escaped for the
    exposition format).
    """
    running = {_label(name): SPREAD for name in names}
    return host_text(running | {_label(name): RESTING for name in idle})


@pytest.mark.parametrize(("after_sm", "paid"), [(0.8, True), (0.2, False)])
def test_a_job_move_is_judged_by_its_progress(mover: Bench, after_sm: float, paid: bool) -> None:
    mover.promql.text = workloads_text(["train"]) + gpu_text({"train": (0, 2)}, {"train": 0.4})
    service = service_for(mover, ["job-migration"])
    service.analyse_once()
    rec_id = the_one(service, "migrate-job")
    outcome, _ = service.apply(rec_id)
    assert outcome.result == "applied", outcome.detail
    moved_to = mover.rm.allocations["train"].gpus
    assert moved_to != [0, 2]
    started = service.outcomes.get(rec_id)
    assert started is not None and started.baseline.sm_active == pytest.approx(0.4)
    assert started.baseline.link_bytes_per_second == pytest.approx(1e9 * 2)
    mover.promql.text = workloads_text(["train"]) + gpu_text(
        {"train": tuple(moved_to)}, {"train": after_sm}
    )
    mover.clock.now += mover.verify_after + 1
    service.analyse_once()
    judged = service.outcomes.get(rec_id)
    assert judged is not None
    text = service.metrics_text().decode()
    with serving(service) as url:
        status, _, audit = call(f"{url}/api/v1/audit?recommendation={rec_id}")
    assert status == 200, audit
    if paid:
        assert judged.verdict == "paid", judged
        assert judged.measured_gain == pytest.approx(1.0)
        assert "SM active 40% -> 80% (+100%)" in judged.detail
        assert mover.rm.allocations["train"].gpus == moved_to  # kept
    else:
        assert judged.verdict == "harmful", judged
        assert judged.measured_gain == pytest.approx(-0.5)
        assert "SM active 40% -> 20%" in judged.detail and "reverted" in judged.detail
        assert mover.rm.allocations["train"].gpus == [0, 2]  # moved back
    verdict = str(judged.verdict)
    assert f'toposcope_advisor_verifications{{kind="migrate-job",verdict="{verdict}"}} 1.0' in text
    harmful = 'toposcope_advisor_actions_total{kind="migrate-job",result="harmful"}'
    assert f"{harmful} {0.0 if paid else 1.0}" in text
    [listed] = audit["verifications"]
    assert listed["verdict"] == verdict and listed["kind"] == "migrate-job"
    assert listed["measured_gain"] == pytest.approx(judged.measured_gain)
    assert listed["gpus"] == moved_to and listed["target_numa"] is None


def test_a_harmful_move_the_resource_manager_cannot_undo_is_not_reverted(
    tmp_path: Path,
) -> None:
    allocations = {"train": Allocation("n1", list(range(16)), [0, 1], [0, 2])}
    for bench in gpu_bench(tmp_path, allocations, set(), one_way=True):
        bench.promql.text = workloads_text(["train"]) + gpu_text({"train": (0, 2)}, {"train": 0.4})
        service = service_for(bench, ["job-migration"])
        service.analyse_once()
        rec_id = the_one(service, "migrate-job")
        assert service.apply(rec_id)[0].result == "applied"
        moved_to = bench.rm.allocations["train"].gpus
        bench.promql.text = workloads_text(["train"]) + gpu_text(
            {"train": tuple(moved_to)}, {"train": 0.2}
        )
        bench.clock.now += bench.verify_after + 1
        service.analyse_once()
        judged = service.outcomes.get(rec_id)
        assert judged is not None and judged.verdict == "harmful", judged
        assert "not reverted: this migrate-job cannot be undone" in judged.detail
        assert bench.rm.allocations["train"].gpus == moved_to  # left where it is
        text = service.metrics_text().decode()
        assert 'toposcope_advisor_actions_total{kind="migrate-job",result="harmful"} 1.0' in text
        assert 'toposcope_advisor_actions_total{kind="migrate-job",result="reverted"}' not in text


def test_a_progress_metric_template_escapes_a_hostile_name(tmp_path: Path) -> None:
    allocations = {HOSTILE: Allocation("n1", list(range(16)), [0, 1], [0, 2])}
    for bench in gpu_bench(tmp_path, allocations, set()):
        template = "evil.*=rate(toposcope_test_steps_total{job={workload}}[5m])"
        service = service_for(bench, ["job-migration"], [template])
        bench.promql.text = workloads_text([HOSTILE]) + gpu_text(
            {HOSTILE: (0, 2)}, {HOSTILE: 0.4}, steps={HOSTILE: 2.0}
        )
        service.analyse_once()
        rec_id = the_one(service, "migrate-job")
        assert service.apply(rec_id)[0].result == "applied"
        moved_to = tuple(bench.rm.allocations[HOSTILE].gpus)
        # the SM share falls but the job's own step rate rises: its own metric decides
        bench.promql.text = workloads_text([HOSTILE]) + gpu_text(
            {HOSTILE: moved_to}, {HOSTILE: 0.2}, steps={HOSTILE: 3.0}
        )
        bench.clock.now += bench.verify_after + 1
        service.analyse_once()
        judged = service.outcomes.get(rec_id)
        assert judged is not None and judged.verdict == "paid", judged
        assert "progress metric 2/s -> 3/s (+50%)" in judged.detail
        sent = [
            r.params["query"]
            for r in bench.prometheus.requests
            if "toposcope_test_steps_total" in r.params.get("query", "")
        ]
        literal = '"evil\\"} or vector(1) or x{a=\\"\\\\"'
        assert sent and all(
            q == f"rate(toposcope_test_steps_total{{job={literal}}}[5m])" for q in sent
        ), sent


@pytest.mark.parametrize(
    "text",
    [
        "train",  # no '='
        "=up{job={workload}}",  # no regex
        "(=up{job={workload}}",  # bad regex
        "train=up",  # no placeholder
        "train=up{job={workload}} + {workload}",  # placeholder as PromQL
        "train=rate(up{job={workload}}[5m]",  # unclosed
        'train=up{job={workload},x="}',  # unterminated string
    ],
)
def test_progress_metric_settings_are_checked_strictly(text: str) -> None:
    with pytest.raises(ConfigError, match="--progress-metric"):
        parse_progress_metric(text)


def test_a_regex_matcher_gets_a_regex_escaped_name() -> None:
    setting = parse_progress_metric("a.*=max(up{job=~{workload}})")
    assert setting.promql("a.b(c)") == 'max(up{job=~"a\\\\.b\\\\(c\\\\)"})'


def test_a_placement_is_verified_by_the_placed_job_running(tmp_path: Path) -> None:
    allocations = {"queued": Allocation("n1", [], [], [])}
    for bench in gpu_bench(tmp_path, allocations, {"queued"}):
        bench.promql.text = workloads_text([]) + gpu_text({}, {})
        service = service_for(bench, ["gpu-placement"])
        service.analyse_once()
        rec_id = the_one(service, "place")
        assert service.apply(rec_id)[0].result == "applied"
        started = service.outcomes.get(rec_id)
        assert started is not None and started.verdict == "pending"
        placed = started.gpus
        assert len(placed) == 2
        bench.promql.text = workloads_text(["queued"]) + gpu_text(
            {"queued": placed}, {"queued": 0.7}
        )
        bench.clock.now += bench.verify_after + 1
        service.analyse_once()
        judged = service.outcomes.get(rec_id)
        assert judged is not None and judged.verdict == "paid", judged
        assert "running where placed: SM active 70%" in judged.detail


#: an idle workload holding GPU 3 of ``n1``
IDLE_ON_GPU3 = {"idle": Allocation("n1", list(range(16)), [0, 1], [3])}


def released(bench: Bench) -> tuple[AdvisorService, str]:
    """The service on ``bench`` after it released the idle workload's GPU: (service, id)."""
    text = workloads_text([], idle=["idle"]) + gpu_text({"idle": (3,)}, {"idle": 0.0})
    bench.promql.text = text.replace(
        'toposcope_gpu_utilization_ratio{gpu="3"} 0.9',
        'toposcope_gpu_utilization_ratio{gpu="3"} 0',
    )
    service = service_for(bench, ["idle-release"])
    service.analyse_once()
    rec_id = the_one(service, "release-idle")
    assert service.apply(rec_id)[0].result == "applied"
    return service, rec_id


def test_a_release_nobody_reused_is_neutral(tmp_path: Path) -> None:
    for bench in gpu_bench(tmp_path, IDLE_ON_GPU3, set()):
        service, rec_id = released(bench)
        bench.promql.text = workloads_text([], idle=["idle"]) + gpu_text({}, {})
        bench.clock.now += bench.verify_after + service.verifier.rule.reuse_window_seconds
        service.analyse_once()
        judged = service.outcomes.get(rec_id)
        assert judged is not None and judged.verdict == "neutral", judged
        assert "freed but not reused within 600s" in judged.detail
        assert judged.measured is not None and judged.measured.gpus_free == 1


def test_a_release_that_freed_gpus_others_reused_paid(tmp_path: Path) -> None:
    for bench in gpu_bench(tmp_path, IDLE_ON_GPU3, set()):
        service, rec_id = released(bench)
        assert bench.rm.allocations["idle"].gpus == []
        # freed, nobody has taken it yet: still pending
        bench.promql.text = workloads_text([], idle=["idle"]) + gpu_text({}, {})
        bench.clock.now += bench.verify_after + 1
        service.analyse_once()
        waiting = service.outcomes.get(rec_id)
        assert waiting is not None and waiting.verdict == "pending"
        assert "waiting for another workload" in waiting.detail
        bench.promql.text = workloads_text(["next"], idle=["idle"]) + gpu_text(
            {"next": (3,)}, {"next": 0.6}
        )
        bench.clock.now += 60
        service.analyse_once()
        judged = service.outcomes.get(rec_id)
        assert judged is not None and judged.verdict == "paid", judged
        assert judged.measured is not None and judged.measured.gpus_reused == 1
        text = service.metrics_text().decode()
        assert 'toposcope_advisor_verifications{kind="release-idle",verdict="paid"} 1.0' in text
