"""The Slurm backend's plans: what apply runs is the plan, and the printed plan runs in a shell.

Each test plans an action on the real cluster, carries it out, and compares the commands the
backend ran (``SlurmControl.changes``) with the plan's steps; then the same plan, printed as
``advise --dry-run`` prints it, is run by ``bash`` against the cluster, and what Slurm did is
read back with ``scontrol``/``squeue``. A backend whose Slurm cannot be reached still plans,
saying what it could not check.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.slurm.conftest import wait_running
from tests.slurm.managers import (
    blockers,
    commands_manager,
    job_field,
    job_state,
    rest_manager,
    wait_final,
)
from toposcope.rm import ActionKind, ActionRequest, ActionStatus
from toposcope.rm.plan import CommandStep, HttpStep, Plan, WaitStep
from toposcope.rm.plan_script import plan_lines
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.manager import slurm_resource_manager

MIGRATABLE = "--comment=toposcope:migratable"


def commands(plan: Plan) -> list[str]:
    """The command lines of a plan's command steps, as ``SlurmControl.changes`` lists them."""
    return [" ".join(s.argv) for s in plan.steps if isinstance(s, CommandStep)]


def run_script(cluster: LocalCluster, plan: Plan) -> subprocess.CompletedProcess[str]:
    """The printed plan, run by bash against ``cluster``."""
    script = "set -eu\n" + "\n".join(plan_lines(plan)) + "\n"
    env = cluster.env()
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_placement_runs_its_plan_and_its_printed_plan_runs(slurm: LocalCluster) -> None:
    first, second, third, fourth = slurm.node_names
    blockers(slurm, first, second, third, fourth)
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    other = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    manager = commands_manager(slurm)

    request = ActionRequest("place-p", ActionKind.PLACE, f"slurm-job-{job}", third, gpus=[0])
    plan = manager.plan(request)
    assert plan.runnable and plan.unknown == () and plan.checked
    assert commands(plan) == [f"scontrol update JobId={job} ReqNodeList={third}"]
    state = manager.apply(request)
    assert state.status is ActionStatus.SUCCEEDED
    assert manager.control.changes == commands(plan)
    assert job_field(slurm, job, "ReqNodeList") == third

    printed = manager.plan(
        ActionRequest("place-q", ActionKind.PLACE, f"slurm-job-{other}", fourth, gpus=[0])
    )
    done = run_script(slurm, printed)
    assert done.returncode == 0, done.stderr
    assert job_field(slurm, other, "ReqNodeList") == fourth
    # the first job now asks for a node: its plan is a refusal, with no step
    again = manager.plan(ActionRequest("place-r", ActionKind.PLACE, str(job), fourth))
    assert not again.runnable and again.steps == () and "already asks for nodes" in again.refused


def test_a_migration_runs_its_plan_and_its_printed_plan_moves_the_job(
    slurm: LocalCluster,
) -> None:
    first, second, third = slurm.node_names[:3]
    job = slurm.sbatch(MIGRATABLE, "--gres=gpu:1", "-w", first, "--wrap", "sleep 600")
    other = slurm.sbatch(MIGRATABLE, "--gres=gpu:1", "-w", first, "--wrap", "sleep 600")
    wait_running(slurm, job)
    wait_running(slurm, other)
    manager = commands_manager(slurm)

    request = ActionRequest("move-p", ActionKind.MIGRATE, f"slurm-job-{job}", second, gpus=[0])
    plan = manager.plan(request)
    assert [type(s) for s in plan.steps] == [CommandStep, WaitStep, CommandStep, CommandStep]
    manager.apply(request)
    done = wait_final(manager, "move-p")
    assert done.status is ActionStatus.SUCCEEDED, done.error
    assert manager.control.changes == commands(plan)

    printed = manager.plan(ActionRequest("move-q", ActionKind.MIGRATE, str(other), third))
    ran = run_script(slurm, printed)
    assert ran.returncode == 0, ran.stderr
    wait_running(slurm, other)
    assert job_state(slurm, other) == ("RUNNING", third)
    assert job_field(slurm, other, "Restarts") == "1"


def test_a_placement_through_slurmrestd_runs_its_plan_and_its_printed_curl_line(
    slurm: LocalCluster, tmp_path: Path
) -> None:
    nodes = slurm.node_names
    blockers(slurm, *nodes)
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    other = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    manager = rest_manager(slurm, tmp_path)
    request = ActionRequest("place-r", ActionKind.PLACE, str(job), nodes[2], gpus=[0])
    (step,) = manager.plan(request).steps
    assert isinstance(step, HttpStep) and step.api == "slurmrestd"
    assert step.url == f"{slurm.rest_url}/slurm/v0.0.38/job/{job}"
    manager.apply(request)
    assert manager.control.changes == [f"POST job/{job} {step.body}"]
    assert job_field(slurm, job, "ReqNodeList") == nodes[2]

    printed = manager.plan(ActionRequest("place-s", ActionKind.PLACE, str(other), nodes[3]))
    script = "set -eu\n" + "\n".join(plan_lines(printed)) + "\n"
    env = {**slurm.env(), "SLURM_JWT": slurm.token()}
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert job_field(slurm, other, "ReqNodeList") == nodes[3]


def test_undoing_a_placement_runs_its_plan(slurm: LocalCluster) -> None:
    nodes = slurm.node_names
    blockers(slurm, *nodes)
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    manager = commands_manager(slurm)
    manager.apply(ActionRequest("place-u", ActionKind.PLACE, str(job), nodes[1], gpus=[0]))
    undo = ActionRequest("undo-u", ActionKind.UNPLACE, str(job), nodes[1], gpus=[0])
    plan = manager.plan(undo)
    assert commands(plan) == [f"scontrol update JobId={job} ReqNodeList="]
    manager.apply(undo)
    assert manager.control.changes[1:] == commands(plan)
    assert job_field(slurm, job, "ReqNodeList") == "(null)"


def test_a_signal_release_runs_its_plan(slurm: LocalCluster) -> None:
    first = slurm.node_names[0]
    job = slurm.sbatch("--gres=gpu:2", "-w", first, "--wrap", "sleep 600")
    wait_running(slurm, job)
    manager = commands_manager(slurm, slurm_idle_action="signal=USR1")
    (held,) = [w for w in manager.workloads() if w.name == f"slurm-job-{job}"]
    assert held.allocation is not None
    request = ActionRequest(
        "rel-p", ActionKind.RELEASE, held.name, first, gpus=held.allocation.gpus
    )
    plan = manager.plan(request)
    assert commands(plan) == [f"scancel --full --signal=USR1 {job}"]
    manager.apply(request)
    assert manager.control.changes == commands(plan)


def test_without_slurm_the_plan_says_what_it_could_not_check(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=gone\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nMessageTimeout=1\n"
    )
    manager = slurm_resource_manager(slurm_conf=str(conf))
    plan = manager.plan(ActionRequest("p", ActionKind.PLACE, "slurm-job-42", "gpu-01", gpus=[0]))
    assert commands(plan) == ["scontrol update JobId=42 ReqNodeList=gpu-01"]
    assert plan.checked == () and "Slurm could not be read" in plan.unknown[0]
    move = manager.plan(ActionRequest("m", ActionKind.MIGRATE, "slurm-job-7", "gpu-02"))
    assert commands(move) == [
        "scontrol requeuehold 7",
        "scontrol update JobId=7 ReqNodeList=gpu-02 StartTime=now",
        "scontrol release 7",
    ]
    pin = manager.plan(ActionRequest("q", ActionKind.PIN, "slurm-job-7", "gpu-02", cpus=[0]))
    assert not pin.runnable and "--cpu-bind=cores" in pin.notes[0]
    script = "\n".join(line for p in (plan, move, pin) for line in plan_lines(p)) + "\n"
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
