"""Slurm with ``TopologyPlugin=topology/tree``: a topology.conf written by ``toposcope slurm
topology-conf`` from a fabric file is what ``scontrol show topology`` reads back, and a pending
multi-node job is steered onto the leaf the buddy cells chose with ``scontrol update
ReqNodeList=... Switches=N@T``, where it then runs.

The shared cluster runs without a topology plugin (its other tests place jobs by node order),
so this module starts its own small tree cluster once: two leaves of two nodes under a spine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.advisor.builders import cluster as cluster_model
from tests.advisor.builders import gpu, numa_nodes
from tests.slurm.conftest import require_slurm, state_dir, wait_running
from tests.slurm.managers import commands_manager
from toposcope.advisor.applying import Applier
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.model import NodeModel, PendingWorkload, WorkloadModel, pending_from
from toposcope.advisor.policies.fabric_placement import FabricPlacement
from toposcope.cli import main
from toposcope.fabric.cellfit import choose
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.fabric.yamlfile import read_fabric_file
from toposcope.report.recommendation import Recommendation
from toposcope.rm import ActionStatus, Allocation, ResourceManagerError
from toposcope.rm.plan import CommandStep, WaitStep
from toposcope.slurm.apply_options import MIGRATABLE
from toposcope.slurm.clusterfiles import (
    ClusterLayout,
    ClusterSpec,
    NodeShape,
    Ports,
    slurm_conf_text,
)
from toposcope.slurm.control import InvalidChangeError
from toposcope.slurm.daemons import ClusterError, wait_for
from toposcope.slurm.fabric_steer import (
    read_topology,
    requeue_steps,
    steer_plan_notes,
    steer_steps,
    switches_value,
)
from toposcope.slurm.localcluster import LocalCluster

PREFIX = f"t{os.getpid()}f"
NODES = [f"{PREFIX}{n}" for n in range(1, 5)]
FABRIC = f"""switches:
  - name: spine
    switches: [leaf-a, leaf-b]
  - name: leaf-a
    nodes: [{NODES[0]}, {NODES[1]}]
  - name: leaf-b
    nodes: [{NODES[2]}, {NODES[3]}]
"""


@pytest.fixture(scope="module")
def fabric_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree as a fabric file (docs/fabric.md)."""
    path = tmp_path_factory.mktemp("fabric") / "fabric.yaml"
    path.write_text(FABRIC)
    return path


@pytest.fixture(scope="module")
def tree_cluster(fabric_file: Path) -> Iterator[LocalCluster]:
    """Four nodes of two GPUs with the topology.conf that ``toposcope slurm topology-conf``
    writes from the fabric file, started once for this module.
    """
    require_slurm()
    written = _topology_conf(fabric_file)
    cluster = LocalCluster(
        state_dir("tree"),
        ClusterSpec(
            nodes=4,
            shape=NodeShape(sockets=1, cores_per_socket=2, threads_per_core=1, gpus=2),
            node_prefix=PREFIX,
            rest=False,
            topology_conf=written,
        ),
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _topology_conf(fabric_file: Path) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["slurm", "topology-conf", "--file", str(fabric_file)]) == 0
    return out.getvalue()


def test_scontrol_reads_back_the_tree_written_from_the_fabric(
    tree_cluster: LocalCluster,
) -> None:
    assert "TopologyPlugin=topology/tree" in tree_cluster.layout.slurm_conf.read_text()
    shown = read_topology(tree_cluster.command("scontrol", "show", "topology"))
    assert shown == {
        "leaf-a": (0, (), (NODES[0], NODES[1])),
        "leaf-b": (0, (), (NODES[2], NODES[3])),
        "spine": (1, ("leaf-a", "leaf-b"), tuple(NODES)),
    }


def test_a_pending_job_is_steered_onto_the_leaf_the_cells_chose(
    tree_cluster: LocalCluster, fabric_file: Path
) -> None:
    cluster = tree_cluster
    holder = cluster.sbatch("-N", "1", "-w", NODES[0], "--gres=gpu:2", "--wrap", "sleep 300")
    job = cluster.sbatch("-N", "2", "--gres=gpu:2", "--hold", "--wrap", "sleep 300")
    try:
        wait_running(cluster, holder)
        # the cells see leaf-a with one node free: the job goes to leaf-b whole
        tree = CellTree(read_fabric_file(fabric_file))
        free = {n: NodeFree(n, 2, 0 if n == NODES[0] else 2) for n in NODES}
        choice = choose(tree, free, nodes=2, gpus_per_node=2)
        assert choice is not None and choice.cell == "leaf-b"
        [step] = steer_steps(job, choice.nodes, switches=1, wait_s=120)
        cluster.command(*step.argv)
        shown = cluster.command("scontrol", "show", "job", str(job))
        assert f"ReqNodeList={NODES[2]},{NODES[3]}" in shown
        assert "Switches=1@00:02:00" in shown
        # a wait beyond max_switch_wait (300 s by default) is accepted and cut to it
        cluster.command(*steer_steps(job, (), switches=1, wait_s=900)[0].argv)
        assert "Switches=1@00:05:00" in cluster.command("scontrol", "show", "job", str(job))
        cluster.command("scontrol", "release", str(job))
        wait_running(cluster, job)
        ran_on = cluster.command("squeue", "-h", "-j", str(job), "-o", "%N").strip()
        assert ran_on == f"{PREFIX}[3-4]"
    finally:
        cluster.command("scancel", str(holder), str(job), check=False)


def advice_for_held_job(
    cluster: LocalCluster, fabric_file: Path, holder: int, job: int
) -> Recommendation:
    """The fabric-placement advice for the held 2-node ``job`` once ``holder`` runs on the
    third node (the only recommendation the policy makes). The pending job is read from
    Slurm through the backend, as ``advise`` reads it: 2 nodes of 2 GPUs each.
    """
    wait_running(cluster, holder)
    nodes = [NodeModel(n, numa_nodes(1, 2), (gpu(0, 0), gpu(1, 0))) for n in NODES]
    held = WorkloadModel(f"slurm-job-{holder}", NODES[2], gpus=(0, 1))
    pending = pending_from(commands_manager(cluster).workloads())
    assert pending == (PendingWorkload(f"slurm-job-{job}", 2, nodes_requested=2),)
    model = cluster_model(nodes, [held], pending=pending)
    [rec] = FabricPlacement(fabric=read_fabric_file(fabric_file)).evaluate(model).recommendations
    return rec


def test_the_backend_applies_the_policys_advice_and_refuses_it_once_stale(
    tree_cluster: LocalCluster, fabric_file: Path
) -> None:
    cluster = tree_cluster
    holder = cluster.sbatch("-N", "1", "-w", NODES[2], "--gres=gpu:2", "--wrap", "sleep 300")
    job = cluster.sbatch("-N", "2", "--gres=gpu:2", "--hold", "--wrap", "sleep 300")
    try:
        rec = advice_for_held_job(cluster, fabric_file, holder, job)
        assert rec.proposed["cell"] == "leaf-a" and rec.proposed["switches"] == 1
        manager = commands_manager(cluster)
        placed = manager.steer_fabric(rec)
        assert placed.status is ActionStatus.SUCCEEDED and placed.after == Allocation(NODES[0])
        shown = cluster.command("scontrol", "show", "job", str(job))
        assert f"ReqNodeList={NODES[0]},{NODES[1]}" in shown
        assert "Switches=1@00:00:00" in shown  # no wait asked: Slurm shows a zero wait
        # steered once, the job asks for nodes: the same advice is refused, Slurm unchanged
        with pytest.raises(ResourceManagerError, match="already asks for nodes"):
            manager.steer_fabric(rec)
        cluster.command("scontrol", "release", str(job))
        wait_running(cluster, job)
        ran_on = cluster.command("squeue", "-h", "-j", str(job), "-o", "%N").strip()
        assert ran_on == f"{PREFIX}[1-2]"
        with pytest.raises(ResourceManagerError, match="running"):
            manager.steer_fabric(rec)
    finally:
        cluster.command("scancel", str(holder), str(job), check=False)


def test_advise_apply_runs_the_planned_steer_once_and_audits_it(
    tree_cluster: LocalCluster, fabric_file: Path, tmp_path: Path
) -> None:
    cluster = tree_cluster
    holder = cluster.sbatch("-N", "1", "-w", NODES[2], "--gres=gpu:2", "--wrap", "sleep 300")
    job = cluster.sbatch("-N", "2", "--gres=gpu:2", "--hold", "--wrap", "sleep 300")
    try:
        rec = advice_for_held_job(cluster, fabric_file, holder, job)
        manager = commands_manager(cluster)
        plan = manager.plan_fabric(rec)
        audit = AuditLog(tmp_path / "audit.sqlite")
        applier = Applier(manager, audit, actor="ops@host", backend="slurm")
        [outcome] = applier.apply([rec])
        assert outcome.result == "applied", outcome.detail
        assert all(isinstance(s, CommandStep) for s in plan.steps)
        assert manager.control.changes == [
            " ".join(s.argv) for s in plan.steps if isinstance(s, CommandStep)
        ]
        entry = audit.entry(f"{rec.id}-0")
        assert entry is not None and entry.state == "succeeded"
        [again] = applier.apply([rec])
        assert again.result == "skipped" and len(manager.control.changes) == 1
    finally:
        cluster.command("scancel", str(holder), str(job), check=False)


def test_a_spread_running_job_that_opted_in_is_requeued_onto_one_leaf(
    tree_cluster: LocalCluster, fabric_file: Path
) -> None:
    cluster = tree_cluster
    job = cluster.sbatch(
        "-N", "2", "-w", f"{NODES[0]},{NODES[2]}", "--gres=gpu:2", "--requeue",
        f"--comment={MIGRATABLE}", "--wrap", "sleep 300",
    )  # fmt: skip
    try:
        wait_running(cluster, job)
        nodes = [NodeModel(n, numa_nodes(1, 2), (gpu(0, 0), gpu(1, 0))) for n in NODES]
        parts = [
            WorkloadModel(f"slurm-job-{job}", n, gpus=(0, 1), time_left_seconds=36_000.0)
            for n in (NODES[0], NODES[2])
        ]
        advice = FabricPlacement(fabric=read_fabric_file(fabric_file))
        [move] = advice.evaluate(cluster_model(nodes, parts)).recommendations
        assert move.proposed["nodes"] == [NODES[0], NODES[1]]
        moving = commands_manager(cluster).steer_fabric(move)
        assert moving.status is ActionStatus.RUNNING, moving.error

        last = [""]

        def restarted() -> bool:
            last[0] = cluster.command("scontrol", "show", "job", str(job))
            return "JobState=RUNNING" in last[0] and "Restarts=1" in last[0]

        # generous: on a loaded machine slurmctld's next scheduling pass may be late
        try:
            wait_for(restarted, f"job {job} restarted", 240)
        except ClusterError as exc:
            raise AssertionError(f"{exc}; Slurm shows:\n{last[0]}") from None
        ran_on = cluster.command("squeue", "-h", "-j", str(job), "-o", "%N").strip()
        assert ran_on == f"{PREFIX}[1-2]"
    finally:
        cluster.command("scancel", str(job), check=False)


def test_steps_are_checked_before_slurm_sees_them() -> None:
    [step] = steer_steps(42, ["gpu01", "gpu02"], switches=2, wait_s=90_000 - 3600 * 2)
    assert step == CommandStep(
        ("scontrol", "update", "JobId=42", "ReqNodeList=gpu01,gpu02", "Switches=2@23:00:00"),
        step.what,
    )
    assert switches_value(1) == "1" and switches_value(3, 86_400) == "3@1-00:00:00"
    assert steer_steps(42) == ()
    bad: list[tuple[int, list[str], int | None, float]] = [
        (0, ["gpu01"], None, 0.0),
        (42, ["gpu01;reboot"], None, 0.0),
        (42, [], 0, 0.0),
        (42, [], 1, float("nan")),
    ]
    for job, nodes, switches, wait in bad:
        with pytest.raises(InvalidChangeError):
            steer_steps(job, nodes, switches, wait)
    with pytest.raises(InvalidChangeError, match="needs the nodes"):
        requeue_steps(42, [])
    requeue, ended, steer, release = requeue_steps(42, ["gpu01", "gpu02"], 1)
    assert isinstance(requeue, CommandStep)
    assert requeue.argv == ("scontrol", "requeuehold", "42")
    assert isinstance(ended, WaitStep) and ended.check[:2] == ("sh", "-c")
    assert isinstance(steer, CommandStep) and steer.argv[-1] == "StartTime=now"
    assert isinstance(release, CommandStep) and release.argv == ("scontrol", "release", "42")
    assert steer_plan_notes(120) == ""
    assert "max_switch_wait=900" in steer_plan_notes(900)
    with pytest.raises(ValueError, match="not a topology line"):
        read_topology("SwitchName=x Level=zero\n")


def test_a_cluster_with_a_topology_names_the_tree_plugin(tmp_path: Path) -> None:
    ports = Ports(ctld=6817, nodes=(6818,), rest=6820)
    layout = ClusterLayout(tmp_path)
    with_tree = slurm_conf_text(ClusterSpec(nodes=1, topology_conf="x"), layout, ports, False)
    assert "TopologyPlugin=topology/tree" in with_tree.splitlines()
    plain = slurm_conf_text(ClusterSpec(nodes=1), layout, ports, False)
    assert "TopologyPlugin" not in plain
    assert layout.topology_conf == tmp_path / "etc" / "topology.conf"
