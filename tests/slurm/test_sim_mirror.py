"""The simulator with Slurm as its scheduler, against a real Slurm cluster built from its nodes.

The cluster's slurm.conf and gres.conf come from the simulator's node description; the
simulator submits its scenario's jobs to that slurmctld and mirrors what Slurm allocated.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.slurm.conftest import require_slurm, state_dir
from tests.slurm.managers import commands_manager, wait_final
from toposcope.cpulist import parse_cpulist
from toposcope.rm import ActionKind, ActionRequest, ActionStatus
from toposcope.sim.clock import SimClock
from toposcope.sim.scenarios import load_scenario
from toposcope.sim.slurm_cluster import SlurmMirroredCluster
from toposcope.sim.slurm_description import describe_cluster
from toposcope.sim.slurm_mirror import MirroredJob, SlurmMirror, SlurmRunner
from toposcope.sim.slurm_mode import build_mirrored
from toposcope.slurm.clusterfiles import ClusterLayout
from toposcope.slurm.daemons import wait_for
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.standalone import spec_from_description
from toposcope.topology.cores import slurm_cpu_order

PREFIX = f"m{os.getpid()}-"
SCENARIO = f"""
name: mirrored
seed: 1
nodes:
  - {{name: {PREFIX}a, template: pcie-4gpu}}
  - {{name: {PREFIX}b, template: pcie-4gpu}}
jobs:
  - {{name: pair, type: gpu-train, gpus: 2, threads: 6}}
  - {{name: single, type: inference, gpus: 1, threads: 3}}
  - {{name: short, type: gpu-train, gpus: 1, threads: 2, duration: 30}}
"""


@dataclass
class Loop:
    """The Slurm cluster, the mirrored simulator and its mirror."""

    slurm: LocalCluster
    cluster: SlurmMirroredCluster
    mirror: SlurmMirror

    def job(self, scenario_name: str) -> MirroredJob:
        """The mirrored job submitted for ``scenario_name``."""
        return next(j for j in self.mirror.jobs() if j.scenario_name == scenario_name)

    def until(self, check: object, what: str) -> None:
        """Step the mirror until ``check()`` holds."""

        def stepped() -> bool:
            self.mirror.step()
            return bool(check())  # type: ignore[operator]

        wait_for(stepped, what, 60)


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loop]:
    """A 2-node Slurm cluster built from the simulator's description, with the jobs running."""
    require_slurm()
    path = tmp_path_factory.mktemp("scenario") / "mirrored.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(str(path))
    cluster = build_mirrored(scenario, SimClock(seed=1, speed=20.0))
    layout = ClusterLayout(state_dir("mirror"))
    spec = spec_from_description(json.loads(json.dumps(describe_cluster(cluster))), layout)
    slurm = LocalCluster(layout.root, spec)
    slurm.start()
    try:
        mirror = SlurmMirror(
            cluster, [j.spec for j in scenario.jobs], SlurmRunner(layout.slurm_conf)
        )
        yield Loop(slurm, cluster, mirror)
    finally:
        slurm.stop()


def _allocation_by_slurm(slurm: LocalCluster, job: int) -> tuple[str, set[int], set[int]]:
    text = slurm.command("scontrol", "-d", "show", "job", str(job))
    found = re.search(r"Nodes=(\S+) CPU_IDs=(\S+) .*?GRES=gpu[^(]*\(IDX:([0-9,-]+)\)", text)
    assert found is not None, text
    return found.group(1), set(parse_cpulist(found.group(2))), set(parse_cpulist(found.group(3)))


def test_the_generated_files_are_what_slurmd_runs(loop: Loop) -> None:
    text = loop.slurm.command("scontrol", "show", "node", f"{PREFIX}a")
    # pcie-4gpu: 2 sockets x 24 cores x 2 threads, GPUs 0-1 on socket 0, 2-3 on socket 1
    assert "CPUTot=96" in text and "Sockets=2" in text and "CoresPerSocket=24" in text
    assert "Gres=gpu:4(S:0-1)" in text
    gres = loop.slurm.layout.gres_conf.read_text()
    assert f"NodeName={PREFIX}a Name=gpu File={loop.slurm.layout.dev}/nvidia0 Cores=0-23" in gres
    assert f"NodeName={PREFIX}b Name=gpu File={loop.slurm.layout.dev}/nvidia3 Cores=24-47" in gres


def test_the_mirror_follows_slurms_real_allocation(loop: Loop) -> None:
    loop.until(
        lambda: all(j.state == "RUNNING" for j in loop.mirror.jobs()) and loop.mirror.jobs(),
        "every job running in the simulator",
    )
    views = {w.name: w for w in loop.cluster.workloads()}
    for job in loop.mirror.jobs():
        node, slurm_cpus, slurm_gpus = _allocation_by_slurm(loop.slurm, job.job_id)
        allocation = views[job.workload].allocation
        assert allocation is not None
        order = slurm_cpu_order(loop.cluster.template_of(node).topology)
        assert allocation.node == node
        assert {order.index(cpu) for cpu in allocation.cpus} == slurm_cpus
        assert set(allocation.gpus) == slurm_gpus
        assert len(slurm_gpus) == {"pair": 2, "single": 1, "short": 1}[job.scenario_name]


def test_a_job_the_simulator_finished_is_ended_in_slurm(loop: Loop) -> None:
    loop.until(lambda: loop.job("short").state == "DONE", "the short job done")
    short = loop.job("short")
    assert short.cancelled_by_sim
    assert str(short.job_id) not in loop.slurm.command("squeue", "-h", "-o", "%A").split()
    assert short.workload in loop.cluster.done_names()


def test_a_job_the_advisor_requeues_is_followed_to_its_new_node(loop: Loop) -> None:
    loop.until(lambda: loop.job("pair").state == "RUNNING", "the pair running")
    pair = loop.job("pair")
    source = pair.nodes[-1]
    target = next(n for n in loop.slurm.node_names if n != source)
    manager = commands_manager(loop.slurm)
    request = ActionRequest("mirror-move", ActionKind.MIGRATE, pair.workload, target, gpus=[0, 1])
    assert manager.apply(request).status is ActionStatus.RUNNING
    done = wait_final(manager, "mirror-move")
    assert done.status is ActionStatus.SUCCEEDED, done.error

    loop.until(lambda: loop.job("pair").nodes[-1] == target, "the pair followed to the target")
    moved = loop.job("pair")
    assert moved.restarts == 1 and moved.nodes == [source, target]
    view = next(w for w in loop.cluster.workloads() if w.name == pair.workload)
    assert view.allocation is not None and view.allocation.node == target
    _, _, gpus = _allocation_by_slurm(loop.slurm, pair.job_id)
    assert set(view.allocation.gpus) == gpus
    # the restart costs its checkpoint-restore time: no progress right after the move
    truth = next(r for r in loop.cluster.truth() if r.name == pair.workload)
    assert truth.node == target and truth.throughput == 0.0
