"""job-migration on hand-made models."""

from __future__ import annotations

import pytest

from tests.advisor.builders import cluster, pcie4, pcie8, workload
from toposcope.advisor.policies.job_migration import JobMigration, JobMigrationSettings
from toposcope.resources import ActionKind


def test_job_across_sockets_moves_to_one_switch() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    [rec] = JobMigration().evaluate(cluster([pcie8()], [job])).recommendations
    assert rec.kind == "migrate-job"
    assert rec.current["worst_link"] == "SYS"
    assert rec.proposed["node"] == "n8"
    assert rec.proposed["worst_link"] == "PIX"
    assert rec.estimated_gain == pytest.approx(2.0 / 1.0 - 1)
    assert rec.proposed["saves_seconds"] == 6 * 3600 // 2
    [action] = rec.actions
    assert action.kind == ActionKind.MIGRATE and action.node == "n8"
    assert len(action.gpus) == 2
    assert rec.risk == "medium"


def test_not_worth_it_when_little_time_remains() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    policy = JobMigration(JobMigrationSettings(remaining_seconds=1000))
    result = policy.evaluate(cluster([pcie8()], [job]))
    assert result.recommendations == ()
    assert "less than the checkpoint-restore cost 600s" in result.undecided[0].reason


def test_idle_jobs_are_left_to_idle_release() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    assert JobMigration().evaluate(cluster([pcie8(util=0.01)], [job])).recommendations == ()


def test_well_placed_job_stays() -> None:
    job = workload("train", node="n8", gpus=[0, 1])
    assert JobMigration().evaluate(cluster([pcie8()], [job])).recommendations == ()


def test_cross_node_move_when_the_own_node_is_full() -> None:
    job = workload("train", node="a", gpus=[1, 2])
    others = [workload("x", node="a", gpus=[0]), workload("y", node="a", gpus=[3])]
    model = cluster([pcie4("a"), pcie4("b")], [job, *others])
    [rec] = JobMigration().evaluate(model).recommendations
    assert (rec.proposed["node"], rec.proposed["gpus"]) == ("b", [0, 1])
    assert rec.risk == "high"
    local_only = JobMigration(JobMigrationSettings(allow_cross_node=False))
    assert local_only.evaluate(model).recommendations == ()


def test_two_jobs_do_not_get_the_same_target() -> None:
    a = workload("a", node="n8", gpus=[0, 4])
    b = workload("b", node="n8", gpus=[2, 6])
    result = JobMigration().evaluate(cluster([pcie8()], [a, b]))
    targets = [tuple(r.proposed["gpus"]) for r in result.recommendations]
    assert len(targets) == 2
    assert not set(targets[0]) & set(targets[1])


def test_missing_utilization_is_cannot_decide() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    result = JobMigration().evaluate(cluster([pcie8(util=None)], [job]))
    assert "no GPU utilization" in result.undecided[0].reason


def test_moved_job_is_pinned_next_to_its_new_gpus() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    [rec] = JobMigration().evaluate(cluster([pcie8()], [job])).recommendations
    [action] = rec.actions
    node = cluster([pcie8()]).nodes["n8"]
    [numa] = {g.numa_node or 0 for g in node.gpus if g.index in action.gpus}
    assert action.mems == [numa]
    state = node.numa(numa)
    assert state is not None and action.cpus == list(state.cpus)
    plain = JobMigration(JobMigrationSettings(pin_to_gpu_numa=False))
    [bare] = plain.evaluate(cluster([pcie8()], [job])).recommendations[0].actions
    assert bare.cpus == [] and bare.mems == []


def test_jobs_time_slicing_a_busy_gpu_are_separated() -> None:
    a = workload("a", node="n8", gpus=[0, 1])
    b = workload("b", node="n8", gpus=[0, 1])
    [rec] = JobMigration().evaluate(cluster([pcie8(util=0.9)], [a, b])).recommendations
    assert rec.target.workload == "b"  # a sorts first and stays
    assert not set(rec.actions[0].gpus) & {0, 1}
    assert rec.estimated_gain == pytest.approx(0.9)  # (2 - 1) x 0.9, the same link class
    assert "time-slicing" in rec.gain_model and "shares its GPUs with a" in rec.summary


def test_single_gpu_jobs_sharing_a_gpu_are_separated_but_idle_sharing_is_not() -> None:
    c = workload("c", node="n8", gpus=[2])
    d = workload("d", node="n8", gpus=[2])
    [rec] = JobMigration().evaluate(cluster([pcie8()], [c, d])).recommendations
    assert rec.target.workload == "d" and len(rec.actions[0].gpus) == 1
    assert JobMigration().evaluate(cluster([pcie8(util=0.1)], [c, d])).recommendations == ()
