"""Both readers against the real cluster: the same jobs, CPU ids and GPU indices either way.

Jobs are real ``sbatch --wrap 'sleep 600'`` jobs on the shared cluster of conftest.py
(2 sockets x 4 cores x 2 threads, 4 fake GPUs per node, gres.conf giving GPUs 0-1 the cores
of socket 0 and GPUs 2-3 those of socket 1).
"""

from __future__ import annotations

import time

from tests.slurm.conftest import SHAPE, wait_running
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.daemons import wait_for
from toposcope.slurm.jwt import parse_jwt
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.reader import CommandReader, RestReader
from toposcope.slurm.records import ClusterState, PendingJob
from toposcope.slurm.rest import SlurmRestClient


def readers(cluster: LocalCluster) -> tuple[RestReader, CommandReader]:
    """Both readers, on one clock so that their times left compare equal."""
    now = time.time()
    client = SlurmRestClient(cluster.rest_url, parse_jwt(cluster.token(), "scontrol token"))
    return (
        RestReader(client, clock=lambda: now),
        CommandReader(SlurmCommands(cluster.layout.slurm_conf), clock=lambda: now),
    )


def test_rest_and_commands_read_the_same_allocations(slurm: LocalCluster) -> None:
    one = slurm.sbatch(
        "-J", "one-gpu", "--gres=gpu:1", "-c", "2", "-t", "30", "--wrap", "sleep 600"
    )
    two = slurm.sbatch("-J", "two-gpus", "--gres=gpu:2", "-c", "3", "--wrap", "sleep 600")
    wide = slurm.sbatch("-J", "wide", "--gres=gpu:1", "-N", "2", "--wrap", "sleep 600")
    wait_running(slurm, one, two, wide)
    rest, commands = readers(slurm)
    by_rest, by_commands = rest.read(), commands.read()

    assert by_rest.running == by_commands.running  # job_resources math == scontrol's CPU_IDs
    jobs = {j.job_id: j for j in by_rest.running}
    assert sorted(jobs) == [one, two, wide]
    assert jobs[one].name == "one-gpu" and jobs[one].user == "root"
    assert jobs[one].partition == "gpu" and jobs[one].time_limit_s == 1800
    assert 0 < (jobs[one].time_left_s or 0) <= 1800
    assert jobs[two].time_left_s is None
    assert len(jobs[wide].allocations) == 2
    for job in jobs.values():
        for allocation in job.allocations:
            assert allocation.node in slurm.node_names
            # a whole number of cores (2 threads each), within the node
            assert len(allocation.cpus) % SHAPE.threads_per_core == 0
            assert set(allocation.cpus) <= set(range(SHAPE.cpus))
    (one_alloc,) = jobs[one].allocations
    (two_alloc,) = jobs[two].allocations
    assert len(one_alloc.gpus) == 1 and len(two_alloc.gpus) == 2
    assert len(one_alloc.cpus) == 2 and len(two_alloc.cpus) == 4  # 3 CPUs round up to 2 cores
    # what the node says is in use is what the jobs hold
    for node in by_rest.nodes:
        held = {
            g for j in by_rest.running for a in j.allocations if a.node == node.name for g in a.gpus
        }
        assert set(node.gpus_used) == held
        assert (node.sockets, node.cores_per_socket, node.threads_per_core) == (2, 4, 2)
        assert node.gpus == SHAPE.gpus


def test_gpus_come_with_the_cores_of_their_socket(slurm: LocalCluster) -> None:
    """With --gres-flags=enforce-binding, the CPUs and the GPUs are on the same socket."""
    job = slurm.sbatch(
        "--gres=gpu:2", "--gres-flags=enforce-binding", "-c", "2", "--wrap", "sleep 600"
    )
    wait_running(slurm, job)
    for reader in readers(slurm):
        (allocation,) = reader.read().running[0].allocations
        cores_per_socket_cpus = SHAPE.cores_per_socket * SHAPE.threads_per_core
        sockets_of_cpus = {cpu // cores_per_socket_cpus for cpu in allocation.cpus}
        sockets_of_gpus = {gpu // 2 for gpu in allocation.gpus}
        assert sockets_of_cpus == sockets_of_gpus, allocation


def test_pending_jobs_with_their_request_and_reason(slurm: LocalCluster) -> None:
    blockers = [
        slurm.sbatch("--gres=gpu:4", "-w", node, "--wrap", "sleep 600") for node in slurm.node_names
    ]
    wait_running(slurm, *blockers)
    waiting = slurm.sbatch(
        "-J", "waits", "--gres=gpu:2", "-N", "2", "-c", "3", "--wrap", "sleep 600"
    )
    rest, commands = readers(slurm)

    def reason_known() -> ClusterState | None:
        state = rest.read()
        job = state.job(waiting)
        return state if isinstance(job, PendingJob) and job.reason != "None" else None

    state = wait_for(reason_known, "a reason for the pending job", 30)
    (pending,) = state.pending
    assert pending.job_id == waiting and pending.name == "waits"
    assert pending.reason in {"Resources", "Priority"}
    assert (pending.nodes, pending.gpus_per_node) == (2, 2)
    assert pending.cpus >= 6 and pending.wait_s >= 0
    (by_commands,) = commands.read().pending
    assert (by_commands.job_id, by_commands.nodes, by_commands.cpus, by_commands.gpus_per_node) == (
        pending.job_id,
        pending.nodes,
        pending.cpus,
        pending.gpus_per_node,
    )
