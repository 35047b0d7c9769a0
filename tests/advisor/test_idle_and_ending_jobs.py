"""Idle GPU holders are released, never moved or pinned; jobs about to end are not moved."""

from __future__ import annotations

from dataclasses import replace

from tests.advisor.builders import GIB, cluster, pcie4, pcie8, workload
from tests.advisor.test_model import data
from toposcope.advisor.idleness import IdleRule, Verdict
from toposcope.advisor.model import NodeModel, PendingWorkload, WorkloadModel
from toposcope.advisor.model_builder import build_model
from toposcope.advisor.policies import build
from toposcope.advisor.policies.idle_release import IdleRelease
from toposcope.advisor.policies.job_migration import JobMigration, JobMigrationSettings
from toposcope.advisor.policies.memory_migration import MemoryMigration
from toposcope.advisor.policies.numa_pinning import NumaPinning
from toposcope.advisor.runner import advise


def idle(node: NodeModel, *indexes: int, **changes: object) -> NodeModel:
    """``node`` with GPUs ``indexes`` at 0 % over the window (mean and peak)."""
    fields: dict[str, object] = {"utilization": 0.0, "utilization_max": 0.0, **changes}
    gpus = tuple(replace(g, **fields) if g.index in indexes else g for g in node.gpus)  # type: ignore[arg-type]
    return NodeModel(node.name, node.numa_nodes, gpus, node.links)


def notebook(name: str, node: str, gpus: list[int], numa: int = 1) -> WorkloadModel:
    """A notebook holding ``gpus``, its threads and memory on ``numa``, as one scrape sees it:
    CPU seconds since it started (no rate, so its few hundredths of a core are unknown).
    """
    nb = workload(name, node=node, cpu={numa: 120.0}, memory={numa: 2 * GIB}, gpus=gpus)
    return replace(nb, cpu_cumulative=True)


def ending(job: WorkloadModel, seconds: float) -> WorkloadModel:
    """``job`` with ``seconds`` left before its scheduler ends it."""
    return replace(job, time_left_seconds=seconds)


def test_an_idle_notebook_far_from_its_gpu_is_not_pinned() -> None:
    """The demo's 17 % pin of an idle notebook: its GPU's NUMA node is 0, its few threads and
    memory on node 1; there is nothing to speed up, so no pin, and a note says why.
    """
    model = cluster([idle(pcie4(), 0)], [notebook("nb", "n1", [0])])
    result = NumaPinning().evaluate(model)
    assert result.recommendations == ()
    [note] = result.undecided
    assert note.target == "n1/nb" and "idle-release's business" in note.reason
    assert IdleRelease().evaluate(model).recommendations[0].target.workload == "nb"


def test_a_busy_job_in_the_same_place_is_still_pinned() -> None:
    job = workload("train", cpu={1: 4.0}, memory={1: 8 * GIB}, gpus=[0])
    [rec] = NumaPinning().evaluate(cluster([pcie4()], [job])).recommendations
    assert rec.kind == "pin" and rec.target.workload == "train"


def test_an_idle_notebook_with_remote_memory_is_not_migrated() -> None:
    """Threads home on node 0 (the GPU's), memory on node 1: memory-migration's case, but the
    notebook is idle.
    """
    nb = workload("nb", cpu={0: 0.03}, memory={1: 2 * GIB}, gpus=[0])  # a rate: 0.03 cores
    busy = workload("job", cpu={0: 2.0}, memory={1: 2 * GIB}, gpus=[1])
    result = MemoryMigration().evaluate(cluster([idle(pcie4(), 0)], [nb, busy]))
    assert [r.target.workload for r in result.recommendations] == ["job"]
    assert any(n.target == "n1/nb" and "idle" in n.reason for n in result.undecided)


def test_one_sample_of_an_idle_gpu_is_too_few_to_release_but_enough_not_to_pin() -> None:
    """A single scrape: idle-release cannot decide, and the pin is left out too."""
    model = cluster([idle(pcie4(), 0, samples=1, covered_seconds=0.0)], [notebook("nb", "n1", [0])])
    found = IdleRule().judge(model, model.workloads[0])
    assert found.verdict == Verdict.UNDECIDED and found.quiet and not found.idle
    assert IdleRelease().evaluate(model).recommendations == ()
    result = NumaPinning().evaluate(model)
    assert result.recommendations == ()
    assert "too few to release" in result.undecided[0].reason


def _fragmented(*, idle_singles: tuple[int, ...] = ()) -> tuple[NodeModel, list[WorkloadModel]]:
    """A 4-GPU job across n8's sockets, singles on GPUs 2 and 6, GPUs 3 and 7 free: a whole
    socket frees up only when a single moves (job-migration's defragmentation).
    """
    jobs = [
        workload("quad", node="n8", gpus=[0, 1, 4, 5]),
        notebook("s2", "n8", [2], numa=0),
        notebook("s6", "n8", [6], numa=1),
    ]
    return idle(pcie8(), *idle_singles), jobs


def test_defragmentation_does_not_move_an_idle_notebook() -> None:
    """The demo's checkpoint-migrate of an idle notebook: with s2 idle, the plan moves the
    busy s6 instead; with both idle, nothing moves and the notebooks are released.
    """
    node, jobs = _fragmented(idle_singles=(2,))
    [rec] = JobMigration().evaluate(cluster([node], jobs)).recommendations
    assert [a.workload for a in rec.actions] == ["s6", "quad"]

    node, jobs = _fragmented(idle_singles=(2, 6))
    model = cluster([node], jobs)
    assert JobMigration().evaluate(model).recommendations == ()
    report = advise(model, build(["job-migration", "idle-release"]), min_gain=0.0)
    assert sorted(r.kind for r in report.recommendations) == ["release-idle", "release-idle"]


def test_a_pending_job_is_not_given_a_set_freed_by_moving_an_idle_notebook() -> None:
    singles = [notebook("s0", "n8", [0], numa=0), notebook("s4", "n8", [4], numa=1)]
    pending = [PendingWorkload("quad", 4)]
    busy = JobMigration().evaluate(cluster([pcie8()], singles, pending=pending))
    assert [r.kind for r in busy.recommendations] == ["place"]
    quiet = cluster([idle(pcie8(), 0, 4)], singles, pending=pending)
    assert JobMigration().evaluate(quiet).recommendations == ()


def test_release_wins_over_a_move_of_the_same_workload() -> None:
    """With a looser idle threshold for idle-release than the moving policies use, both fire
    for s2 (peak 8 %): the release is kept whatever the move's value.
    """
    node, jobs = _fragmented()
    node = idle(node, 2, utilization=0.08, utilization_max=0.08)
    model = cluster([node], jobs)
    policies = build(
        ["job-migration", "idle-release"], {"idle-release": {"max_utilization": "0.1"}}
    )
    report = advise(model, policies, min_gain=0.0)
    kinds = {r.target.workload: r.kind for r in report.recommendations}
    assert kinds.get("s2") == "release-idle"
    assert all(
        a.workload != "s2"
        for r in report.recommendations
        for a in r.actions
        if r.kind != "release-idle"
    )
    assert any("kept the release" in n.reason for n in report.notes)


def test_a_job_about_to_end_is_not_moved() -> None:
    """A 2-GPU job across sockets is worth moving with hours left, not with 10 minutes."""
    job = workload("pair", gpus=[0, 2])
    [rec] = JobMigration().evaluate(cluster([pcie4()], [job])).recommendations
    assert rec.kind == "migrate-job"
    result = JobMigration().evaluate(cluster([pcie4()], [ending(job, 600.0)]))
    assert result.recommendations == ()
    [note] = result.undecided
    assert "ends in 600s" in note.reason and "min_time_left_seconds 1800s" in note.reason
    settings = JobMigrationSettings(min_time_left_seconds=300.0)
    moved = JobMigration(settings).evaluate(cluster([pcie4()], [ending(job, 600.0)]))
    assert [r.kind for r in moved.recommendations] == ["migrate-job"]


def test_a_job_about_to_end_is_not_moved_out_of_the_way() -> None:
    node, jobs = _fragmented()
    jobs = [jobs[0], ending(jobs[1], 300.0), jobs[2]]
    [rec] = JobMigration().evaluate(cluster([node], jobs)).recommendations
    assert [a.workload for a in rec.actions] == ["s6", "quad"]


def test_time_left_is_read_from_the_schedulers_series() -> None:
    """``toposcope_queue_job_time_left_seconds`` names the job, not a node: it lands on the
    workload of that name on every node.
    """
    labels = {"instance": "h:1", "job": "t"}
    loaded = data(
        workload_info=[
            ({**labels, "workload": "slurm-job-7"}, 1),
            ({**labels, "workload": "slurm-job-8"}, 1),
        ],
        workload_time_left=[({"scheduler": "slurm", "workload": "slurm-job-7"}, 900.0)],
    )
    left = {w.name: w.time_left_seconds for w in build_model(loaded).workloads}
    assert left == {"slurm-job-7": 900.0, "slurm-job-8": None}
