"""Verification of a multi-node job's move through its parts: the baseline and the later
figures of the job are those of the workloads that make it up (found by the job, wherever
they run now), a job with no part left stays undetermined, and a move out of a job's way is
verified as a clearing for that job (on the job it moved and on whether that job came).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, pcie8
from tests.advisor.fakes import Answer, FakeServer, Request, ok, vector
from tests.advisor.test_fabric_jobs import policy
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.fabric_jobs import workload_parts
from toposcope.advisor.joint_verification import start_verification
from toposcope.advisor.loaders import PrometheusLoader, Window
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule, baseline, parts_of
from toposcope.advisor.progress_metrics import parse_progress_metric
from toposcope.advisor.progress_probe import ProgressProbe
from toposcope.advisor.verifier import Verifier
from toposcope.report.advisor_api import Verdict
from toposcope.report.recommendation import Recommendation

APPLIED = 1_700_000_000.0
RULE = VerificationRule(verify_after_seconds=60.0, give_up_seconds=600.0)
#: the job's step counter, one series per part (as the simulator's gangs publish it)
STEPS = "gang.*=rate(toposcope_test_steps_total{job={workload}}[1m])"


def part(name: str, node: str, sm: float) -> WorkloadModel:
    """One part of the job: 8 GPUs at SM-active share ``sm``, 1 GB/s of PCIe each."""
    gpus = tuple(range(8))
    return WorkloadModel(
        name,
        node,
        gpus=gpus,
        time_left_seconds=36_000.0,
        gpu_sm_active={g: sm for g in gpus},
        gpu_pcie_bytes_per_second={g: 1e9 for g in gpus},
    )


def gang(placed: Mapping[str, tuple[str, float]], fabric: bool = True) -> ClusterModel:
    """Job ``gang`` made of the workloads of ``placed`` (name -> node, SM share) on
    Slurm's tree example (dev0-dev17); ``fabric``: the exporter says which nodes it holds.
    """
    parts = [part(name, node, sm) for name, (node, sm) in placed.items()]
    model = cluster([pcie8(f"dev{n}") for n in range(18)], parts)
    jobs = {"gang": {node: 8 for node, _ in placed.values()}} if fabric else {}
    return replace(model, fabric_jobs=jobs)


#: the job spread over two leaves (dev0 under s0, dev6 under s1), its parts at 40% and 60%
SPREAD = gang({"gang-a": ("dev0", 0.4), "gang-b": ("dev6", 0.6)})


@dataclass
class Reverts:
    """The verifier's revert hook, recording what it was handed."""

    calls: list[tuple[str, bool]] = field(default_factory=list)

    def __call__(self, rec_id: str, kind: str, detail: str, reversible: bool) -> str:
        self.calls.append((rec_id, reversible))
        return f"{detail}; reverted"


def gang_move() -> Recommendation:
    """fabric-placement's move of the spread job onto one leaf (its target: the job's name)."""
    [move] = policy().evaluate(SPREAD).recommendations
    assert move.target.workload == "gang"
    return move


def started(tmp_path: Path, rec: Recommendation, probe: ProgressProbe | None = None) -> Verifier:
    """A verifier over a fresh log in which ``rec`` was applied at :data:`APPLIED`."""
    db = tmp_path / "audit.sqlite"
    outcomes = OutcomeLog(db)
    outcomes.start(rec, baseline(rec, SPREAD, probe), APPLIED, SPREAD)
    return Verifier(AuditLog(db), outcomes, RULE, Reverts(), probe)


@pytest.mark.parametrize(
    ("after_sm", "verdict", "gain"),
    [(0.75, Verdict.PAID, 0.5), (0.3, Verdict.HARMFUL, -0.4)],
)
def test_a_gang_move_is_measured_through_its_parts_wherever_they_went(
    tmp_path: Path, after_sm: float, verdict: Verdict, gain: float
) -> None:
    rec = gang_move()
    verifier = started(tmp_path, rec)
    [item] = verifier.outcomes.pending()
    # the baseline is the job's: the mean SM share of all 16 GPUs, the traffic of both parts
    assert item.baseline.sm_active == pytest.approx(0.5)
    assert item.baseline.link_bytes_per_second == pytest.approx(16e9)
    # gang-b went from dev6 to dev1: found by the job, not where it was
    after = gang({"gang-a": ("dev0", after_sm), "gang-b": ("dev1", after_sm)})
    assert {w.key for w in workload_parts(after, rec.target.node, "gang")} == {
        "dev0/gang-a",
        "dev1/gang-b",
    }
    verifier.verify(after, APPLIED + RULE.verify_after_seconds + 1)
    judged = verifier.outcomes.get(rec.id)
    assert judged is not None and judged.verdict == verdict, judged
    assert judged.measured_gain == pytest.approx(gain)
    assert judged.measured is not None and judged.measured.sm_active == pytest.approx(after_sm)
    assert f"SM active 50% -> {after_sm:.0%}" in judged.detail
    reverts = verifier.revert_harmful
    assert isinstance(reverts, Reverts)
    assert reverts.calls == ([(rec.id, True)] if verdict == Verdict.HARMFUL else [])


@dataclass
class StepRates:
    """A PromQL API answering the step-counter rate of the part its query names."""

    rates: dict[str, float]
    asked: list[str] = field(default_factory=list)

    def __call__(self, request: Request) -> Answer:
        match = re.search(r'job="([^"]*)"', request.params.get("query", ""))
        name = match.group(1) if match else ""
        self.asked.append(name)
        found = [({"job": name}, str(self.rates[name]))] if name in self.rates else []
        return ok(vector(*found))


@pytest.fixture
def steps() -> Iterator[tuple[StepRates, ProgressProbe]]:
    rates = StepRates({"gang-a": 2.0, "gang-b": 2.2})
    with FakeServer(rates).run() as server:
        loader = PrometheusLoader(server.url, timeout=5, retries=0)
        yield rates, ProgressProbe(loader, Window.parse("60s"), [parse_progress_metric(STEPS)])


def test_a_gang_move_is_judged_by_the_mean_progress_of_its_parts(
    tmp_path: Path, steps: tuple[StepRates, ProgressProbe]
) -> None:
    rates, probe = steps
    rec = gang_move()
    verifier = started(tmp_path, rec, probe)
    [item] = verifier.outcomes.pending()
    assert item.baseline.progress == pytest.approx(2.1)
    assert sorted(rates.asked) == ["gang-a", "gang-b"]
    rates.rates = {"gang-a": 3.1, "gang-b": 3.2}
    after = gang({"gang-a": ("dev0", 0.5), "gang-b": ("dev1", 0.5)})
    verifier.verify(after, APPLIED + RULE.verify_after_seconds + 1)
    judged = verifier.outcomes.get(rec.id)
    assert judged is not None and judged.verdict == Verdict.PAID, judged
    assert judged.measured_gain == pytest.approx(3.15 / 2.1 - 1)
    assert "progress metric 2.1/s -> 3.15/s (+50%)" in judged.detail


def test_a_gang_with_no_parts_left_stays_undetermined(tmp_path: Path) -> None:
    rec = gang_move()
    verifier = started(tmp_path, rec)
    # the exporter still names the job, but no workload of it has a series (it ended)
    gone = replace(cluster([pcie8(f"dev{n}") for n in range(18)]), fabric_jobs=SPREAD.fabric_jobs)
    verifier.verify(gone, APPLIED + RULE.verify_after_seconds + 1)
    judged = verifier.outcomes.get(rec.id)
    assert judged is not None and judged.verdict == Verdict.PENDING
    assert judged.detail == "the workload has no series in this analysis"
    verifier.verify(gone, APPLIED + RULE.give_up_seconds)
    judged = verifier.outcomes.get(rec.id)
    assert judged is not None and judged.verdict == Verdict.UNDETERMINED
    assert judged.measured_gain is None


def test_a_move_out_of_a_jobs_way_is_verified_as_a_clearing_for_that_job(
    tmp_path: Path,
) -> None:
    clearing = replace(
        gang_move(),
        current={"for": "gang", "node": "dev0", "gpus": [0, 1]},
        proposed={"for": "gang", "workload": "vision", "node": "dev2", "gpus": [0, 1]},
    )
    outcomes = OutcomeLog(tmp_path / "audit.sqlite")
    start_verification(outcomes, clearing, SPREAD, APPLIED)
    # no longer settled at once: pending, on the job it moved and the job it cleared for
    [judged] = outcomes.pending()
    assert judged.verdict == Verdict.PENDING and judged.made_for == "gang"
    assert [(j.job, j.target, j.from_gpus) for j in judged.jobs] == [
        ("gang", True, ()),
        ("vision", False, (0, 1)),
    ]
    assert judged.jobs[0].baseline.sm_active == pytest.approx(0.5)


def test_one_name_on_several_nodes_is_one_job_a_single_job_and_a_pinned_part_one_part() -> None:
    slurm = gang({"slurm-job-7": ("dev0", 0.5)}, fabric=False)
    other = part("slurm-job-7", "dev6", 0.5)
    both = replace(slurm, workloads=(*slurm.workloads, other))
    # one name on two nodes (a Slurm job without the fabric exporter): both parts
    assert [w.key for w in workload_parts(both, "dev0", "slurm-job-7")] == [
        "dev0/slurm-job-7",
        "dev6/slurm-job-7",
    ]
    # a job move measures the whole job; a pin of one part changed that part alone
    assert len(parts_of(both, "migrate-job", "dev0", "slurm-job-7")) == 2
    assert [w.key for w in parts_of(both, "pin", "dev6", "slurm-job-7")] == ["dev6/slurm-job-7"]
    # on one node only: the workload of that node, none elsewhere
    assert [w.key for w in workload_parts(slurm, "dev0", "slurm-job-7")] == ["dev0/slurm-job-7"]
    assert workload_parts(slurm, "dev6", "slurm-job-7") == []
    # without the exporter's series the simulator's parts are separate jobs
    alone = replace(SPREAD, fabric_jobs={})
    assert workload_parts(alone, "dev0", "gang") == []
