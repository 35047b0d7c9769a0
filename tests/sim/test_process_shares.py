"""Each simulated job's share of a GPU it time-slices, as its exporter publishes it: what the
job actually runs there after its slowdown (the model's truth), adding up to the GPU's
utilisation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.sim.test_metrics import by, parse
from toposcope.rm import Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.gpu_activity import process_shares
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.model import evaluate
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.templates import builtin_template

DGX = builtin_template("dgx-a100")
SHARED_GPU = 3
ALONE_GPU = 5
SHARE = "toposcope_workload_gpu_sm_utilization_ratio"


def test_process_shares_add_up_to_the_capped_utilisation() -> None:
    shares = process_shares([(10, [0], 0.3), (11, [0, 1], 0.2), (12, [1], 0.7), (13, [1], 0.6)])
    assert shares[0] == {10: 0.3, 11: 0.2}
    # GPU 1's shares add up past 1: scaled together, in proportion
    assert sum(shares[1].values()) == pytest.approx(1.0)
    assert shares[1][12] / shares[1][13] == pytest.approx(0.7 / 0.6)


def test_two_jobs_time_slicing_a_gpu_publish_their_true_shares(tmp_path: Path) -> None:
    train = make_job("heavy", JobKind.GPU_TRAIN, gpus=1, input_intensity=0.0)
    heavy = replace(train, gpu_demand=0.9)
    light = replace(make_job("light", JobKind.GPU_TRAIN, gpus=1, input_intensity=0.0),
                    gpu_demand=0.3)  # fmt: skip
    alone = replace(make_job("alone", JobKind.GPU_TRAIN, gpus=1, input_intensity=0.0),
                    gpu_demand=0.6)  # fmt: skip
    placed = {
        heavy: Allocation("n1", [], [], [SHARED_GPU]),
        light: Allocation("n1", [], [], [SHARED_GPU]),
        alone: Allocation("n1", [], [], [ALONE_GPU]),
    }
    clock = SimClock()
    cluster = SimCluster(clock, scheduler="none")
    cluster.add_node("n1", DGX)
    for job, allocation in placed.items():
        cluster.submit(job, allocation)
    exporters = SimExporters(cluster, tmp_path / "state", background=False)
    try:
        exporters.scrape("n1")
        clock.advance(10.0)
        samples = parse(exporters.scrape("n1"))
    finally:
        exporters.close()
    shares = by(samples, SHARE, "workload", gpu=str(SHARED_GPU))
    assert set(shares) == {heavy.name, light.name}
    truth = {
        job.name: evaluate(
            job, allocation, DGX, [(o, a) for o, a in placed.items() if o is not job]
        ).gpu_busy
        for job, allocation in placed.items()
    }
    for name, share in shares.items():
        # what the job runs after its slowdown (NVML's integer percent)
        assert share == pytest.approx(truth[name], abs=0.006)
    assert shares[heavy.name] > shares[light.name] > 0
    utilization = by(samples, "toposcope_gpu_utilization_ratio", "gpu")[str(SHARED_GPU)]
    assert sum(shares.values()) == pytest.approx(utilization, abs=0.011)
    assert utilization < 1.0  # both slowed, neither at its demand
    assert shares[heavy.name] < heavy.gpu_demand and shares[light.name] < light.gpu_demand
    rows = [labels for labels, _ in samples[SHARE] if labels["gpu"] == str(SHARED_GPU)]
    assert all(labels["shared"] == "true" for labels in rows)
    # a job alone on its GPU: its share is the whole GPU's utilisation, not shared
    mine = by(samples, SHARE, "workload", gpu=str(ALONE_GPU), shared="false")
    assert mine == {alone.name: pytest.approx(truth[alone.name], abs=0.006)}
