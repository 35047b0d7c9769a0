"""A job that job-migration moves is pinned next to its new GPUs: the room check leaves out
what the same recommendation moves away, and CPU work confined to the new GPUs' NUMA node
moves elsewhere first when it blocks the pin.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.advisor.builders import cluster, pcie4, pcie8, workload
from toposcope.advisor.locality import GIB
from toposcope.advisor.model import WorkloadModel
from toposcope.advisor.policies.job_migration import JobMigration, JobMigrationSettings
from toposcope.rm import ActionKind

NODE0 = list(range(8))
NODE1 = list(range(8, 16))


def _holders() -> list[WorkloadModel]:
    """Single-GPU jobs on GPUs 1-3 of socket 0: the only free switch pair is {4, 5}."""
    return [workload(f"g{i}", node="n8", gpus=[i]) for i in (1, 2, 3)]


def test_cpu_work_on_the_new_gpus_node_moves_to_make_room_for_the_moved_job() -> None:
    # train runs pinned on node 0, next to GPU 0; its better pair {4, 5} hangs off node 1,
    # where a CPU job that could run anywhere keeps 7 of 8 CPUs busy
    train = workload("train", node="n8", cpu={0: 2.0}, memory={0: GIB}, gpus=[0, 4])
    busy = workload("busy", node="n8", cpu={1: 7.0}, memory={1: GIB})
    [rec] = JobMigration().evaluate(cluster([pcie8()], [train, busy, *_holders()])).recommendations
    assert rec.target.workload == "train" and rec.proposed["gpus"] == [4, 5]
    assert [(a.kind, a.workload, a.cpus, a.mems) for a in rec.actions] == [
        (ActionKind.PIN, "busy", NODE0, [0]),
        (ActionKind.MIGRATE_MEMORY, "busy", [], [0]),
        (ActionKind.MIGRATE, "train", NODE1, [1]),
    ]
    assert rec.proposed["cpus"] == "8-15" and rec.proposed["mems"] == [1]
    assert rec.proposed["makes_room"] == [
        {"workload": "busy", "numa_node": 0, "cpus": "0-7", "mems": [0]}
    ]
    assert "workload:n8/busy" in rec.claims
    assert "makes room on NUMA node 1 for train" in rec.gain_model


def test_no_room_anywhere_leaves_the_moved_job_unpinned() -> None:
    # the CPU job could only go to node 0, which another CPU job fills
    train = workload("train", node="n8", cpu={0: 2.0}, memory={0: GIB}, gpus=[0, 4])
    busy = workload("busy", node="n8", cpu={1: 7.0}, memory={1: GIB})
    full = workload("full", node="n8", cpu={0: 7.0}, memory={0: GIB})
    model = cluster([pcie8()], [train, busy, full, *_holders()])
    [rec] = JobMigration().evaluate(model).recommendations
    [action] = rec.actions
    assert action.workload == "train" and action.cpus == [] and action.mems == []
    assert "makes_room" not in rec.proposed


def test_the_room_check_leaves_out_the_jobs_a_defragmentation_moves_away() -> None:
    # the quad's new socket holds a single-GPU job keeping 5 cores busy there; the same
    # recommendation moves that job to the other socket, so the quad's 4 cores fit
    quad = workload("quad", node="n8", cpu={0: 2.0, 1: 2.0}, memory={0: GIB}, gpus=[0, 1, 4, 5])
    s2 = workload("s2", node="n8", cpu={0: 5.0}, memory={0: GIB}, gpus=[2])
    s6 = workload("s6", node="n8", cpu={1: 5.0}, memory={1: GIB}, gpus=[6])
    [rec] = JobMigration().evaluate(cluster([pcie8()], [quad, s2, s6])).recommendations
    assert rec.target.workload == "quad" and "defragment" in rec.proposed
    _first, last = rec.actions
    assert last.workload == "quad"
    numa = 0 if set(last.gpus) == {0, 1, 2, 3} else 1
    assert last.mems == [numa] and last.cpus == (NODE0 if numa == 0 else NODE1)


def test_the_pages_the_moved_job_takes_away_make_room_for_the_cpu_work() -> None:
    # 2 GiB free per node: the CPU job's 6 GiB fit on node 0 only because the moved job
    # takes its own 6 GiB off it (on pcie4, GPUs 2 and 3 share socket 1; GPU 1 is held by
    # a job about to end, which is not moved)
    train = workload("train", cpu={0: 2.0}, memory={0: 6 * GIB}, gpus=[0, 2])
    busy = workload("busy", cpu={1: 7.0}, memory={1: 6 * GIB})
    held = replace(workload("g1", gpus=[1]), time_left_seconds=60.0)
    model = cluster([pcie4(free_bytes=2 * GIB)], [train, busy, held])
    [rec] = JobMigration().evaluate(model).recommendations
    assert [(a.kind, a.workload, a.mems) for a in rec.actions] == [
        (ActionKind.PIN, "busy", [0]),
        (ActionKind.MIGRATE_MEMORY, "busy", [0]),
        (ActionKind.MIGRATE, "train", [1]),
    ]


def test_a_job_moved_by_its_own_defragmentation_is_not_counted_out_twice() -> None:
    # the quad's new socket keeps 7 cores busy with a CPU job that cannot move (the other
    # socket is full too): the quad's own 2 cores there leave once, so its 4 do not fit
    quad = workload("quad", node="n8", cpu={0: 2.0, 1: 2.0}, memory={0: GIB}, gpus=[0, 1, 4, 5])
    s2 = workload("s2", node="n8", cpu={0: 1.0}, memory={0: GIB}, gpus=[2])
    s6 = workload("s6", node="n8", cpu={1: 1.0}, memory={1: GIB}, gpus=[6])
    cpu0 = workload("cpu0", node="n8", cpu={0: 5.0}, memory={0: GIB})
    cpu1 = workload("cpu1", node="n8", cpu={1: 5.0}, memory={1: GIB})
    model = cluster([pcie8()], [quad, s2, s6, cpu0, cpu1])
    [rec] = JobMigration().evaluate(model).recommendations
    last = rec.actions[-1]
    assert last.workload == "quad" and last.cpus == [] and last.mems == []


def _unpinnable() -> list[WorkloadModel]:
    """train pinned next to GPU 0; its better pair {4, 5} hangs off node 1, which a CPU job
    fills and cannot leave (node 0 is full too once train's cores are gone)."""
    train = workload("train", node="n8", cpu={0: 2.0}, memory={0: GIB}, gpus=[0, 4])
    busy = workload("busy", node="n8", cpu={1: 7.0}, memory={1: GIB})
    full = workload("full", node="n8", cpu={0: 7.0}, memory={0: GIB})
    return [train, busy, full, *_holders()]


def test_a_move_that_cannot_pin_its_job_pays_for_the_locality_it_loses() -> None:
    # now fully local (cost 0); unpinned on an even two-node spread: remote share 0.75 x
    # 0.5776 x 0.4 = 0.1733 of a step; the link halves the step: 0.5 x 1.1733
    [rec] = JobMigration().evaluate(cluster([pcie8()], _unpinnable())).recommendations
    assert rec.actions[-1].cpus == []
    assert rec.estimated_gain == pytest.approx(1.0 / (0.5 * (1.0 + 0.75 * 0.5776 * 0.4)) - 1.0)
    assert "restarts unpinned, NUMA cost 0.000 -> 0.173" in rec.gain_model


def test_a_move_that_no_longer_pays_once_it_loses_its_locality_is_a_note() -> None:
    # 1400 s left: the link alone saves 700 s (> 600 s checkpoint-restore), with the lost
    # locality only 579 s
    settings = JobMigrationSettings(remaining_seconds=1400.0)
    result = JobMigration(settings).evaluate(cluster([pcie8()], _unpinnable()))
    assert result.recommendations == ()
    [note] = [n for n in result.undecided if n.target == "n8/train"]
    assert "would save 579s" in note.reason
    pinned = [w for w in _unpinnable() if w.name != "full"]
    [rec] = JobMigration(settings).evaluate(cluster([pcie8()], pinned)).recommendations
    assert rec.target.workload == "train" and rec.actions[-1].cpus == NODE1
