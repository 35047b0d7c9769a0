"""Verification of a recommendation that changes several jobs: an exchange of GPU sets and a
joint re-placement are judged on every job they move, each measured where it went, their
gains combined as the estimate combines them; a job slowed by more than the harm threshold
makes the whole harmful (and reverted) even when the target gained; a placement keeps its
own verdict unless a job moved out of its way was slowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.advisor.builders import pcie8, workload
from tests.advisor.test_fabric_swaps import LONG, joint
from tests.advisor.test_fabric_swaps import model as spread_model
from tests.advisor.test_gang_verification import Reverts
from tests.advisor.test_job_exchange import exchange_of, interleaved, measured
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.joint_verification import changed_jobs, job_baselines, start_verification
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.outcomes import OutcomeLog, VerificationRule, judge_move
from toposcope.advisor.verifier import Verifier
from toposcope.errors import ConfigError
from toposcope.report.advisor_api import Measurement, Verdict, Verification
from toposcope.report.recommendation import Recommendation, RecommendationKind, Target

APPLIED = 1_700_000_000.0
RULE = VerificationRule(verify_after_seconds=60.0, give_up_seconds=600.0)
DUE = APPLIED + RULE.verify_after_seconds + 1


def busy(model: ClusterModel, sm: Mapping[str, float]) -> ClusterModel:
    """``model`` whose workloads named in ``sm`` keep that share of their GPUs' SMs busy."""
    return replace(
        model,
        workloads=tuple(
            replace(w, gpu_sm_active=dict.fromkeys(w.gpus, sm[w.name])) if w.name in sm else w
            for w in model.workloads
        ),
    )


def moved(model: ClusterModel, rec: Recommendation, sm: Mapping[str, float]) -> ClusterModel:
    """``model`` after ``rec``'s joint move: every part of ``proposed.jobs`` on its new node
    and GPUs (the others where they were), busy as ``sm`` says; a job missing from ``sm``
    has ended (no series).
    """
    where = {
        (p["part"], p["from_node"]): (p["node"], tuple(p["gpus"]))
        for j in rec.proposed["jobs"]
        for p in j["parts"]
    }
    workloads = []
    for w in model.workloads:
        node, gpus = where.get((w.name, w.node), (w.node, w.gpus))
        if (w.name, w.node) in where and w.name not in sm:
            continue
        workloads.append(replace(w, node=node, gpus=gpus))
    return busy(replace(model, workloads=tuple(workloads)), sm)


def applied(tmp_path: Path, rec: Recommendation, before: ClusterModel) -> Verifier:
    """A verifier over a fresh log in which ``rec`` was applied on ``before``."""
    db = tmp_path / "audit.sqlite"
    outcomes = OutcomeLog(db)
    start_verification(outcomes, rec, before, APPLIED)
    return Verifier(AuditLog(db), outcomes, RULE, Reverts())


def exchange() -> tuple[Recommendation, ClusterModel]:
    """job-migration's exchange of f and h (both at 50% SM active before it)."""
    model, _ = interleaved(measured(pcie8()))
    rec = exchange_of(model)
    assert rec.target.workload == "f"
    return rec, busy(model, {"f": 0.5, "h": 0.5})


def judged(verifier: Verifier, rec: Recommendation) -> Verification:
    found = verifier.outcomes.get(rec.id)
    assert found is not None
    return found


def test_an_exchange_that_speeds_its_target_up_and_slows_its_partner_more_is_harmful(
    tmp_path: Path,
) -> None:
    rec, before = exchange()
    verifier = applied(tmp_path, rec, before)
    [item] = verifier.outcomes.pending()
    assert [(j.job, j.weight, j.target) for j in item.jobs] == [("f", 0.5, True), ("h", 0.5, False)]
    assert all(j.baseline.sm_active == pytest.approx(0.5) for j in item.jobs)
    after = moved(before, rec, {"f": 0.6, "h": 0.25})
    # the target alone gained 20%: measured alone, as before, it paid
    alone = judge_move(RULE, item.baseline, Measurement(sm_active=0.6), item.estimated_gain)
    assert alone[0] == Verdict.PAID
    verifier.verify(after, DUE)
    found = judged(verifier, rec)
    assert found.verdict == Verdict.HARMFUL, found.detail
    # the mean of +20% and -50%, as the exchange's estimate is the mean of both gains
    assert found.measured_gain == pytest.approx(-0.15)
    gains = {j.job: j.measured_gain for j in found.jobs}
    assert gains == {"f": pytest.approx(0.2), "h": pytest.approx(-0.5)}
    assert "slowed by more than 10%: h" in found.detail
    assert "h: SM active 50% -> 25% (-50%)" in found.detail
    reverts = verifier.revert_harmful
    assert isinstance(reverts, Reverts) and reverts.calls == [(rec.id, True)]


def test_an_exchange_that_speeds_both_jobs_up_is_paid(tmp_path: Path) -> None:
    rec, before = exchange()
    verifier = applied(tmp_path, rec, before)
    verifier.verify(moved(before, rec, {"f": 0.7, "h": 0.6}), DUE)
    found = judged(verifier, rec)
    assert found.verdict == Verdict.PAID, found.detail
    assert found.measured_gain == pytest.approx((0.4 + 0.2) / 2)
    assert found.estimated_gain is not None and found.estimated_gain / 2 <= 0.3
    assert [j.measured_gain for j in found.jobs] == [pytest.approx(0.4), pytest.approx(0.2)]
    assert all(j.measured is not None for j in found.jobs)
    reverts = verifier.revert_harmful
    assert isinstance(reverts, Reverts) and reverts.calls == []
    # the API answer carries each job's part, and reads back the same
    data = found.to_dict()
    assert [j["job"] for j in data["jobs"]] == ["f", "h"]
    assert Verification.from_json(data) == found


def test_a_partner_slowed_beyond_the_threshold_is_harm_even_when_the_mean_gains(
    tmp_path: Path,
) -> None:
    rec, before = exchange()
    verifier = applied(tmp_path, rec, before)
    verifier.verify(moved(before, rec, {"f": 0.8, "h": 0.42}), DUE)
    found = judged(verifier, rec)
    assert found.measured_gain == pytest.approx((0.6 - 0.16) / 2)
    assert found.verdict == Verdict.HARMFUL, found.detail


def test_a_partner_without_series_keeps_the_verdict_pending_then_undetermined(
    tmp_path: Path,
) -> None:
    rec, before = exchange()
    verifier = applied(tmp_path, rec, before)
    gone = moved(before, rec, {"f": 0.7})
    verifier.verify(gone, DUE)
    found = judged(verifier, rec)
    assert found.verdict == Verdict.PENDING
    assert "no progress signal measured before and after yet for h" in found.detail
    verifier.verify(gone, APPLIED + RULE.give_up_seconds)
    assert judged(verifier, rec).verdict == Verdict.UNDETERMINED


def test_a_joint_replacement_weighs_its_jobs_by_gpu_seconds_and_checks_those_moved_aside(
    tmp_path: Path,
) -> None:
    [rec] = joint(LONG)
    jobs = {j.job: j for j in changed_jobs(rec)}
    # 16, 16 and 8 GPUs over the same time left; the jobs moved aside count for harm only
    assert {name: j.weight for name, j in jobs.items()} == {
        "slurm-job-1": pytest.approx(0.4),
        "slurm-job-2": pytest.approx(0.4),
        "slurm-job-3": pytest.approx(0.2),
        "serve": 0.0,
        "notebook": 0.0,
    }
    assert next(iter(jobs.values())).target
    before = busy(spread_model(LONG), dict.fromkeys([*jobs, "vision"], 0.5))
    verifier = applied(tmp_path, rec, before)
    gains = {"slurm-job-1": 0.6, "slurm-job-2": 0.6, "slurm-job-3": 0.55, "notebook": 0.5}
    verifier.verify(moved(before, rec, {**gains, "serve": 0.5, "vision": 0.5}), DUE)
    found = judged(verifier, rec)
    assert found.verdict == Verdict.PAID, found.detail
    assert found.measured_gain == pytest.approx(0.4 * 0.2 + 0.4 * 0.2 + 0.2 * 0.1)
    # the same move that slows a job moved aside by half is harmful
    (tmp_path / "aside").mkdir()
    other = applied(tmp_path / "aside", rec, before)
    other.verify(moved(before, rec, {**gains, "serve": 0.25, "vision": 0.5}), DUE)
    found = judged(other, rec)
    assert found.verdict == Verdict.HARMFUL
    assert found.measured_gain == pytest.approx(0.18)
    assert "slowed by more than 10%: serve" in found.detail


def test_a_single_job_move_records_no_jobs_and_bad_job_lists_are_refused() -> None:
    rec, before = exchange()
    single = replace(rec, proposed={k: v for k, v in rec.proposed.items() if k != "joint"})
    assert changed_jobs(single) == ()
    assert job_baselines(single, before, Measurement()) == ()
    broken: list[dict[str, Any]] = [dict(j) for j in rec.proposed["jobs"]]
    broken[1]["parts"] = [{"part": "h"}]
    with pytest.raises(ConfigError, match="no from_node"):
        changed_jobs(replace(rec, proposed={**rec.proposed, "jobs": broken}))
    with pytest.raises(ConfigError, match="not a list of objects"):
        changed_jobs(replace(rec, proposed={**rec.proposed, "jobs": "f,h"}))


def test_a_defragmentation_adds_up_the_gains_of_the_moved_job_and_of_those_moved_aside() -> None:
    rec, _ = exchange()
    plan = {
        "node": "n8",
        "gpus": [4, 5],
        "defragment": [
            {"workload": "e", "from_node": "n8", "from_gpus": [0, 1], "node": "n8", "gpus": [6, 7]}
        ],
    }
    jobs = changed_jobs(replace(rec, proposed=plan))
    assert [(j.job, j.from_node, j.node, j.weight, j.target) for j in jobs] == [
        ("f", "n8", "n8", 1.0, True),
        ("e", "n8", "n8", 1.0, False),
    ]
    # a move out of a job's way is verified as a clearing for that job, not as a joint move
    assert changed_jobs(replace(rec, proposed={**plan, "for": "big"})) == ()


def test_a_placement_that_slowed_a_job_moved_out_of_its_way_is_harmful(tmp_path: Path) -> None:
    rec, model = exchange()
    before = busy(model, {"e": 0.5})
    plan = {
        "node": "n8",
        "gpus": [0, 1],
        "defragment": [
            {"workload": "e", "from_node": "n8", "from_gpus": [0, 1], "node": "n8", "gpus": [2, 3]}
        ],
    }
    place = replace(
        rec, kind=RecommendationKind.PLACE, target=Target("n8", "p", (0, 1)), proposed=plan
    )

    def after(e_busy: float) -> ClusterModel:
        others = [w for w in before.workloads if w.name not in ("e", "a")]
        e = replace(workload("e", node="n8", gpus=[2, 3]), gpu_sm_active={2: e_busy, 3: e_busy})
        p = replace(workload("p", node="n8", gpus=[0, 1]), gpu_sm_active={0: 0.5, 1: 0.5})
        return replace(before, workloads=(*others, e, p))

    for name, e_busy, verdict in (("kept", 0.5, Verdict.PAID), ("slowed", 0.2, Verdict.HARMFUL)):
        (tmp_path / name).mkdir()
        verifier = applied(tmp_path / name, place, before)
        verifier.verify(after(e_busy), DUE)
        found = judged(verifier, place)
        assert found.verdict == verdict, found.detail
        assert found.measured_gain is None  # a placement has no gain to combine
        assert [j.job for j in found.jobs] == ["p", "e"]
        assert found.jobs[0].detail.startswith("running where placed")
        assert found.jobs[1].measured_gain == pytest.approx(e_busy / 0.5 - 1)
