"""Each kind of action carried out on the real cluster, through Slurm's commands.

Nodes of the shared cluster have 4 GPUs each; a "blocker" job holding all four keeps a node
full, so that a GPU job stays pending until the test frees a node. What happened is read back
with ``scontrol``/``squeue``, never through the backend under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm.conftest import wait_running
from tests.slurm.managers import (
    blockers,
    commands_manager,
    job_field,
    job_state,
    wait_final,
    wait_state,
)
from toposcope.rm import ActionKind, ActionRequest, ActionStatus, ResourceManagerError
from toposcope.slurm.daemons import wait_for
from toposcope.slurm.localcluster import LocalCluster

MIGRATABLE = "--comment=toposcope:migratable"


def test_place_steers_a_pending_job_to_the_chosen_node(slurm: LocalCluster) -> None:
    first, second, third, fourth = slurm.node_names
    full = blockers(slurm, first, second, third, fourth)
    job = slurm.sbatch("-J", "waits", "--gres=gpu:1", "--wrap", "sleep 600")
    manager = commands_manager(slurm)

    (waiting,) = [w for w in manager.workloads() if w.state == "pending"]
    assert (waiting.name, waiting.gpus_requested, waiting.allocation) == (
        f"slurm-job-{job}",
        1,
        None,
    )
    state = manager.apply(ActionRequest("place-1", ActionKind.PLACE, waiting.name, third, gpus=[2]))
    assert state.status is ActionStatus.SUCCEEDED and state.after is not None
    assert state.after.node == third
    assert job_field(slurm, job, "ReqNodeList") == third

    # free the first node too: without the placement Slurm would start the job there
    slurm.command("scancel", str(full[first]), str(full[third]))
    assert wait_state(slurm, job, "RUNNING") == third
    (running,) = [w for w in manager.workloads() if w.name == waiting.name]
    assert running.allocation is not None and running.allocation.node == third
    assert len(running.allocation.gpus) == 1 and running.allocation.cpus


def test_migrate_requeues_an_opted_in_job_onto_the_target(slurm: LocalCluster) -> None:
    first, second = slurm.node_names[:2]
    job = slurm.sbatch(MIGRATABLE, "--gres=gpu:1", "-w", first, "--wrap", "sleep 600")
    wait_running(slurm, job)
    manager = commands_manager(slurm)
    request = ActionRequest("move-1", ActionKind.MIGRATE, f"slurm-job-{job}", second, gpus=[0])

    started = manager.apply(request)
    assert started.status is ActionStatus.RUNNING
    assert started.before is not None and started.before.node == first
    done = wait_final(manager, "move-1")
    assert done.status is ActionStatus.SUCCEEDED, done.error
    assert done.after is not None and done.after.node == second and len(done.after.gpus) == 1
    assert 0 <= done.cost_seconds < 60  # from the requeue to the new start, by Slurm's clock
    assert job_state(slurm, job) == ("RUNNING", second)
    assert job_field(slurm, job, "Restarts") == "1"
    assert manager.control.changes == [
        f"scontrol requeuehold {job}",
        f"scontrol update JobId={job} ReqNodeList={second} StartTime=now",
        f"scontrol release {job}",
    ]

    # the same request again is a repeat: Slurm is not asked to move the job twice
    again = manager.apply_once(request)
    assert again.repeat and again.state == done
    assert len(manager.control.changes) == 3
    assert job_field(slurm, job, "Restarts") == "1"


def test_a_job_that_did_not_opt_in_is_not_moved(slurm: LocalCluster) -> None:
    first, second = slurm.node_names[:2]
    job = slurm.sbatch("--gres=gpu:1", "-w", first, "--wrap", "sleep 600")
    wait_running(slurm, job)
    manager = commands_manager(slurm)
    with pytest.raises(ResourceManagerError, match="did not opt in") as refused:
        manager.apply(ActionRequest("move-2", ActionKind.MIGRATE, str(job), second))
    assert refused.value.status == 409 and "toposcope:migratable" in str(refused.value)
    assert manager.control.changes == [] and manager.recorded() == []
    assert job_state(slurm, job) == ("RUNNING", first)
    assert job_field(slurm, job, "Restarts") == "0"


def test_one_migration_at_a_time_by_default(slurm: LocalCluster) -> None:
    first, second, third = slurm.node_names[:3]
    one = slurm.sbatch(MIGRATABLE, "--gres=gpu:1", "-w", first, "--wrap", "sleep 600")
    two = slurm.sbatch(MIGRATABLE, "--gres=gpu:1", "-w", first, "--wrap", "sleep 600")
    wait_running(slurm, one, two)
    # the target is full: the first migration stays under way until the test frees it
    full = blockers(slurm, second)
    manager = commands_manager(slurm)
    first_move = manager.apply(ActionRequest("m-1", ActionKind.MIGRATE, str(one), second))
    assert first_move.status is ActionStatus.RUNNING
    with pytest.raises(ResourceManagerError, match="1 of at most 1 migrations") as refused:
        manager.apply(ActionRequest("m-2", ActionKind.MIGRATE, str(two), third))
    assert refused.value.status == 409
    assert job_state(slurm, two) == ("RUNNING", first)

    slurm.command("scancel", str(full[second]))
    assert wait_final(manager, "m-1").status is ActionStatus.SUCCEEDED
    second_move = manager.apply(ActionRequest("m-2", ActionKind.MIGRATE, str(two), third))
    assert second_move.status is ActionStatus.RUNNING
    assert wait_final(manager, "m-2").status is ActionStatus.SUCCEEDED
    assert job_state(slurm, two) == ("RUNNING", third)


def test_jobs_are_not_sent_where_they_cannot_start(slurm: LocalCluster) -> None:
    first, second, _, fourth = slurm.node_names
    mover = slurm.sbatch(MIGRATABLE, "-c", "1", "-w", first, "--wrap", "sleep 600")
    wait_running(slurm, mover)
    blockers(slurm, *slurm.node_names)
    tied = slurm.sbatch("--gres=gpu:1", "-w", first, "--wrap", "sleep 600")
    free = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    manager = commands_manager(slurm)
    with pytest.raises(ResourceManagerError, match="already asks for nodes") as tied_down:
        manager.apply(ActionRequest("p-tied", ActionKind.PLACE, str(tied), second))
    assert tied_down.value.status == 409
    slurm.command("scontrol", "update", f"NodeName={fourth}", "State=DRAIN", "Reason=test")
    try:
        for request in (
            ActionRequest("p-drained", ActionKind.PLACE, str(free), fourth),
            ActionRequest("m-drained", ActionKind.MIGRATE, str(mover), fourth),
        ):
            with pytest.raises(ResourceManagerError, match=r"DRAIN: Slurm starts no job") as no:
                manager.apply(request)
            assert no.value.status == 409
    finally:
        slurm.command("scontrol", "update", f"NodeName={fourth}", "State=RESUME")
    assert manager.control.changes == [] and manager.recorded() == []
    assert job_field(slurm, tied, "ReqNodeList") == first
    assert job_state(slurm, mover) == ("RUNNING", first)


def test_pin_is_refused_with_the_binding_advice(slurm: LocalCluster) -> None:
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    wait_running(slurm, job)
    manager = commands_manager(slurm)
    name = f"slurm-job-{job}"
    pin = ActionRequest("pin-1", ActionKind.PIN, name, cpus=[0, 1])
    move_memory = ActionRequest("mem-1", ActionKind.MIGRATE_MEMORY, name, mems=[0])
    for request in (pin, move_memory):
        with pytest.raises(ResourceManagerError) as refused:
            manager.apply(request)
        text = str(refused.value)
        assert refused.value.status == 400 and "does not change a running job's" in text
        assert "--cpu-bind" in text and "--mem-bind=local" in text
        assert "--gres-flags=enforce-binding" in text and "node agent" in text
    assert manager.control.changes == []


def test_idle_release_lowers_the_time_limit(slurm: LocalCluster) -> None:
    job = slurm.sbatch("-t", "600", "--gres=gpu:2", "--wrap", "sleep 600")
    wait_running(slurm, job)
    manager = commands_manager(slurm, slurm_idle_action="timelimit=5")
    (held,) = [w.allocation for w in manager.workloads() if w.name == f"slurm-job-{job}"]
    assert held is not None

    stale = ActionRequest("rel-0", ActionKind.RELEASE, str(job), held.node, gpus=[9])
    with pytest.raises(ResourceManagerError, match="the plan is out of date"):
        manager.apply(stale)
    release = ActionRequest("rel-1", ActionKind.RELEASE, str(job), held.node, gpus=held.gpus)
    state = manager.apply(release)
    assert state.status is ActionStatus.SUCCEEDED and state.after == held
    # at most 5 minutes more than it has run (under a minute): 00:05:00 or 00:06:00
    assert job_field(slurm, job, "TimeLimit") in {"00:05:00", "00:06:00"}
    assert job_state(slurm, job)[0] == "RUNNING"


def test_idle_release_is_refused_unless_configured(slurm: LocalCluster) -> None:
    job = slurm.sbatch("-t", "600", "--gres=gpu:1", "--wrap", "sleep 600")
    wait_running(slurm, job)
    manager = commands_manager(slurm)
    (held,) = [w.allocation for w in manager.workloads() if w.name == f"slurm-job-{job}"]
    assert held is not None
    request = ActionRequest("rel-2", ActionKind.RELEASE, str(job), held.node, gpus=held.gpus)
    with pytest.raises(ResourceManagerError, match=r"not configured.*--slurm-idle-action"):
        manager.apply(request)
    assert job_field(slurm, job, "TimeLimit") == "10:00:00"


def test_idle_release_sends_the_configured_signal(slurm: LocalCluster, tmp_path: Path) -> None:
    flag = slurm.layout.out / f"usr1-{tmp_path.name}"
    script = f"trap 'echo caught > {flag}' USR1; sleep 600 & wait; sleep 600 & wait"
    job = slurm.sbatch("--gres=gpu:1", "--wrap", script)
    wait_running(slurm, job)
    manager = commands_manager(slurm, slurm_idle_action="signal=SIGUSR1")
    (held,) = [w.allocation for w in manager.workloads() if w.name == f"slurm-job-{job}"]
    assert held is not None
    request = ActionRequest("rel-3", ActionKind.RELEASE, str(job), held.node, gpus=held.gpus)
    assert manager.apply(request).status is ActionStatus.SUCCEEDED
    assert manager.control.changes == [f"scancel --full --signal=USR1 {job}"]
    wait_for(flag.exists, "the job's USR1 trap", 30)
    assert job_state(slurm, job)[0] == "RUNNING"


def test_a_job_that_ended_between_plan_and_apply_is_left_alone(
    slurm: LocalCluster, tmp_path: Path
) -> None:
    first, second = slurm.node_names[:2]
    done = slurm.layout.out / f"done-{tmp_path.name}"
    until_done = f"while [ ! -e {done} ]; do sleep 0.1; done"
    short = slurm.sbatch(MIGRATABLE, "-c", "1", "-w", first, "--wrap", until_done)
    blockers(slurm, *slurm.node_names)
    pending = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    wait_running(slurm, short)
    manager = commands_manager(slurm)
    planned = {w.name: w.state for w in manager.workloads()}
    assert planned[f"slurm-job-{pending}"] == "pending"
    assert planned[f"slurm-job-{short}"] == "running"

    slurm.command("scancel", str(pending))
    done.touch()  # the running job finishes by itself
    wait_for(lambda: job_state(slurm, short)[0] in ("", "COMPLETED"), "the short job's end", 30)
    with pytest.raises(ResourceManagerError, match="cancelled, no longer pending") as place:
        manager.apply(ActionRequest("late-1", ActionKind.PLACE, str(pending), second))
    with pytest.raises(ResourceManagerError, match="completed, no longer running") as move:
        manager.apply(ActionRequest("late-2", ActionKind.MIGRATE, str(short), second))
    assert place.value.status == move.value.status == 409
    assert manager.control.changes == [] and manager.recorded() == []
