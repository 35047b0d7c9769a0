"""numa-pinning on hand-made models."""

from __future__ import annotations

import pytest

from tests.advisor.builders import ALL_METRICS, GIB, cluster, numa_nodes, pcie4, workload
from toposcope.advisor.model import NodeModel
from toposcope.advisor.policies.numa_pinning import NumaPinning, NumaPinningSettings
from toposcope.resources import ActionKind


def test_gpu_workload_running_on_the_far_socket_is_pinned_to_its_gpus_node() -> None:
    job = workload("train", cpu={1: 4.0}, memory={1: 8 * GIB}, gpus=[0])
    result = NumaPinning().evaluate(cluster([pcie4()], [job]))
    [rec] = result.recommendations
    assert rec.kind == "pin"
    assert rec.proposed["numa_node"] == 0
    assert rec.proposed["cpus"] == "0-7"
    assert rec.estimated_gain == pytest.approx(0.5776)  # fully remote at SLIT 21
    assert "CRI-RM" in rec.gain_model
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


def test_penalty_scales_with_numa_distance() -> None:
    far = NodeModel("n1", numa_nodes(remote_distance=32), (), {})
    job = workload("w", cpu={0: 1.0, 1: 1.0}, memory={0: 4 * GIB})
    [rec] = NumaPinning().evaluate(cluster([far], [job])).recommendations
    assert rec.proposed["numa_node"] == 0
    # remote share 1 - 0.5 * 1; the remote half sits at SLIT 32: (32 - 10) / (21 - 10) = 2
    assert rec.estimated_gain == pytest.approx(0.5 * 0.5776 * 2)


def test_busy_target_blocks_a_gpu_workload_with_a_note() -> None:
    busy = workload("busy", cpu={0: 7.0}, memory={0: GIB})
    job = workload("train", cpu={1: 2.0}, memory={1: GIB}, gpus=[0])
    result = NumaPinning().evaluate(cluster([pcie4()], [busy, job]))
    assert result.recommendations == ()
    [note] = result.undecided
    assert note.target == "n1/train"
    assert "no capacity" in note.reason and "exceed 7.2" in note.reason


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
    a = workload("a", cpu={1: 4.0}, memory={1: GIB}, gpus=[0])
    b = workload("b", cpu={1: 4.0}, memory={1: GIB}, gpus=[1])
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
