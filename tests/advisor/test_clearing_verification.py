"""Verification of a clearing, a recommendation that moves jobs out of another job's way: each
job moved aside is measured where it went (harmful, and reverted where it may be, when one was
slowed by more than the harm threshold), and the clearing paid only when the job it cleared
for took the GPUs it freed; neutral when that job never came, calibration taught only by a
gain of that job that was measured.

The clearings are the policies' own: nic-affinity's move of a single-node job off the NIC-near
GPUs of a multi-node job's node (the nic-moves tests' cluster) and fabric-placement's move of a
job off a leaf for a pending job (Slurm's tree example of the fabric-placement tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.test_gang_verification import Reverts
from tests.advisor.test_nic_moves import evaluate, part
from tests.advisor.test_nic_moves import model as nic_model
from tests.advisor.test_policy_fabric_placement import model as tree_model
from tests.advisor.test_policy_fabric_placement import policy as tree_policy
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.calibration import outcome_pairs
from toposcope.advisor.joint_verification import start_verification
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule
from toposcope.advisor.verifier import Verifier
from toposcope.report.advisor_api import Verdict, Verification
from toposcope.report.recommendation import Recommendation

APPLIED = 1_700_000_000.0
RULE = VerificationRule(verify_after_seconds=60.0, give_up_seconds=600.0)
DUE = APPLIED + RULE.verify_after_seconds + 1
GIVE_UP = APPLIED + RULE.give_up_seconds


def running(placed: Mapping[str, tuple[str, tuple[int, ...], float]]) -> list[WorkloadModel]:
    """Workloads name -> (node, GPUs, share of their SMs busy)."""
    return [
        replace(part(name, node, gpus), gpu_sm_active=dict.fromkeys(gpus, sm))
        for name, (node, gpus, sm) in placed.items()
    ]


def nic_cluster(placed: Mapping[str, tuple[str, tuple[int, ...], float]]) -> ClusterModel:
    """The nic-moves cluster (g-01..g-03, job ``dp`` of parts dp-a and dp-b) running ``placed``
    (the parts of dp among them).
    """
    base = nic_model()
    return replace(base, workloads=tuple(running(placed)))


#: before: dp's parts on NIC-far GPUs 4-7 of g-01 and g-02 at 40%, vision on g-01's near GPUs
BEFORE = {
    "dp-a": ("g-01", (4, 5, 6, 7), 0.4),
    "dp-b": ("g-02", (4, 5, 6, 7), 0.4),
    "vision": ("g-01", (0, 1, 2, 3), 0.5),
}


def nic_clearing() -> tuple[Recommendation, ClusterModel]:
    """nic-affinity's clearing: vision off g-01's near GPUs (to g-03's far ones) for dp."""
    before = nic_cluster(BEFORE)
    [rec], _ = evaluate(before)
    assert rec.proposed["for"] == "dp" and rec.proposed["workload"] == "vision"
    assert (rec.proposed["node"], rec.proposed["gpus"]) == ("g-03", [4, 5, 6, 7])
    return rec, before


def applied(tmp_path: Path, rec: Recommendation, before: ClusterModel) -> Verifier:
    """A verifier over a fresh log in which ``rec`` was applied on ``before``."""
    db = tmp_path / "audit.sqlite"
    outcomes = OutcomeLog(db)
    start_verification(outcomes, rec, before, APPLIED)
    return Verifier(AuditLog(db), outcomes, RULE, Reverts())


def judged(verifier: Verifier, rec: Recommendation) -> Verification:
    found = verifier.outcomes.get(rec.id)
    assert found is not None
    return found


def reverts(verifier: Verifier) -> list[tuple[str, bool]]:
    hook = verifier.revert_harmful
    assert isinstance(hook, Reverts)
    return hook.calls


def test_a_clearing_whose_job_took_the_freed_gpus_and_whose_moved_job_kept_pace_is_paid(
    tmp_path: Path,
) -> None:
    rec, before = nic_clearing()
    verifier = applied(tmp_path, rec, before)
    [item] = verifier.outcomes.pending()
    assert item.made_for == "dp"
    # the job cleared for first (its gain is the estimate), the job moved aside after it with
    # the GPUs it frees, read from the model
    assert [(j.job, j.weight, j.target, j.from_gpus) for j in item.jobs] == [
        ("dp", 1.0, True, ()),
        ("vision", 0.0, False, (0, 1, 2, 3)),
    ]
    assert item.jobs[0].baseline.sm_active == pytest.approx(0.4)
    # vision went to g-03 as fast as before; dp has not moved yet: pending
    aside = {"vision": ("g-03", (4, 5, 6, 7), 0.5)}
    waiting = nic_cluster({**BEFORE, **aside})
    verifier.verify(waiting, DUE)
    found = judged(verifier, rec)
    assert found.verdict == Verdict.PENDING, found.detail
    assert "waiting for dp" in found.detail
    # dp-a moved onto the freed near GPUs of g-01 (dp-b onto g-02's): paid, dp 50% faster
    came = {"dp-a": ("g-01", (0, 1, 2, 3), 0.6), "dp-b": ("g-02", (0, 1, 2, 3), 0.6)}
    verifier.verify(nic_cluster({**came, **aside}), DUE + 60)
    found = judged(verifier, rec)
    assert found.verdict == Verdict.PAID, found.detail
    assert "runs on the freed GPUs: g-01 GPUs [0, 1, 2, 3]" in found.detail
    assert found.measured_gain == pytest.approx(0.5)
    assert [j.measured_gain for j in found.jobs] == [pytest.approx(0.5), pytest.approx(0.0)]
    assert reverts(verifier) == []
    # dp's gain was measured: calibration learns the clearing's estimate against it
    [(cell, estimated, gain)] = outcome_pairs(verifier.outcomes)
    assert cell[:2] == ("migrate-job", "nic-affinity") and estimated > 0
    assert gain == pytest.approx(0.5)
    # the API answer carries both jobs and the job cleared for, and reads back the same
    data = found.to_dict()
    assert data["made_for"] == "dp" and data["jobs"][1]["from_gpus"] == [0, 1, 2, 3]
    assert Verification.from_json(data) == found


def test_a_clearing_that_slowed_the_job_it_moved_is_harmful_and_reverted(
    tmp_path: Path,
) -> None:
    rec, before = nic_clearing()
    came = {"dp-a": ("g-01", (0, 1, 2, 3), 0.6), "dp-b": ("g-02", (0, 1, 2, 3), 0.6)}
    slowed = nic_cluster({**came, "vision": ("g-03", (4, 5, 6, 7), 0.2)})
    verifier = applied(tmp_path, rec, before)
    verifier.verify(slowed, DUE)
    found = judged(verifier, rec)
    # the job cleared for took the GPUs, but the job moved aside runs 60% slower
    assert found.verdict == Verdict.HARMFUL, found.detail
    assert "slowed by more than 10%: vision" in found.detail
    assert "vision: SM active 50% -> 20% (-60%)" in found.detail
    assert found.jobs[1].measured_gain == pytest.approx(-0.6)
    assert reverts(verifier) == [(rec.id, True)]
    # one whose resource manager called the move irreversible keeps its verdict, not undone
    (tmp_path / "kept").mkdir()
    other = applied(tmp_path / "kept", rec, before)
    [action] = rec.actions
    request = replace(action, request_id=f"{rec.id}-0")
    other.audit.record_intent(rec.id, request, actor="test", backend="sim", before=None)
    other.audit.record_result(request.request_id, "succeeded", irreversible=True)
    other.verify(slowed, DUE)
    assert judged(other, rec).verdict == Verdict.HARMFUL
    assert reverts(other) == [(rec.id, False)]


def test_a_clearing_whose_job_never_came_is_neutral_at_give_up(tmp_path: Path) -> None:
    rec, before = nic_clearing()
    verifier = applied(tmp_path, rec, before)
    # vision moved and runs as fast; dp stays on its far GPUs the whole time
    stayed = nic_cluster({**BEFORE, "vision": ("g-03", (4, 5, 6, 7), 0.5)})
    verifier.verify(stayed, DUE)
    assert judged(verifier, rec).verdict == Verdict.PENDING
    verifier.verify(stayed, GIVE_UP)
    found = judged(verifier, rec)
    assert found.verdict == Verdict.NEUTRAL, found.detail
    assert "dp did not use the freed GPUs within 600s" in found.detail
    assert "restarted 1 job(s) for nothing" in found.detail
    assert "dp (runs on g-01 GPUs [4, 5, 6, 7], g-02 GPUs [4, 5, 6, 7])" in found.detail
    assert found.measured_gain is None and found.measured is None
    # no gain of dp measured: calibration is left alone
    assert outcome_pairs(verifier.outcomes) == []
    assert reverts(verifier) == []


def test_a_clearing_whose_moved_job_lost_its_series_is_undetermined_at_give_up(
    tmp_path: Path,
) -> None:
    rec, before = nic_clearing()
    verifier = applied(tmp_path, rec, before)
    came = {"dp-a": ("g-01", (0, 1, 2, 3), 0.6), "dp-b": ("g-02", (0, 1, 2, 3), 0.6)}
    gone = nic_cluster(came)  # vision ended: nothing says whether it ran slower
    verifier.verify(gone, DUE)
    found = judged(verifier, rec)
    assert found.verdict == Verdict.PENDING, found.detail
    assert "vision: no series in this analysis" in found.detail
    verifier.verify(gone, GIVE_UP)
    assert judged(verifier, rec).verdict == Verdict.UNDETERMINED


def test_a_leaf_clearing_is_paid_when_the_pending_job_starts_on_the_cleared_node(
    tmp_path: Path,
) -> None:
    held = {"dev0": 7200, "dev1": 7200, "dev6": 7200, "dev7": 7200, "dev12": 7200, "dev13": 7200}
    before = tree_model(held, {"mid": 40})
    moves, _ = tree_policy().evaluate(before).recommendations
    assert moves.proposed["for"] == "mid"
    before = replace(
        before,
        workloads=tuple(
            replace(w, gpu_sm_active=dict.fromkeys(w.gpus, 0.5)) for w in before.workloads
        ),
    )
    verifier = applied(tmp_path, moves, before)
    [item] = verifier.outcomes.pending()
    # mid was pending: nothing to compare it with; job-dev0 leaves dev0's eight GPUs
    assert [(j.job, j.from_node, j.node, j.from_gpus) for j in item.jobs] == [
        ("mid", "", "dev0", ()),
        ("job-dev0", "dev0", "dev10", tuple(range(8))),
    ]
    others = [w for w in before.workloads if w.name != "job-dev0"]
    aside = replace(next(w for w in before.workloads if w.name == "job-dev0"), node="dev10")
    mid = [
        WorkloadModel("mid", node, gpus=tuple(range(8)), gpu_sm_active=dict.fromkeys(range(8), 0.7))
        for node in ("dev0", "dev2", "dev3", "dev4", "dev5")
    ]
    verifier.verify(replace(before, workloads=(*others, aside, *mid), pending=()), DUE)
    found = judged(verifier, moves)
    assert found.verdict == Verdict.PAID, found.detail
    assert "cleared dev0 GPUs [0, 1, 2, 3, 4, 5, 6, 7] for mid" in found.detail
    # mid's gain is not measured (it was pending): the verdict does not teach calibration
    assert found.measured_gain is None and found.measured is None
    assert found.jobs[0].measured is not None and found.jobs[0].measured.sm_active == 0.7
    assert outcome_pairs(verifier.outcomes) == []


def test_calibration_reads_a_clearing_only_by_the_gain_measured_for_its_job(
    tmp_path: Path,
) -> None:
    rec, before = nic_clearing()
    verifier = applied(tmp_path, rec, before)
    [item] = verifier.outcomes.pending()
    # settled with figures that the GPU-utilization proxy would read as a third slower
    # (90% -> 60%), but no gain measured for dp: nothing to learn
    assert item.baseline.gpu_utilization == pytest.approx(0.9)
    slower = replace(item.baseline, gpu_utilization=0.6)
    verifier.outcomes.settle(rec.id, Verdict.PAID, slower, "paid", DUE)
    assert outcome_pairs(verifier.outcomes) == []
    # once dp's gain is measured, that is what calibration reads
    verifier.outcomes.settle(rec.id, Verdict.PAID, slower, "paid", DUE, 0.25)
    [(_, _, gain)] = outcome_pairs(verifier.outcomes)
    assert gain == pytest.approx(0.25)
