"""The simulated cluster behind the resource-manager protocol: validation, idempotency,
costs, time and thread safety.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from toposcope.rm import (
    ActionKind,
    ActionRequest,
    ActionStatus,
    Allocation,
    ResourceManager,
    ResourceManagerError,
)
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster, checkpoint_restore_seconds
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.scenarios import parse_scenario
from toposcope.sim.templates import builtin_template
from toposcope.sim.truth_params import truth

XEON = builtin_template("xeon-2s")
PCIE8 = builtin_template("pcie-8gpu-2sw")
NODE0 = list(XEON.node_cpus(0))
NODE1 = list(XEON.node_cpus(1))


@pytest.fixture
def cluster() -> SimCluster:
    sim = SimCluster(SimClock(seed=1), scheduler="none")
    sim.add_node("cpu-01", XEON)
    sim.add_node("gpu-01", PCIE8)
    sim.add_node("gpu-02", PCIE8)
    sim.submit(
        make_job("cnn", JobKind.CPU_TRAIN, threads=28),
        Allocation("cpu-01", NODE0, [1], []),
    )
    sim.submit(
        make_job("pair", JobKind.GPU_TRAIN, gpus=2, comm_intensity=1.0, duration=3600),
        Allocation("gpu-01", [], [], [0, 4]),
    )
    sim.submit(make_job("nb", JobKind.NOTEBOOK, gpus=1), Allocation("gpu-01", [], [], [1]))
    sim.submit(make_job("queued", JobKind.GPU_TRAIN, gpus=2))
    return sim


def request(kind: ActionKind, workload: str, rid: str = "r1", **fields: object) -> ActionRequest:
    return ActionRequest(request_id=rid, kind=kind, workload=workload, **fields)  # type: ignore[arg-type]


def throughput(sim: SimCluster, name: str) -> float:
    return {row.name: row.throughput for row in sim.truth()}[name]


def test_implements_the_protocol(cluster: SimCluster) -> None:
    rm: ResourceManager = cluster
    names = {node.name for node in rm.nodes()}
    assert names == {"cpu-01", "gpu-01", "gpu-02"}
    node = next(n for n in rm.nodes() if n.name == "gpu-01")
    assert node.labels["template"] == "pcie-8gpu-2sw"
    assert len(node.topology["gpus"]) == 8  # type: ignore[arg-type]
    views = {w.name: w for w in rm.workloads()}
    assert views["cnn.service"].pinned and views["cnn.service"].allocation.mems == [1]  # type: ignore[union-attr]
    assert views["queued.service"].state == "pending" and views["queued.service"].allocation is None
    assert views["pair.service"].gpus_requested == 2 and not views["pair.service"].pinned
    unpinned = views["nb.service"].allocation
    assert unpinned is not None and unpinned.cpus == list(PCIE8.cpus) and unpinned.mems == [0, 1]


@pytest.mark.parametrize(
    ("req", "status", "message"),
    [
        (request(ActionKind.PIN, "ghost", cpus=[0]), 404, "unknown workload 'ghost'"),
        (request(ActionKind.PIN, "cnn.service", cpus=[0, 99]), 400, "CPUs [99] are not on node"),
        (request(ActionKind.PIN, "cnn.service", cpus=[0], mems=[3]), 400, "NUMA nodes [3]"),
        (request(ActionKind.PIN, "cnn.service"), 400, "pin needs cpus"),
        (request(ActionKind.MIGRATE_MEMORY, "cnn.service"), 400, "needs mems"),
        (request(ActionKind.PIN, "queued.service", cpus=[0]), 409, "is pending"),
        (
            request(ActionKind.PLACE, "queued.service", node="gpu-01", gpus=[1, 2]),
            409,
            "GPUs [1] on gpu-01 are held by nb.service",
        ),
        (
            request(ActionKind.PLACE, "queued.service", node="gpu-09", gpus=[1, 2]),
            404,
            "unknown node",
        ),
        (
            request(ActionKind.PLACE, "queued.service", node="gpu-02", gpus=[8, 9]),
            400,
            "not on node",
        ),
        (request(ActionKind.PLACE, "queued.service", node="gpu-02", gpus=[1]), 400, "needs 2 GPU"),
        (request(ActionKind.PLACE, "queued.service"), 400, "place needs a node"),
        (request(ActionKind.PLACE, "pair.service", node="gpu-02", gpus=[0, 1]), 409, "is running"),
        (
            request(ActionKind.MIGRATE, "pair.service", node="gpu-01", gpus=[1, 2]),
            409,
            "held by nb.service",
        ),
        (
            request(ActionKind.PLACE, "queued.service", node="gpu-02", gpus=[0, 1], cpus=[500]),
            400,
            "CPUs",
        ),
    ],
)
def test_validation(cluster: SimCluster, req: ActionRequest, status: int, message: str) -> None:
    before = {w.name: w for w in cluster.workloads()}
    with pytest.raises(ResourceManagerError) as info:
        cluster.apply(req)
    assert info.value.status == status
    assert message in str(info.value)
    assert {w.name: w for w in cluster.workloads()} == before


def test_pin_fixes_the_misplaced_memory_and_is_idempotent(cluster: SimCluster) -> None:
    cnn = make_job("cnn", JobKind.CPU_TRAIN, threads=28)  # the same draws as the fixture's
    remote = 1 + cnn.numa_sensitivity * truth().remote_cost(XEON.distance(0, 1))
    assert throughput(cluster, "cnn.service") == pytest.approx(100 / remote)
    req = request(ActionKind.PIN, "cnn", rid="rec-1#0", cpus=NODE0, mems=[0])
    first = cluster.apply(req)
    assert first.before is not None and first.before.mems == [1]
    assert first.after is not None and first.after.mems == [0]
    assert first.cost_seconds > 0 and first.status is ActionStatus.RUNNING
    assert throughput(cluster, "cnn.service") == pytest.approx(100.0)
    again = cluster.apply(req)
    assert again.id == first.id and again.before == first.before
    assert cluster.action_counts() == {("pin", "applied"): 1}
    cluster.advance(first.cost_seconds)
    assert cluster.action(first.id).status is ActionStatus.SUCCEEDED
    # a client that crashed before reading the answer finds the action by its request id
    assert cluster.action("rec-1#0").id == first.id
    with pytest.raises(ResourceManagerError) as info:
        cluster.apply(request(ActionKind.PIN, "cnn", rid="rec-1#0", cpus=NODE1, mems=[1]))
    assert info.value.status == 409
    with pytest.raises(ResourceManagerError) as unknown:
        cluster.action("act-999999")
    assert unknown.value.status == 404


def test_migrate_costs_checkpoint_restore_time(cluster: SimCluster) -> None:
    spec_cost = checkpoint_restore_seconds(make_job("pair", JobKind.GPU_TRAIN, gpus=2))
    before = throughput(cluster, "pair.service")
    state = cluster.apply(
        request(ActionKind.MIGRATE, "pair.service", node="gpu-02", gpus=[2, 3], rid="m1")
    )
    assert state.cost_seconds == pytest.approx(spec_cost)
    assert state.status is ActionStatus.RUNNING
    assert state.after == Allocation("gpu-02", list(PCIE8.cpus), [0, 1], [2, 3])
    assert throughput(cluster, "pair.service") == 0.0
    cluster.advance(spec_cost / 2)
    assert cluster.action(state.id).status is ActionStatus.RUNNING
    cluster.advance(spec_cost / 2)
    assert cluster.action(state.id).status is ActionStatus.SUCCEEDED
    assert throughput(cluster, "pair.service") > before
    # the old GPUs are free again
    cluster.apply(request(ActionKind.PLACE, "queued", node="gpu-01", gpus=[0, 4], rid="p1"))


def test_jobs_finish_after_duration_times_slowdown(cluster: SimCluster) -> None:
    slowdown = {r.name: r.slowdown for r in cluster.truth()}["pair.service"]
    cluster.advance(3600 * slowdown - 1)
    assert {w.name: w.state for w in cluster.workloads()}["pair.service"] == "running"
    cluster.advance(2)
    assert {w.name: w.state for w in cluster.workloads()}["pair.service"] == "done"


def test_release_frees_gpus_and_requeues_training(cluster: SimCluster) -> None:
    state = cluster.apply(request(ActionKind.RELEASE, "nb", rid="rel"))
    assert state.after is not None and state.after.gpus == []
    views = {w.name: w for w in cluster.workloads()}
    assert views["nb.service"].state == "running"
    cluster.apply(request(ActionKind.PLACE, "queued", node="gpu-01", gpus=[1, 2], rid="p"))
    cluster.apply(request(ActionKind.RELEASE, "pair", rid="rel2"))
    assert {w.name: w.state for w in cluster.workloads()}["pair.service"] == "pending"


def test_first_fit_scheduler_places_arrivals() -> None:
    sim = SimCluster(SimClock(), scheduler="first-fit")
    sim.add_node("gpu-01", PCIE8)
    sim.submit(make_job("a", JobKind.GPU_TRAIN, gpus=1, submit_time=10))
    sim.submit(make_job("b", JobKind.GPU_TRAIN, gpus=2, submit_time=20))
    assert sim.counts()["running"] == 0
    sim.advance(15)
    assert {w.name: w.allocation.gpus for w in sim.workloads() if w.allocation} == {
        "a.service": [0]
    }
    sim.advance(10)
    views = {w.name: w.allocation.gpus for w in sim.workloads() if w.allocation}
    assert views["b.service"] == [1, 2]  # first fit: across switches


def test_concurrent_actions_from_many_threads(cluster: SimCluster) -> None:
    errors: list[BaseException] = []
    results: list[str] = []

    def worker(i: int) -> None:
        try:
            for j in range(20):
                cpus = NODE0 if (i + j) % 2 else NODE1
                state = cluster.apply(
                    request(ActionKind.PIN, "cnn", rid=f"t{i}-{j}", cpus=cpus, mems=[0])
                )
                results.append(state.id)
                cluster.workloads()
                cluster.node_snapshot("cpu-01")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert len(set(results)) == 120
    assert cluster.action_counts() == {("pin", "applied"): 120}


def _one_by_one_and_batched(scenario_text: str) -> tuple[SimCluster, SimCluster]:
    """The same scenario submitted job by job, and inside ``building()``."""
    scenario = parse_scenario(scenario_text, "batch", Path("."))
    clusters = []
    for batched in (False, True):
        sim = SimCluster(SimClock(seed=scenario.seed, speed=0), scheduler=scenario.scheduler)
        for node in scenario.nodes:
            sim.add_node(node.name, node.template, node.labels)
        with sim.building() if batched else contextlib.nullcontext():
            for job in scenario.jobs:
                sim.submit(job.spec, job.placement)
        clusters.append(sim)
    return clusters[0], clusters[1]


def test_submitting_in_one_batch_gives_what_job_by_job_submission_gives() -> None:
    """Loading a scenario submits every job inside ``building()`` (each node's jobs are
    evaluated once, at the end, instead of on every arrival): what follows (speeds, the
    order jobs finish in, counters) is what job-by-job submission gives.
    """
    text = (
        "seed: 5\nscheduler: first-fit\n"
        "generate: {nodes: {dgx-a100: 3, pcie-4gpu: 3, xeon-2s: 2}, workloads: 60}\n"
        "jobs:\n"
        "  - {name: worker, type: gpu-train, gpus: 2, count: 6, duration: 1800}\n"
        "  - {name: later, type: gpu-train, gpus: 1, count: 4, submit: 300, duration: 900}\n"
        "  - {name: cpu, type: cpu-train, threads: 8, count: 4, duration: 1200}\n"
    )
    one_by_one, batched = _one_by_one_and_batched(text)
    for _ in range(8):
        assert batched.workloads() == one_by_one.workloads()
        assert batched.truth() == one_by_one.truth()
        assert batched.finished() == one_by_one.finished()
        for node in one_by_one.node_names():
            assert batched.node_snapshot(node) == one_by_one.node_snapshot(node)
        one_by_one.advance(400.0)
        batched.advance(400.0)
    assert one_by_one.finished()
