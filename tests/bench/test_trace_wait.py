"""The toposcope policy's wait rule in trace replay: a job waits for a better GPU set only
when the advisor's ``wait_pays`` says the wait is worth it, and a set reserved for a waiting
job goes to a job behind it only when that job should end before the set is needed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from trace_engine import Replay, replay
from trace_policies import POLICIES
from trace_replay import build_cluster
from trace_toposcope import Plan, Wait, decide

from toposcope.advisor.placement_wait import extra_seconds, wait_pays
from toposcope.sim.jobs import JobKind, JobSpec, make_job
from toposcope.sim.traces import load_trace

DGX, PCIE = "dgx-a100-01", "pcie-4gpu-01"
TOPOSCOPE = next(p for p in POLICIES if p.name == "toposcope")


def _job(name: str, gpus: int, run: float) -> JobSpec:
    return make_job(name, JobKind.GPU_TRAIN, gpus=gpus, duration=run)


def _plan(dgx_free_at: dict[int, float], pcie_free_at: float = 0.0) -> Plan:
    """A pass at time 0 on one DGX A100 and one PCIe 4-GPU node, each GPU free at the given
    time (DGX GPUs not named are free now).
    """
    templates = build_cluster("dgx-a100=1,pcie-4gpu=1")
    avail = {
        DGX: {g: dgx_free_at.get(g, 0.0) for g in range(8)},
        PCIE: dict.fromkeys(range(4), pcie_free_at),
    }
    return Plan(0.0, templates, avail)


def _free(plan: Plan) -> dict[str, frozenset[int]]:
    return {
        n: frozenset(g for g, t in times.items() if t <= plan.now)
        for n, times in plan.avail.items()
    }


def test_wait_pays_weighs_the_wait_against_the_extra_gpu_time() -> None:
    assert extra_seconds(4000, 1.0, 0.8) == pytest.approx(1000)
    assert extra_seconds(4000, 0.8, 0.8) == 0
    assert wait_pays(4000, 1.0, 0.8, 999)
    assert not wait_pays(4000, 1.0, 0.8, 1001)
    assert wait_pays(4000, 1.0, 0.8, 1999, gpus=2)
    assert wait_pays(4000, 1.0, 0.8, 5999, gpus=2, waiting=3)
    assert not wait_pays(4000, 1.0, 0.8, 6001, gpus=2, waiting=3)
    assert not wait_pays(4000, 0.8, 0.8, 0)
    assert not wait_pays(4000, 1.0, 0.8, math.inf)
    assert not wait_pays(4000, 1.0, 0.8, -1)


@pytest.mark.parametrize("busy_until", [500.0, 1500.0, 1999.0, 2001.0, 4000.0])
@pytest.mark.parametrize("waiting", [0, 2])
def test_a_job_waits_for_a_better_set_exactly_when_wait_pays_says_so(
    busy_until: float, waiting: int
) -> None:
    plan = _plan(dict.fromkeys(range(8), busy_until))
    plan.waiting = waiting
    job = _job("pair", 2, 4000.0)
    choice = decide(plan, job, _free(plan))
    ideal = plan.ideal(2)
    factor = plan.factor(PCIE, (0, 1), ideal)
    assert factor > ideal
    pays = wait_pays(4000.0, factor, ideal, busy_until, gpus=2, waiting=waiting)
    if pays:
        assert choice is None
        (why,) = plan.waits
        assert why.reserved is not None and why.reserved[0] == DGX
        assert (why.wait, why.start, why.factor) == (busy_until, busy_until, factor)
    else:
        assert choice is not None and choice[0] == PCIE
        assert not plan.waits


def test_a_reserved_set_goes_only_to_a_job_that_ends_before_it_is_needed() -> None:
    # GPUs 0-3 busy long, 4-5 until 1000, 6-7 free: a 4-GPU job can have 4-7 at 1000
    plan = _plan({0: 5000.0, 1: 5000.0, 2: 5000.0, 3: 5000.0, 4: 1000.0, 5: 1000.0}, 9000.0)
    free = _free(plan)
    assert decide(plan, _job("four", 4, 100_000.0), free) is None
    assert plan.waits[0].reserved == (DGX, (4, 5, 6, 7))
    assert plan.waits[0].start == 1000.0
    assert decide(plan, _job("long", 2, 2000.0), free) is None
    assert decide(plan, _job("short", 2, 500.0), free) == (DGX, (6, 7))
    fresh = _plan({0: 5000.0, 1: 5000.0, 2: 5000.0, 3: 5000.0, 4: 1000.0, 5: 1000.0}, 9000.0)
    assert decide(fresh, _job("long", 2, 2000.0), free) == (DGX, (6, 7))


def test_a_later_reservation_does_not_release_an_earlier_one() -> None:
    plan = _plan({0: 5000.0, 1: 5000.0, 2: 5000.0, 3: 5000.0, 4: 1000.0, 5: 1000.0}, 9000.0)
    free = _free(plan)
    assert decide(plan, _job("four", 4, 100_000.0), free) is None
    # the whole machine, after "four" ends: it reserves GPUs 4-7 again, to start much later
    assert decide(plan, _job("eight", 8, 1000.0), free) is None
    assert plan.waits[1].reserved == (DGX, tuple(range(8)))
    assert plan.waits[1].start == 101_000.0
    assert decide(plan, _job("long", 2, 2000.0), free) is None


def test_a_job_in_a_trace_file_waits_for_nvswitch_rather_than_start_on_pcie(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "name,submit_time,gpus,duration\nbig,0,8,1000\npair,10,2,100000\nshort,20,2,500\n"
    )
    templates = build_cluster("dgx-a100=1,pcie-4gpu=1")
    run = replay(TOPOSCOPE, templates, load_trace(trace), 10**6)
    placed = {e.job: (e.time, e.node) for e in run.log if e.kind == "place"}
    assert placed["big.service"] == (0.0, DGX)
    assert placed["pair.service"] == (1000.0, DGX)
    assert placed["short.service"] == (20.0, PCIE)
    waits = [e.why for e in run.log if e.kind == "wait"]
    assert [(w.job, w.reserved) for w in waits if w] == [("pair.service", (DGX, (0, 1)))] * 2
    assert [w.wait for w in waits if w] == pytest.approx([990.0, 980.0])


def _waits(run: Replay, jobs: list[JobSpec]) -> list[tuple[int, Wait, set[str], set[str]]]:
    """Each wait in the log: its index, why, the other jobs in the queue when the pass began
    (arrived and not placed before), and those of them queued behind it and not yet placed,
    recomputed from the log.
    """
    spec = {j.name: j for j in jobs}
    placed_at = {e.job: i for i, e in enumerate(run.log) if e.kind == "place"}
    found = []
    for i, event in enumerate(run.log):
        if event.kind != "wait":
            continue
        assert event.why is not None
        queue = {
            j.name for j in jobs
            if j.submit_time <= event.time and run.log[placed_at[j.name]].time >= event.time
        } - {event.job}  # fmt: skip
        key = (spec[event.job].submit_time, event.job)
        behind = {n for n in queue if (spec[n].submit_time, n) > key and placed_at[n] > i}
        found.append((i, event.why, queue, behind))
    return found


def test_every_wait_in_a_replay_is_one_wait_pays_asks_for(
    runs: dict[str, Replay], jobs: list[JobSpec]
) -> None:
    run = runs["toposcope"]
    spec = {j.name: j for j in jobs}
    placed = {e.job: e.time for e in run.log if e.kind == "place"}
    chosen = 0
    for i, why, queue, _ in _waits(run, jobs):
        job = spec[why.job]
        assert (why.job, why.run, why.gpus) == (run.log[i].job, job.duration, job.gpus)
        assert why.waiting == len(queue)
        if math.isfinite(why.factor):
            chosen += 1
            assert why.factor > why.ideal
            assert wait_pays(
                why.run, why.factor, why.ideal, why.wait, gpus=why.gpus, waiting=len(queue)
            )
            assert placed[why.job] > run.log[i].time, f"{why.job} waited and started at once"
    assert chosen >= 5


def test_no_job_behind_takes_a_reserved_set_unless_it_ends_first(
    runs: dict[str, Replay], jobs: list[JobSpec]
) -> None:
    run = runs["toposcope"]
    spec = {j.name: j for j in jobs}
    for i, why, _, behind in _waits(run, jobs):
        if why.reserved is None:
            continue
        node, reserved = why.reserved
        taken = [
            e for e in run.log[i + 1 :]
            if e.time == run.log[i].time and e.kind == "place" and e.job in behind
            and e.node == node and set(e.gpus) & set(reserved)
        ]  # fmt: skip
        for e in taken:
            assert e.time + (spec[e.job].duration or 0) <= why.start, (why, e)
