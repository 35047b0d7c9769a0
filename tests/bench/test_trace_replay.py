"""Trace replay on a tiny seeded trace: every policy runs every job exactly once, no GPU is
held twice, the figures are in range and agree with what the replay's log says happened.
"""

from __future__ import annotations

import math

import pytest
from trace_engine import Replay
from trace_figures import figures
from trace_policies import POLICIES

from tests.bench.replay_log import (
    allocated_at,
    first,
    holdings,
    nearest_rank,
    sample_times,
)
from toposcope.rm import ActionKind
from toposcope.sim.cluster import DONE
from toposcope.sim.jobs import JobSpec
from toposcope.sim.templates import NodeTemplate

NAMES = [p.name for p in POLICIES]


def _report(run: Replay, jobs: list[JobSpec]) -> dict[str, float]:
    span = max(j.submit_time for j in jobs)
    return figures(run, jobs, span, run.cluster.now)


def test_the_trace_is_small_and_mixes_job_sizes(jobs: list[JobSpec]) -> None:
    assert 20 <= len(jobs) <= 150
    assert {j.gpus for j in jobs} >= {1, 2}
    assert len({j.name for j in jobs}) == len(jobs)


@pytest.mark.parametrize("name", NAMES)
def test_every_job_is_placed_and_finishes_exactly_once(
    name: str, runs: dict[str, Replay], jobs: list[JobSpec]
) -> None:
    run = runs[name]
    for kind in ("place", "finish"):
        counted = [e.job for e in run.log if e.kind == kind]
        assert sorted(counted) == sorted(j.name for j in jobs), kind
    assert set(run.finished) == {j.name for j in jobs}
    assert not run.pending and not run.held
    states = {w.name: w.state for w in run.cluster.workloads()}
    assert set(states.values()) == {DONE}


@pytest.mark.parametrize("name", NAMES)
def test_no_gpu_is_ever_held_by_two_jobs(
    name: str, runs: dict[str, Replay], templates: dict[str, NodeTemplate]
) -> None:
    held = holdings(runs[name])
    for h in held:
        assert h.gpus <= {g.index for g in templates[h.node].gpus}
        assert h.since <= h.until < math.inf
    for a in held:
        for b in held:
            if a is not b and a.node == b.node and a.gpus & b.gpus:
                assert a.until <= b.since or b.until <= a.since, (a, b)


@pytest.mark.parametrize("name", NAMES)
def test_the_log_is_what_the_simulator_carried_out(name: str, runs: dict[str, Replay]) -> None:
    run = runs[name]
    moves = [
        (e.kind, e.job, e.node, list(e.gpus)) for e in run.log if e.kind in ("place", "migrate")
    ]
    applied = [
        (s.request.kind, s.request.workload, s.after.node, list(s.after.gpus))
        for s in run.cluster.recorded()
        if s.after is not None
    ]
    assert applied == moves
    assert len(moves) == run.actions
    assert all(
        s.request.kind in (ActionKind.PLACE, ActionKind.MIGRATE) for s in run.cluster.recorded()
    )


@pytest.mark.parametrize("name", NAMES)
def test_per_job_figures_are_in_range(
    name: str, runs: dict[str, Replay], jobs: list[JobSpec]
) -> None:
    run = runs[name]
    starts, ends = first(run, "place"), first(run, "finish")
    assert starts == run.started and ends == run.finished
    for job in jobs:
        queued = starts[job.name] - job.submit_time
        jct = ends[job.name] - job.submit_time
        assert queued >= 0, job.name
        assert jct >= (job.duration or 0) + queued - 1e-6, job.name
        slowdown = 1 - (job.duration or 0) / (ends[job.name] - starts[job.name])
        assert -1e-9 <= slowdown < 1, (job.name, slowdown)
    report = _report(run, jobs)
    assert report["mean_queue_s"] >= 0
    assert 0 <= report["mean_locality_slowdown"] < 1
    assert 0 <= report["gpu_utilisation"] <= 1
    assert 0 <= report["fragmented_share"] <= 1


@pytest.mark.parametrize("name", NAMES)
def test_the_report_agrees_with_the_log(
    name: str, runs: dict[str, Replay], jobs: list[JobSpec], templates: dict[str, NodeTemplate]
) -> None:
    run = runs[name]
    report = _report(run, jobs)
    starts, ends = first(run, "place"), first(run, "finish")
    waits = [starts[j.name] - j.submit_time for j in jobs]
    jct = [ends[j.name] - j.submit_time for j in jobs]
    slow = [1 - (j.duration or 0) / (ends[j.name] - starts[j.name]) for j in jobs]
    assert report["jobs"] == report["finished"] == len(jobs)
    assert report["never_started"] == 0
    assert report["mean_queue_s"] == pytest.approx(sum(waits) / len(waits), abs=0.05)
    assert report["p95_queue_s"] == pytest.approx(nearest_rank(waits, 0.95), abs=0.05)
    assert report["mean_jct_s"] == pytest.approx(sum(jct) / len(jct), abs=0.05)
    assert report["mean_locality_slowdown"] == pytest.approx(sum(slow) / len(slow), abs=5e-5)
    assert report["migrations"] == sum(1 for e in run.log if e.kind == "migrate")
    assert report["actions"] == len(jobs) + report["migrations"]

    span = max(j.submit_time for j in jobs)
    times = sample_times(span)
    assert [s[0] for s in run.samples[: len(times)]] == times
    held = holdings(run)
    size = {n: len(t.gpus) for n, t in templates.items()}
    total = sum(size.values())
    used, fragmented = 0, 0
    for t in times:
        allocated = allocated_at(held, t)
        pending = [j.gpus for j in jobs if j.submit_time < t <= starts[j.name]]
        smallest = min(pending, default=0)
        free = {n: size[n] - allocated.get(n, 0) for n in size}
        used += sum(allocated.values())
        fragmented += sum(f for f in free.values() if 0 < f < smallest)
    assert report["gpu_utilisation"] == pytest.approx(used / (total * len(times)), abs=5e-5)
    assert report["fragmented_share"] == pytest.approx(fragmented / (total * len(times)), abs=5e-5)


def test_the_policies_differ_where_they_should(runs: dict[str, Replay]) -> None:
    """Migrating policies migrate and the others never do; toposcope waits for sets."""
    for policy in POLICIES:
        kinds = {e.kind for e in runs[policy.name].log}
        assert ("wait" in kinds) == policy.waits, policy.name
        if not policy.migrates:
            assert "migrate" not in kinds, policy.name
    assert any(e.kind == "migrate" for e in runs["gandiva"].log)
    moved = [e.job for e in runs["toposcope"].log if e.kind == "migrate"]
    assert len(set(moved)) < len(moved), "no job moved twice: migrations untested"
