"""NUMA memory capacity: full nodes spill pages to the nearest node with room, the model
charges the spill as remote memory, the counters show it, and the oracle binds memory only
where it fits."""

from __future__ import annotations

import pytest

from toposcope.rm import Allocation
from toposcope.sim.jobs import JobKind, JobSpec, make_job
from toposcope.sim.model import evaluate, job_memory_flows
from toposcope.sim.oracle import solve
from toposcope.sim.placement import memory_fits, memory_layout, memory_use
from toposcope.sim.scenarios import build_cluster, load_scenario
from toposcope.sim.templates import builtin_template
from toposcope.sim.truth_params import truth

XEON = builtin_template("xeon-2s")  # 2 NUMA nodes of 96 GiB, SLIT 21 between them
GIB = 2**30
SOCKET0 = [c for c in XEON.cpus if XEON.numa_of_cpu(c) == 0]
SOCKET1 = [c for c in XEON.cpus if XEON.numa_of_cpu(c) == 1]


def _cnn(name: str, memory_gb: float) -> JobSpec:
    return make_job(name, JobKind.CPU_TRAIN, threads=28, memory_gb=memory_gb)


def test_two_jobs_bound_to_one_full_node_spill_a_quarter_each() -> None:
    on1 = Allocation("x", SOCKET1, [1], [])
    jobs = [(64 * GIB, on1, 28), (64 * GIB, Allocation("x", SOCKET0, [1], []), 28)]
    layout = memory_layout(jobs, XEON)
    assert layout[0] == pytest.approx({(1, 1): 3 / 4, (1, 0): 1 / 4})
    assert layout[1] == pytest.approx({(0, 1): 3 / 4, (0, 0): 1 / 4})
    use = memory_use(jobs, XEON)
    assert use == pytest.approx({0: 32 * GIB, 1: 96 * GIB})


def test_the_model_charges_spilled_pages_as_remote_memory() -> None:
    job = _cnn("well-placed", 64)
    other = _cnn("wrong-memory", 64)
    mine = Allocation("x", SOCKET1, [1], [])
    alone = evaluate(job, mine, XEON)
    crowded = evaluate(job, mine, XEON, [(other, Allocation("x", SOCKET0, [1], []))])
    assert alone.slowdown == pytest.approx(1.0)
    spilled = 1 / 4 * truth().remote_cost(21)
    assert crowded.factors["numa"] == pytest.approx(1 + job.numa_sensitivity * spilled)
    small = _cnn("small", 30)
    fits = evaluate(job, mine, XEON, [(small, Allocation("x", SOCKET0, [1], []))])
    assert fits.slowdown == pytest.approx(1.0)
    flows = job_memory_flows(job, mine, XEON, [(small, Allocation("x", SOCKET0, [1], []))])
    assert flows == pytest.approx({(1, 1): 1.0})


def test_memory_fits_refuses_a_binding_without_room() -> None:
    held = memory_use([(64 * GIB, Allocation("x", SOCKET0, [0], []), 28)], XEON)
    assert not memory_fits(64 * GIB, Allocation("x", SOCKET0, [0], []), XEON, held)
    assert memory_fits(32 * GIB, Allocation("x", SOCKET0, [0], []), XEON, held)
    assert memory_fits(64 * GIB, Allocation("x", SOCKET0, [0, 1], []), XEON, held)
    assert memory_fits(64 * GIB, Allocation("x", SOCKET0, [], []), XEON, held)


def test_memory_pressure_counters_show_the_spill() -> None:
    cluster = build_cluster(load_scenario("builtin:memory-pressure"))
    cluster.advance(60)
    snap = cluster.node_snapshot("xeon-02")
    by_job = {w.name: w.memory_by_node for w in snap.workloads}
    for name in ("cnn-crowded-a.service", "cnn-crowded-b.service"):
        assert by_job[name][0] == pytest.approx(48 * GIB, rel=1e-6)
        assert by_job[name][1] == pytest.approx(16 * GIB, rel=1e-6)
    for node in cluster.node_names():
        snap = cluster.node_snapshot(node)
        for numa in XEON.numa_ids:
            used = sum(w.memory_by_node.get(numa, 0) for w in snap.workloads)
            assert used <= 96 * GIB + 1
    # crowded-a's threads are on node 0: its spilled pages are misses there
    stat = cluster.node_snapshot("xeon-02").numastat
    assert stat[1]["other"] > 0 and stat[0]["foreign"] > 0
    rows = {r.name: r for r in cluster.truth()}
    assert rows["cnn-crowded-a.service"].factors["numa"] > 1.0


def test_the_oracle_binds_memory_only_where_it_fits() -> None:
    cluster = build_cluster(load_scenario("builtin:memory-pressure"))
    result = solve(cluster, budget_s=30.0)
    assert result.total > result.baseline
    assert result.total < result.upper_bound  # not every job can reach its best at once
    for node in cluster.node_names():
        placed = [
            (spec.memory_bytes, alloc, spec.threads)
            for name, alloc in result.allocations.items()
            if alloc is not None and alloc.node == node
            for spec in [next(j.spec for j in cluster.job_states() if j.name == name)]
        ]
        for (_, alloc, _), flow in zip(placed, memory_layout(placed, XEON), strict=True):
            if alloc.mems:
                assert {target for _, target in flow} <= set(alloc.mems), alloc
