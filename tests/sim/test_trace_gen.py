"""The seeded Philly-like trace generator, and stepping a cluster from event to event as the
trace replay bench does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.templates import builtin_template
from toposcope.sim.trace_gen import GPU_MIX, generate, write_csv
from toposcope.sim.traces import load_trace


def test_same_seed_same_trace_and_the_documented_gpu_counts() -> None:
    first = generate(seed=3, days=1, total_gpus=64, load=0.8)
    assert first == generate(seed=3, days=1, total_gpus=64, load=0.8)
    assert first != generate(seed=4, days=1, total_gpus=64, load=0.8)
    assert {j.gpus for j in first} <= {g for g, _ in GPU_MIX}
    single = sum(1 for j in first if j.gpus == 1) / len(first)
    assert 0.6 < single < 0.8
    assert all(0 <= j.submit_time < 86400 for j in first)


def test_written_trace_reads_back_through_the_simulators_reader(tmp_path: Path) -> None:
    rows = generate(seed=1, days=0.2, total_gpus=16, load=0.5)
    path = tmp_path / "trace.csv"
    write_csv(rows, path)
    jobs = load_trace(path)
    assert [(j.name, j.gpus, j.duration) for j in jobs] == [
        (f"{r.name}.service", r.gpus, r.duration) for r in rows
    ]


def test_bad_generator_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="days"):
        generate(seed=1, days=0, total_gpus=8, load=0.5)


def test_stepping_from_event_to_event_reports_finishes_in_order() -> None:
    cluster = SimCluster(SimClock(speed=0))
    cluster.add_node("n1", builtin_template("pcie-4gpu"))
    for name, duration in (("short", 100.0), ("long", 300.0)):
        cluster.submit(make_job(name, JobKind.GPU_TRAIN, gpus=1, duration=duration))
    seen: list[str] = []
    while (when := cluster.next_event_time()) is not None:
        cluster.advance(when - cluster.now)
        seen += cluster.finished(len(seen))
    assert seen == ["short.service", "long.service"]
    assert cluster.next_event_time() is None
