"""job-migration counts the start of a pending job on the GPUs a move leaves
(toposcope.advisor.policies.move_starts): in a plain move's estimate, in the joint choice of
contested sets, and apart from what calibration scales and learns.
"""

from __future__ import annotations

import pytest

from tests.advisor.builders import cluster, pcie4, pcie8, workload
from toposcope.advisor.calibration import calibrated_gain
from toposcope.advisor.gpu_search import GpuSetSearch
from toposcope.advisor.model import ClusterModel, PendingWorkload
from toposcope.advisor.outcomes import start_gain
from toposcope.advisor.policies.gpu_placement import GpuPlacement
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.advisor.policies.move_starts import enabled_start
from toposcope.rm import ActionKind


def _three_waiting(*pending: PendingWorkload) -> ClusterModel:
    """Node a: train across sockets on GPUs 0 and 2, GPU 1 held, GPU 3 free; node b: a free
    switch pair (0, 1), GPUs 2 and 3 held by one job. No node has three free GPUs, and no
    small job can make room for three elsewhere.
    """
    jobs = [
        workload("train", node="a", gpus=[0, 2]),
        workload("x", node="a", gpus=[1]),
        workload("zw", node="b", gpus=[2, 3]),
    ]
    return cluster([pcie4("a"), pcie4("b")], jobs, pending=pending)


def test_a_move_counts_the_start_it_makes_possible() -> None:
    """train's move to b's switch pair leaves a with GPUs 0, 2 and 3 free: the three-GPU job
    that fits nowhere now starts there, and the move's estimate says so.
    """
    [alone] = JobMigration().evaluate(_three_waiting()).recommendations
    assert "starts" not in alone.proposed
    waiting = _three_waiting(PendingWorkload("wait", 3))
    [rec] = JobMigration().evaluate(waiting).recommendations
    assert (rec.proposed["node"], rec.proposed["gpus"]) == ("b", [0, 1])
    [start] = rec.proposed["starts"]
    assert start["pending"] == "wait" and (start["node"], start["gpus"]) == ("a", [0, 2, 3])
    assert start["efficiency_now"] == 0.0 and 0.0 < start["gain"] <= 1.0
    assert rec.estimated_gain == pytest.approx(alone.estimated_gain + start["gain"], abs=1e-6)
    assert "+ the start of pending wait on the GPUs it frees (a GPUs [0, 2, 3]" in rec.gain_model
    assert {"gpu:a/3", "workload:pending/wait"} <= set(rec.claims)
    assert "gpu:a/0" not in rec.claims  # train's own GPU: held until it moves
    assert [a.kind for a in rec.actions] == [ActionKind.MIGRATE]
    assert any(
        "no node has 3 free GPU(s)" in n.reason for n in GpuPlacement().evaluate(waiting).undecided
    )


def test_a_pending_job_with_as_good_a_free_set_adds_nothing() -> None:
    """A pending single-GPU job starts on a free GPU now as well as on one train leaves:
    the move makes its start no better, so the move counts none.
    """
    model = _three_waiting(PendingWorkload("one", 1))
    [rec] = JobMigration().evaluate(model).recommendations
    assert "starts" not in rec.proposed
    search = GpuSetSearch(model, cross_node=True)
    job = next(w for w in model.workloads if w.name == "train")
    target = search.best_for(job)
    assert target is not None
    assert enabled_start(search, model.pending, job, target) is None


def _stuck_across_sockets(*pending: PendingWorkload) -> ClusterModel:
    """pcie8: f across sockets on GPUs 1 and 4, GPUs 0 and 5 free, the other switch pairs
    held by jobs of two GPUs (contention-links, perturbed seed 8, round 2, where no
    defragmentation gives the pending job a switch pair either).
    """
    jobs = [
        workload("f", node="n8", gpus=[1, 4]),
        workload("s23", node="n8", gpus=[2, 3]),
        workload("s67", node="n8", gpus=[6, 7]),
    ]
    return cluster([pcie8()], jobs, pending=pending)


def test_the_joint_choice_weighs_the_start_a_move_makes_possible() -> None:
    """The pending pair's only free set is 0 and 5, across sockets; f wants a switch pair
    that takes one of them. Counting only the start on 0 and 5, f stayed across sockets and
    the pending job started there; f's move leaves a switch pair free (its old GPU and the
    other free one), where the pending job starts a round later: both on a switch pair.
    """
    [alone] = JobMigration().evaluate(_stuck_across_sockets()).recommendations
    assert "starts" not in alone.proposed
    model = _stuck_across_sockets(PendingWorkload("wait", 2))
    [rec] = JobMigration().evaluate(model).recommendations
    assert rec.target.workload == "f" and rec.proposed["worst_link"] == "PIX"
    [start] = rec.proposed["starts"]
    assert start["pending"] == "wait" and start["worst_link"] == "PIX"
    assert set(start["gpus"]).isdisjoint(rec.proposed["gpus"])
    assert set(start["gpus"]) <= {0, 1, 4, 5}
    assert start["efficiency_now"] == pytest.approx(0.5)  # SYS against a switch pair
    assert rec.estimated_gain == pytest.approx(alone.estimated_gain + 0.5, abs=1e-6)
    assert "workload:pending/wait" in rec.claims
    assert all(a.kind == ActionKind.MIGRATE for a in rec.actions)


def test_calibration_scales_the_move_and_keeps_the_start() -> None:
    """The verdict on the move measures the moved job alone: a calibration factor scales the
    move's own part of the estimate, not the pending job's start.
    """
    [rec] = JobMigration().evaluate(_three_waiting(PendingWorkload("wait", 3))).recommendations
    start = start_gain(rec)
    assert start == pytest.approx(rec.proposed["starts"][0]["gain"])
    [plain] = JobMigration().evaluate(_three_waiting()).recommendations
    assert calibrated_gain(rec, 0.5) == pytest.approx(calibrated_gain(plain, 0.5) + start, abs=1e-6)
    assert start_gain(plain) == 0.0


def test_no_start_counts_where_a_defragmentation_starts_the_job_as_well_this_round() -> None:
    """With single-GPU services on the other switch pairs, the pending phase frees a switch
    pair for the pending job this round (the services move to GPUs 0 and 5): f's move would
    start it no better, a round later, so it counts no start and the job is placed now.
    """
    jobs = [
        workload("f", node="n8", gpus=[1, 4]),
        *(workload(f"s{g}", node="n8", gpus=[g]) for g in (2, 3, 6, 7)),
    ]
    model = cluster([pcie8()], jobs, pending=[PendingWorkload("wait", 2)])
    recs = JobMigration().evaluate(model).recommendations
    assert all("starts" not in r.proposed for r in recs)
    placed = [r for r in recs if r.kind == "place"]
    assert [r.target.workload for r in placed] == ["wait"]
    assert placed[0].proposed["worst_link"] == "PIX"
