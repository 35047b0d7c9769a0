"""memory-migration on hand-made models."""

from __future__ import annotations

import pytest

from tests.advisor.builders import ALL_METRICS, GIB, cluster, pcie4, workload
from toposcope.advisor.policies.memory_migration import MemoryMigration, MemoryMigrationSettings
from toposcope.advisor.policies.numa_pinning import NumaPinning
from toposcope.advisor.recommendations import resolve_conflicts
from toposcope.rm import ActionKind


def test_remote_memory_of_a_homed_workload_is_migrated_home() -> None:
    w = workload("cache", cpu={0: 3.8, 1: 0.2}, memory={0: 4 * GIB, 1: 6 * GIB})
    [rec] = MemoryMigration().evaluate(cluster([pcie4()], [w])).recommendations
    assert rec.kind == "migrate-memory"
    assert rec.proposed["mems"] == [0]
    assert rec.proposed["bytes"] == 6 * GIB
    assert rec.estimated_gain == pytest.approx(0.95 * 0.6 * 0.5776, rel=1e-4)
    [action] = rec.actions
    assert (action.kind, action.mems, action.workload) == (ActionKind.MIGRATE_MEMORY, [0], "cache")


def test_large_slow_migration_is_high_risk() -> None:
    w = workload("big", cpu={0: 4.0}, memory={0: 10 * GIB, 1: 50 * GIB})
    settings = MemoryMigrationSettings(migration_bytes_per_second=0.5 * GIB)
    [rec] = MemoryMigration(settings).evaluate(cluster([pcie4()], [w])).recommendations
    assert rec.risk == "high"


def test_spread_threads_are_not_a_home() -> None:
    w = workload("spread", cpu={0: 2.0, 1: 2.0}, memory={1: 4 * GIB})
    assert MemoryMigration().evaluate(cluster([pcie4()], [w])).recommendations == ()


def test_workload_away_from_its_gpus_is_left_to_numa_pinning() -> None:
    w = workload("train", cpu={1: 4.0}, memory={0: 4 * GIB}, gpus=[0])
    assert MemoryMigration().evaluate(cluster([pcie4()], [w])).recommendations == ()


def test_no_room_on_the_home_node_is_a_note() -> None:
    w = workload("cache", cpu={0: 4.0}, memory={1: 10 * GIB})
    result = MemoryMigration().evaluate(cluster([pcie4(free_bytes=2 * GIB)], [w]))
    assert result.recommendations == ()
    assert "no room on NUMA node 0" in result.undecided[0].reason


def test_without_memory_series_cannot_decide() -> None:
    model = cluster([pcie4()], present=ALL_METRICS - {"toposcope_workload_memory_bytes"})
    result = MemoryMigration().evaluate(model)
    assert "toposcope_workload_memory_bytes" in result.undecided[0].reason


def test_pin_wins_the_conflict_for_the_same_workload() -> None:
    w = workload("cache", cpu={0: 3.6, 1: 0.4}, memory={0: 4 * GIB, 1: 6 * GIB})
    model = cluster([pcie4()], [w])
    recs = [
        *NumaPinning().evaluate(model).recommendations,
        *MemoryMigration().evaluate(model).recommendations,
    ]
    kept, notes = resolve_conflicts(recs)
    assert [r.kind for r in kept] == ["pin"]
    assert "kept the higher value" in notes[0].reason
    assert notes[0].policy == "memory-migration"
