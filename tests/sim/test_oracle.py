"""The cluster oracle: the best joint allocation, exact where it reaches its bound."""

from __future__ import annotations

import pytest

from toposcope.rm import Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.oracle import knapsack_bound, solve
from toposcope.sim.scenarios import build_cluster, load_scenario
from toposcope.sim.templates import builtin_template
from toposcope.sim.truth_params import truth

XEON = builtin_template("xeon-2s")
PCIE8 = builtin_template("pcie-8gpu-2sw")


def xeon_cluster() -> SimCluster:
    cluster = SimCluster(SimClock(speed=0), scheduler="none")
    cluster.add_node("x1", XEON)
    return cluster


def test_two_cpu_jobs_on_one_socket_are_split_over_both() -> None:
    cluster = xeon_cluster()
    cpus0 = list(XEON.node_cpus(0))
    for name in ("a", "b"):
        job = make_job(name, JobKind.CPU_TRAIN, threads=28, memory_gb=8)
        cluster.submit(job, Allocation("x1", cpus0, [0], []))
    result = solve(cluster)
    assert result.baseline == pytest.approx(1.0)  # contention 2: each at half speed
    assert result.total == pytest.approx(2.0)
    assert result.exact and result.gain == pytest.approx(1.0)
    chosen = {tuple(a.cpus) for a in result.allocations.values() if a is not None}
    assert len(chosen) == 2  # one per NUMA node


def test_remote_memory_is_the_calibrated_57_76_percent() -> None:
    cluster = xeon_cluster()
    job = make_job("cnn", JobKind.CPU_TRAIN, threads=28, memory_gb=64)
    cluster.submit(job, Allocation("x1", list(XEON.node_cpus(0)), [1], []))
    result = solve(cluster)
    # the job's own NUMA sensitivity times the truth's cost of remote memory at SLIT 21
    expected = job.numa_sensitivity * truth().remote_cost(XEON.distance(0, 1))
    assert result.gain == pytest.approx(expected, abs=1e-4)
    assert result.gain == pytest.approx(0.5776, abs=0.1)  # near the CRI-RM measurement


def test_notebooks_release_their_gpus_and_pending_jobs_are_placed() -> None:
    cluster = SimCluster(SimClock(speed=0), scheduler="none")
    cluster.add_node("p1", PCIE8)
    for i in range(8):
        cluster.submit(make_job(f"nb{i}", JobKind.NOTEBOOK), Allocation("p1", [], [], [i]))
    cluster.submit(make_job("train", JobKind.GPU_TRAIN, gpus=2))
    result = solve(cluster)
    assert result.baseline == 0.0 and result.jobs == 1
    assert result.total == pytest.approx(1.0) and result.exact
    placed = result.allocations["train.service"]
    assert placed is not None and PCIE8.link_class(*placed.gpus) == "same-switch"


def test_more_gpu_demand_than_gpus_is_bounded_by_the_knapsack() -> None:
    assert knapsack_bound([4, 4, 2, 0], 8) == 3
    assert knapsack_bound([3, 3, 3], 8) == 2
    scenario = load_scenario("builtin:dgx-misplaced")
    cluster = build_cluster(scenario, SimClock(seed=0, speed=0))
    cluster.advance(1.0)
    result = solve(cluster)
    # 18 GPUs asked for on 16: one 4-GPU job waits, every other job at its best
    assert result.upper_bound == 7.0 and result.total == pytest.approx(7.0) and result.exact
    assert result.gain > 0.5
