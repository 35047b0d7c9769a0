"""Each simulated job's step counter: proportional to its true throughput, noisy as a real
step timer, whole steps, served on ``/jobs/metrics`` and ``/metrics`` but not with the truth.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from toposcope.catalogue import CATALOGUE
from toposcope.rm import Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.job_steps import FAMILY, STEP_JITTER, STEP_SECONDS, steps_in
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.server import make_sim_app
from toposcope.sim.templates import builtin_template

SECONDS = 400.0


@pytest.fixture(scope="module")
def cluster() -> SimCluster:
    """A 2-switch PCIe node: one 2-GPU job on one switch, one split over both, a notebook;
    the clock at 400 s.
    """
    sim = SimCluster(SimClock(speed=0))
    sim.add_node("n1", builtin_template("pcie-8gpu-2sw"))
    sim.submit(make_job("near", JobKind.GPU_TRAIN, gpus=2), Allocation("n1", [], [], [0, 1]))
    sim.submit(make_job("split", JobKind.GPU_TRAIN, gpus=2), Allocation("n1", [], [], [2, 4]))
    sim.submit(make_job("nb", JobKind.NOTEBOOK, gpus=1), Allocation("n1", [], [], [6]))
    sim.advance(SECONDS)
    return sim


def get(cluster: SimCluster, tmp_path: Path, path: str) -> str:
    """The body of ``GET path`` on the simulator's app (status 200 asserted)."""
    app = make_sim_app(cluster, SimExporters(cluster, tmp_path, background=False))
    seen: dict[str, str] = {}
    body = b"".join(
        app(
            {"PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": ""},
            lambda status, headers: seen.setdefault("status", status),
        )
    )
    assert seen["status"].startswith("200")
    return body.decode()


def test_steps_follow_the_true_throughput_within_the_timer_noise(cluster: SimCluster) -> None:
    steps = {name.removesuffix(".service"): n for name, n in cluster.job_steps()}
    truth = {row.name.removesuffix(".service"): row for row in cluster.truth()}
    assert set(steps) == {"near", "split"}  # a notebook has no throughput, so no counter
    for name in ("near", "split"):
        expected = SECONDS / (STEP_SECONDS * truth[name].slowdown)
        # one interval of 400 s: the deviation is at most 4 sigma of STEP_JITTER * sqrt(n)
        assert abs(steps[name] - expected) <= 4 * STEP_JITTER * math.sqrt(expected) + 1e-9
    assert truth["split"].slowdown > truth["near"].slowdown
    measured = steps["near"] / steps["split"]
    true = truth["near"].throughput / truth["split"].throughput
    assert measured == pytest.approx(true, rel=0.02)


def test_the_count_is_noisy_like_a_step_timer_but_reproducible() -> None:
    expected = 40.0  # 10 s at full speed
    counts = [steps_in("job", 10.0, 1.0, 1000.0 + t) for t in range(2000)]
    assert counts[0] == steps_in("job", 10.0, 1.0, 1000.0)
    assert steps_in("other", 10.0, 1.0, 1000.0) != counts[0]
    assert statistics.mean(counts) == pytest.approx(expected, rel=0.01)
    spread = statistics.pstdev(counts) / expected
    assert spread == pytest.approx(STEP_JITTER / math.sqrt(expected), rel=0.15)
    assert steps_in("job", 10.0, math.inf, 1.0) == 0.0  # stalled: no GPUs
    assert steps_in("job", 0.0, 1.0, 1.0) == 0.0


def test_the_counter_only_grows_as_the_job_runs() -> None:
    sim = SimCluster(SimClock(speed=0))
    sim.add_node("n1", builtin_template("pcie-4gpu"))
    sim.submit(make_job("j", JobKind.GPU_TRAIN, gpus=1), Allocation("n1", [], [], [0]))
    sim.advance(10)
    first = dict(sim.job_steps())["j.service"]
    assert first > 0
    sim.advance(10)
    assert dict(sim.job_steps())["j.service"] > first


def test_served_alone_on_jobs_metrics_and_with_the_queue_on_metrics(
    cluster: SimCluster, tmp_path: Path
) -> None:
    jobs = {
        f.name: f for f in text_string_to_metric_families(get(cluster, tmp_path, "/jobs/metrics"))
    }
    assert list(jobs) == [FAMILY.removesuffix("_total")]
    samples = {s.labels["workload"]: s.value for s in jobs[FAMILY.removesuffix("_total")].samples}
    assert set(samples) == {"near.service", "split.service"}
    assert all(value == math.floor(value) > 0 for value in samples.values())
    assert set(CATALOGUE[FAMILY].labels) == {"workload"}
    assert CATALOGUE[FAMILY].part == "sim"
    assert FAMILY in get(cluster, tmp_path, "/metrics")
    assert FAMILY not in get(cluster, tmp_path, "/truth/metrics")
