"""numa-pinning on hand-made models."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.advisor.builders import ALL_METRICS, GIB, cluster, gpu, numa_nodes, pcie4, workload
from toposcope.advisor.model import NodeModel
from toposcope.advisor.policies.numa_pinning import NumaPinning, NumaPinningSettings
from toposcope.rm import ActionKind


def test_gpu_workload_running_on_the_far_socket_is_pinned_to_its_gpus_node() -> None:
    job = workload("train", cpu={1: 4.0}, memory={1: 8 * GIB}, gpus=[0])
    result = NumaPinning().evaluate(cluster([pcie4()], [job]))
    [rec] = result.recommendations
    assert rec.kind == "pin"
    assert rec.proposed["numa_node"] == 0
    assert rec.proposed["cpus"] == "0-7"
    # fully remote at SLIT 21, scaled by the GPU job's share of the CPU-training penalty
    assert rec.estimated_gain == pytest.approx(0.5776 * 0.4)
    assert "CRI-RM" in rec.gain_model and "gpu_job_share 0.4" in rec.gain_model
    pin, migrate = rec.actions
    assert (pin.kind, pin.cpus, pin.mems, pin.node) == (ActionKind.PIN, list(range(8)), [0], "n1")
    assert (migrate.kind, migrate.mems) == (ActionKind.MIGRATE_MEMORY, [0])
    assert [a.request_id for a in rec.actions] == [f"{rec.id}-0", f"{rec.id}-1"]
    assert rec.claims == ("workload:n1/train",)
    series = {e.series for e in rec.evidence}
    assert {"toposcope_workload_cpu_seconds_total", "toposcope_gpu_info"} <= series


def test_spread_workload_goes_to_its_dominant_node() -> None:
    spread = workload("db", cpu={0: 1.0, 1: 1.0}, memory={0: 9 * GIB, 1: 1 * GIB})
    [rec] = NumaPinning().evaluate(cluster([pcie4()], [spread])).recommendations
    assert rec.proposed["numa_node"] == 0
    assert rec.estimated_gain == pytest.approx((1 - 0.5 * 0.9) * 0.5776, rel=1e-4)
    assert rec.current["cpu_share_by_numa"] == {"0": 0.5, "1": 0.5}


def test_local_workload_is_left_alone() -> None:
    local = workload("ok", cpu={0: 2.0}, memory={0: 4 * GIB, 1: 0.1 * GIB})
    assert NumaPinning().evaluate(cluster([pcie4()], [local])).recommendations == ()


def test_farthest_pair_costs_the_full_penalty_and_nearer_pairs_less() -> None:
    far = NodeModel("n1", numa_nodes(remote_distance=32), (), {})
    job = workload("w", cpu={0: 1.0, 1: 1.0}, memory={0: 4 * GIB})
    [rec] = NumaPinning().evaluate(cluster([far], [job])).recommendations
    assert rec.proposed["numa_node"] == 0
    # remote share 1 - 0.5 * 1 at the machine's farthest distance: never above the penalty
    assert rec.estimated_gain == pytest.approx(0.5 * 0.5776)
    # 4 nodes: 0-1 at SLIT 12 (same socket), 0-2 at 32 (the farthest pair)
    four = numa_nodes(count=4)
    slit = {(0, 1): 12, (1, 0): 12, (2, 3): 12, (3, 2): 12}
    nodes = tuple(
        replace(n, distances={p: slit.get((n.id, p), 10 if p == n.id else 32) for p in range(4)})
        for n in four
    )
    near = workload("w", cpu={0: 1.0}, memory={1: 4 * GIB})
    [rec] = NumaPinning().evaluate(cluster([NodeModel("n1", nodes)], [near])).recommendations
    assert rec.estimated_gain == pytest.approx(0.5776 * (12 - 10) / (32 - 10), rel=1e-4)


def test_busy_target_blocks_a_gpu_workload_with_a_note() -> None:
    busy = workload("busy", cpu={0: 7.0}, memory={0: GIB})
    other = workload("other", cpu={1: 6.0}, memory={1: GIB})
    job = workload("train", cpu={1: 2.0}, memory={1: GIB}, gpus=[0])
    result = NumaPinning().evaluate(cluster([pcie4()], [busy, other, job]))
    assert result.recommendations == ()
    [note] = result.undecided
    assert note.target == "n1/train"
    assert "no capacity" in note.reason and "exceed 8.0" in note.reason


def test_cpu_work_on_the_gpus_node_moves_to_make_room_for_the_gpu_workload() -> None:
    # node 0 (the GPU's) is full of a CPU job that could run anywhere; node 1 is free once
    # the GPU job leaves it: the CPU job moves there first, in the GPU job's recommendation
    busy = workload("busy", cpu={0: 7.0}, memory={0: GIB})
    job = workload("train", cpu={1: 2.0}, memory={1: GIB}, gpus=[0])
    result = NumaPinning().evaluate(cluster([pcie4()], [busy, job]))
    [rec] = result.recommendations
    assert rec.target.workload == "train"
    assert rec.estimated_gain == pytest.approx(0.5776 * 0.4)
    assert rec.proposed["makes_room"] == [
        {"workload": "busy", "numa_node": 1, "cpus": "8-15", "mems": [1]}
    ]
    assert [(a.kind, a.workload, a.mems) for a in rec.actions] == [
        (ActionKind.PIN, "busy", [1]),
        (ActionKind.MIGRATE_MEMORY, "busy", [1]),
        (ActionKind.PIN, "train", [0]),
        (ActionKind.MIGRATE_MEMORY, "train", [0]),
    ]
    assert rec.claims == ("workload:n1/busy", "workload:n1/train")
    assert "makes room on NUMA node 0" in rec.gain_model
    assert result.undecided == ()


def test_busy_dominant_node_falls_back_to_the_next_node() -> None:
    busy = workload("busy", cpu={0: 7.0}, memory={0: GIB})
    spread = workload("db", cpu={0: 1.0, 1: 1.0}, memory={0: 3 * GIB, 1: 1 * GIB})
    [rec] = NumaPinning().evaluate(cluster([pcie4()], [busy, spread])).recommendations
    assert rec.target.workload == "db"
    assert rec.proposed["numa_node"] == 1


def test_not_enough_free_memory_is_reported() -> None:
    job = workload("train", cpu={1: 1.0}, memory={1: 10 * GIB}, gpus=[0])
    result = NumaPinning().evaluate(cluster([pcie4(free_bytes=4 * GIB)], [job]))
    assert result.recommendations == ()
    assert "GiB to move" in result.undecided[0].reason


def test_capacity_used_by_earlier_pins_of_the_run_counts() -> None:
    a = workload("a", cpu={1: 5.0}, memory={1: GIB}, gpus=[0])
    b = workload("b", cpu={1: 5.0}, memory={1: GIB}, gpus=[1])
    result = NumaPinning().evaluate(cluster([pcie4()], [a, b]))
    assert len(result.recommendations) == 1
    assert len(result.undecided) == 1 and "no capacity" in result.undecided[0].reason


def test_unknown_free_memory_lowers_confidence_but_does_not_block() -> None:
    job = workload("train", cpu={1: 1.0}, memory={1: GIB}, gpus=[0])
    known = NumaPinning().evaluate(cluster([pcie4()], [job])).recommendations[0]
    unknown = NumaPinning().evaluate(cluster([pcie4(free_bytes=None)], [job])).recommendations[0]
    assert unknown.confidence < known.confidence
    assert unknown.risk == "medium"
    assert unknown.id == known.id  # same situation, same proposal


def test_threads_are_used_when_no_cpu_time_was_spent() -> None:
    idle = workload("idle", cpu={0: 0.0, 1: 0.0}, threads={1: 4}, memory={1: GIB}, gpus=[0])
    [rec] = NumaPinning().evaluate(cluster([pcie4()], [idle])).recommendations
    assert rec.proposed["numa_node"] == 0
    assert any(e.series == "toposcope_workload_threads" for e in rec.evidence)


def test_single_numa_node_machines_have_nothing_to_pin() -> None:
    one = NodeModel("n1", numa_nodes(count=1), (), {})
    w = workload("w", cpu={0: 1.0}, memory={0: GIB})
    assert NumaPinning().evaluate(cluster([one], [w])) == NumaPinning().evaluate(cluster([one]))


def test_missing_topology_series_is_cannot_decide() -> None:
    model = cluster([pcie4()], [], present=ALL_METRICS - {"toposcope_numa_node_info"})
    result = NumaPinning().evaluate(model)
    assert result.recommendations == ()
    assert "toposcope_numa_node_info" in result.undecided[0].reason


def test_min_remote_share_setting() -> None:
    spread = workload("db", cpu={0: 1.0, 1: 1.0}, memory={0: 9 * GIB, 1: 1 * GIB})
    strict = NumaPinning(NumaPinningSettings(min_remote_share=0.6))
    assert strict.evaluate(cluster([pcie4()], [spread])).recommendations == ()


def test_two_spread_workloads_are_pinned_to_different_nodes() -> None:
    """Each alone would not fit next to the other's half; planned jointly, both do."""
    a = workload("a", cpu={0: 4.0, 1: 4.0}, memory={0: 4 * GIB, 1: 4 * GIB})
    b = workload("b", cpu={0: 4.0, 1: 4.0}, memory={0: 4 * GIB, 1: 4 * GIB})
    recs = NumaPinning().evaluate(cluster([pcie4()], [a, b])).recommendations
    assert sorted(r.proposed["numa_node"] for r in recs) == [0, 1]


def test_a_workload_already_on_a_full_target_is_still_pinned() -> None:
    """Its own cores are on the target already: pinning adds no load there (node 1, where
    its memory is, is the worse target: another workload's threads run there).
    """
    job = workload("cnn", cpu={0: 8.0}, memory={1: 8 * GIB})
    other = workload("other", cpu={1: 2.0}, memory={1: 1 * GIB}, threads={1: 2})
    recs = NumaPinning().evaluate(cluster([pcie4()], [job, other])).recommendations
    [rec] = [r for r in recs if r.target.workload == "cnn"]
    assert rec.proposed["numa_node"] == 0


def test_workloads_crowded_on_one_node_are_spread() -> None:
    """Two 8-thread jobs confined to node 0's 8 CPUs while node 1 idles: one moves."""
    a = workload("a", cpu={0: 4.0}, threads={0: 8}, memory={0: 4 * GIB})
    b = workload("b", cpu={0: 4.0}, threads={0: 8}, memory={0: 4 * GIB})
    [rec] = NumaPinning().evaluate(cluster([pcie4()], [a, b])).recommendations
    assert rec.target.workload == "a"
    assert rec.proposed["numa_node"] == 1
    assert rec.estimated_gain == pytest.approx(8 / 4 - 1)
    assert "contention" in rec.gain_model and "oversubscribed" in rec.summary


def test_a_node_with_spare_cpus_is_not_crowded() -> None:
    a = workload("a", cpu={0: 3.0}, threads={0: 4}, memory={0: GIB})
    b = workload("b", cpu={0: 3.0}, threads={0: 4}, memory={0: GIB})
    assert NumaPinning().evaluate(cluster([pcie4()], [a, b])).recommendations == ()


def test_nearly_idle_workloads_are_left_alone() -> None:
    notebook = workload("nb", cpu={1: 0.04}, memory={1: GIB}, gpus=[0])
    assert NumaPinning().evaluate(cluster([pcie4()], [notebook])).recommendations == ()
    keen = NumaPinning(NumaPinningSettings(min_cores=0.0))
    assert len(keen.evaluate(cluster([pcie4()], [notebook])).recommendations) == 1


def test_memory_that_does_not_fit_the_target_spills_to_its_socket_neighbour() -> None:
    four = tuple(
        replace(
            n,
            package=n.id // 2,
            memory_free_bytes=(2 if n.id == 0 else 64) * GIB,
            distances={
                p: 10 if p == n.id else (12 if p // 2 == n.id // 2 else 32) for p in range(4)
            },
        )
        for n in numa_nodes(count=4)
    )
    node = NodeModel("n1", four, (gpu(0, 0),), {})
    job = workload("llm", cpu={3: 4.0}, memory={3: 8 * GIB}, gpus=[0])
    [rec] = NumaPinning().evaluate(cluster([node], [job])).recommendations
    assert rec.proposed["numa_node"] == 0
    assert rec.proposed["mems"] == [0, 1]  # the rest on the same socket, never node 2 or 3
    assert 0 < rec.estimated_gain < 0.5776
    assert "nearest nodes" in rec.gain_model
    # no room on the target's socket at all: refused, with the reason
    full = tuple(replace(n, memory_free_bytes=GIB) for n in four)
    result = NumaPinning().evaluate(cluster([NodeModel("n1", full, (gpu(0, 0),), {})], [job]))
    assert result.recommendations == () and "GiB to move" in result.undecided[0].reason


def test_threads_on_one_node_memory_on_the_other_go_where_no_one_shares_their_cpus() -> None:
    node = NodeModel("cpu", numa_nodes=numa_nodes(2, 28, free_bytes=80 * GIB))
    split = workload("split", "cpu", cpu={0: 18.7}, memory={1: 48 * GIB}, threads={0: 28})
    neighbour = workload("nb", "cpu", cpu={0: 7.0}, memory={0: 24 * GIB}, threads={0: 14})
    recs = NumaPinning().evaluate(cluster([node], [split, neighbour])).recommendations
    [rec] = [r for r in recs if r.target.workload == "split"]
    # CPU and memory shares tie (1.0 each): node 1 has no other threads and holds the memory
    assert rec.proposed["numa_node"] == 1
    assert rec.proposed["migrate_memory_bytes"] == 0
    assert [a.kind for a in rec.actions] == [ActionKind.PIN]


def test_a_tie_without_neighbours_goes_where_the_memory_is() -> None:
    split = workload("split", cpu={0: 2.0}, memory={1: 8 * GIB}, threads={0: 2})
    [rec] = NumaPinning().evaluate(cluster([pcie4()], [split])).recommendations
    assert rec.proposed["numa_node"] == 1
    assert rec.proposed["migrate_memory_bytes"] == 0


def test_two_of_three_spread_workloads_swap_halves_on_a_full_machine() -> None:
    """Both nodes full (no free memory), three workloads spread over both: pages moving in
    replace pages moving out, so two are pinned one per node; the third, whose threads a
    pin could bring no nearer their pages, stays with a note.
    """
    jobs = [workload(n, cpu={0: 2.0, 1: 2.0}, memory={0: 32 * GIB, 1: 32 * GIB}) for n in "abc"]
    result = NumaPinning().evaluate(cluster([pcie4(free_bytes=0.0)], jobs))
    recs = result.recommendations
    assert sorted((r.proposed["numa_node"], r.proposed["mems"]) for r in recs) == [
        (0, [0]),
        (1, [1]),
    ]
    [note] = result.undecided
    assert "no capacity" in note.reason and "nearer their pages" in note.reason


def test_memory_that_fits_nowhere_is_left_unbound_when_part_of_it_can_move() -> None:
    job = workload("db", cpu={0: 2.0, 1: 2.0}, memory={0: 5 * GIB, 1: 5 * GIB})
    nodes = tuple(
        replace(n, memory_free_bytes=(2.2 if n.id == 0 else 0.0) * GIB) for n in numa_nodes()
    )
    [rec] = NumaPinning().evaluate(cluster([NodeModel("n1", nodes)], [job])).recommendations
    assert rec.proposed["numa_node"] == 0 and rec.proposed["cpus"] == "0-7"
    assert rec.proposed["mems"] == [0, 1]  # unbound: the 3 GiB that do not fit stay on node 1
    assert rec.proposed["migrate_memory_bytes"] == pytest.approx(2 * GIB, rel=1e-6)
    pin, migrate = rec.actions
    assert (pin.mems, migrate.kind, migrate.mems) == ([0, 1], ActionKind.MIGRATE_MEMORY, [0])
    # remote share 1 - 0.5 * 0.5 before, 1 - 1 * 0.7 after
    assert rec.estimated_gain == pytest.approx((0.75 - 0.3) * 0.5776, rel=1e-4)
    assert "unbound" in rec.summary and "unbound" in rec.gain_model
    # no room at all: pinning the threads alone would not bring them nearer their pages
    full = tuple(replace(n, memory_free_bytes=0.0) for n in nodes)
    result = NumaPinning().evaluate(cluster([NodeModel("n1", full)], [job]))
    assert result.recommendations == () and "nearer their pages" in result.undecided[0].reason
