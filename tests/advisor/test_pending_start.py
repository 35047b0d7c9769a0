"""A pending job's start in the conflict resolution: it outranks a recommendation only when
that recommendation leaves the job no free GPU set to start on.

Node ``n8`` (two sockets, four PCIe switches: {0,1} {2,3} on socket 0, {4,5} {6,7} on 1)
has one free pair, GPUs 2 and 3; the pending 2-GPU job ``wait`` is placed there, priced
against first fit (the same pair: gain 0).
"""

from __future__ import annotations

from tests.advisor.builders import cluster, pcie8, workload
from toposcope.advisor.capacity_ledger import CapacityLedger, jobs_that_fit
from toposcope.advisor.model import ClusterModel, PendingWorkload, WorkloadModel
from toposcope.advisor.recommendations import make_recommendation, resolve_conflicts
from toposcope.report.recommendation import Recommendation, RecommendationKind, Risk, Target
from toposcope.rm import ActionKind, ActionRequest

HOLDERS = (workload("x", node="n8", gpus=[0]), workload("z", node="n8", gpus=[6, 7]))


def node_with(*running: WorkloadModel) -> ClusterModel:
    """``n8`` with the holders, ``running`` and the pending 2-GPU job ``wait``."""
    return cluster([pcie8()], [*HOLDERS, *running], pending=[PendingWorkload("wait", 2)])


def start_wait() -> Recommendation:
    """gpu-placement's recommendation: ``wait`` on the free pair, gain 0 against first fit."""
    action = ActionRequest("", ActionKind.PLACE, "wait", "n8", gpus=[2, 3])
    return make_recommendation(
        kind=RecommendationKind.PLACE,
        policy="gpu-placement",
        target=Target("n8", "wait", (2, 3)),
        summary="place wait",
        current={"state": "pending"},
        proposed={"gpus": [2, 3]},
        evidence=[],
        estimated_gain=0.0,
        gain_model="test",
        confidence=0.7,
        risk=Risk.LOW,
        actions=[action],
        claims=["gpu:n8/2", "gpu:n8/3", "workload:pending/wait"],
    )


def move(job: WorkloadModel, gpus: list[int], gain: float = 0.5) -> Recommendation:
    """job-migration's move of ``job`` onto ``gpus`` (confidence 0.6)."""
    action = ActionRequest("", ActionKind.MIGRATE, job.name, "n8", gpus=gpus)
    return make_recommendation(
        kind=RecommendationKind.MIGRATE_JOB,
        policy="job-migration",
        target=Target("n8", job.name, job.gpus),
        summary=f"move {job.name}",
        current={"gpus": list(job.gpus)},
        proposed={"gpus": gpus},
        evidence=[],
        estimated_gain=gain,
        gain_model="test",
        confidence=0.6,
        risk=Risk.MEDIUM,
        actions=[action],
        claims=[*(f"gpu:n8/{g}" for g in gpus), f"workload:n8/{job.name}"],
    )


def test_a_move_that_frees_as_many_gpus_as_it_takes_beats_the_start() -> None:
    """``far`` (GPUs 1 and 5, across sockets) moves onto the free switch pair and frees its
    own pair: ``wait`` has a set to start on a round later, so the move wins.
    """
    far = workload("far", node="n8", gpus=[1, 5])
    model = node_with(far, workload("y", node="n8", gpus=[4]))
    relink = move(far, [2, 3])
    kept, notes = resolve_conflicts([start_wait(), relink], CapacityLedger(model))
    assert kept == [relink]
    [note] = notes
    assert "conflicts with" in note.reason and relink.id in note.reason


def test_a_move_that_takes_the_last_free_set_loses_to_the_start() -> None:
    """``guest`` shares GPU 1 with ``host``: moving it onto GPU 2 frees nothing and leaves
    ``wait`` no pair; the start (1 x confidence 0.7) is worth more than the move.
    """
    guest = workload("guest", node="n8", gpus=[1])
    model = node_with(
        guest, workload("host", node="n8", gpus=[1]), workload("y", node="n8", gpus=[4, 5])
    )
    split = move(guest, [2])
    start = start_wait()
    kept, notes = resolve_conflicts([split, start], CapacityLedger(model))
    assert kept == [start]
    [note] = notes
    assert split.id in note.reason and "leave pending wait no free GPU set" in note.reason


def test_a_move_worth_more_than_the_start_keeps_the_last_set() -> None:
    guest = workload("guest", node="n8", gpus=[1])
    model = node_with(
        guest, workload("host", node="n8", gpus=[1]), workload("y", node="n8", gpus=[4, 5])
    )
    split = move(guest, [2], gain=2.0)
    kept, _ = resolve_conflicts([split, start_wait()], CapacityLedger(model))
    assert kept == [split]


def test_a_move_off_a_free_set_it_does_not_touch_is_kept_with_the_start() -> None:
    """A move between GPUs the pending job does not need leaves its set alone: both kept."""
    far = workload("far", node="n8", gpus=[1, 5])
    model = cluster(
        [pcie8()],
        [workload("x", node="n8", gpus=[0]), far],
        pending=[PendingWorkload("wait", 2)],
    )
    relink = move(far, [6, 7])
    start = start_wait()
    kept, notes = resolve_conflicts([relink, start], CapacityLedger(model))
    assert {r.id for r in kept} == {relink.id, start.id} and notes == []


def test_jobs_that_fit_place_each_job_on_one_node() -> None:
    assert jobs_that_fit({"a": 2, "b": 1}, [2, 1]) == 2
    assert jobs_that_fit({"a": 1, "b": 1}, [2]) == 0
    # best fit: the 1-GPU job takes b's single GPU, leaving a's pair for the 2-GPU job
    assert jobs_that_fit({"a": 2, "b": 1}, [1, 2]) == 2
    assert jobs_that_fit({"a": 3}, [2, 2]) == 1
