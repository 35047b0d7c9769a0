"""numa-pinning priced by a workload's measured memory traffic instead of the constant prior."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.advisor.builders import GIB, cluster, pcie4, workload
from toposcope.advisor.calibration_cells import cell_of, estimate_basis
from toposcope.advisor.model import WorkloadModel
from toposcope.advisor.numa_share import (
    CORE_STREAM_GBPS,
    REMOTE_COST,
    MeasuredMemoryShare,
    measured_memory_share,
)
from toposcope.advisor.policies.numa_pinning import NumaPinning, NumaPinningSettings
from toposcope.report.recommendation import Recommendation

GB = 1e9


def traffic(job: WorkloadModel, local: float, remote: float) -> WorkloadModel:
    """``job`` with ``local`` and ``remote`` GB/s of measured memory traffic."""
    return replace(job, memory_bytes_per_second={"local": local * GB, "remote": remote * GB})


def pin_of(job: WorkloadModel) -> Recommendation:
    [rec] = NumaPinning().evaluate(cluster([pcie4()], [job])).recommendations
    return rec


def spread(name: str, gpus: tuple[int, ...] = ()) -> WorkloadModel:
    """Four cores and 8 GiB split evenly over both NUMA nodes of a pcie4 machine."""
    return workload(name, cpu={0: 2.0, 1: 2.0}, memory={0: 4 * GIB, 1: 4 * GIB}, gpus=gpus)


def test_a_job_moving_much_memory_is_estimated_higher_than_one_moving_little() -> None:
    heavy = pin_of(traffic(spread("heavy"), 10.0, 10.0))  # 20 GB/s over 4 cores
    light = pin_of(traffic(spread("light"), 1.0, 1.0))  # 2 GB/s
    assert heavy.estimated_gain > 5 * light.estimated_gain
    # remote share 1 - 0.5 * 0.5 = 0.75, x memory-bound share x remote cost: saved of the step
    share = 20.0 / (4 * CORE_STREAM_GBPS)
    saved = 0.75 * share * REMOTE_COST
    assert heavy.estimated_gain == pytest.approx(saved / (1 - saved), rel=1e-4)
    assert f"measured memory-bound share {share:.3f}" in heavy.gain_model
    assert "CRI-RM" not in heavy.gain_model


def test_the_measured_share_replaces_the_gpu_jobs_prior_fraction() -> None:
    busy = pin_of(traffic(spread("busy", gpus=(0,)), 6.0, 6.0))
    quiet = pin_of(traffic(spread("quiet", gpus=(0,)), 0.5, 0.5))
    assert busy.estimated_gain > quiet.estimated_gain
    assert "gpu_job_share" not in busy.gain_model


def test_json_says_the_estimate_was_measured_and_on_what() -> None:
    rec = pin_of(traffic(spread("heavy"), 12.0, 4.0))
    basis = rec.current["numa_sensitivity"]
    assert basis["estimate"] == "measured"
    assert basis["share"] == pytest.approx(16.0 / (4 * CORE_STREAM_GBPS), abs=1e-4)
    assert basis["remote_bytes_per_second"] == 4 * GB
    assert basis["source"] == "resctrl"
    series = {e.series for e in rec.evidence}
    assert "toposcope_workload_memory_bandwidth_bytes_total" in series
    assert estimate_basis(rec) == "measured"
    assert cell_of(rec, None, "n1", [])[1] == "numa-pinning (measured estimate)"


def test_without_traffic_series_the_prior_stands_and_says_why() -> None:
    rec = pin_of(spread("unmeasured"))
    assert rec.estimated_gain == pytest.approx(0.75 * 0.5776, rel=1e-4)
    assert rec.current["numa_sensitivity"] == {
        "estimate": "prior",
        "reason": "no memory traffic series (resctrl MBM) for it",
    }
    assert "NUMA sensitivity: prior (no memory traffic series" in rec.gain_model
    assert cell_of(rec, None, "n1", [])[1] == "numa-pinning (prior estimate)"


def test_traffic_without_a_cpu_rate_falls_back_to_the_prior() -> None:
    job = traffic(replace(spread("cumulative"), cpu_cumulative=True), 10.0, 10.0)
    reason = measured_memory_share(job)
    assert reason == "memory traffic without a rate of its CPU time"
    assert pin_of(job).current["numa_sensitivity"]["estimate"] == "prior"


def test_a_job_measured_to_move_no_memory_is_not_pinned_and_a_note_says_so() -> None:
    job = traffic(spread("idle"), 0.0, 0.0)
    result = NumaPinning().evaluate(cluster([pcie4()], [job]))
    assert result.recommendations == ()
    assert any("measured memory-bound share 0.000" in n.reason for n in result.undecided)


def test_the_share_is_taken_against_the_configured_core_bandwidth_and_capped() -> None:
    job = traffic(spread("w"), 30.0, 30.0)
    share = measured_memory_share(job, core_gbps=20.0)
    assert isinstance(share, MeasuredMemoryShare)
    assert share.share == pytest.approx(60.0 / 80.0)
    assert share.remote_fraction == pytest.approx(0.5)
    capped = measured_memory_share(job, core_gbps=5.0)
    assert isinstance(capped, MeasuredMemoryShare) and capped.share == 1.0
    slow = NumaPinning(NumaPinningSettings(core_stream_gbps=20.0, remote_cost=1.0))
    [rec] = slow.evaluate(cluster([pcie4()], [job])).recommendations
    saved = min(0.9, 0.75 * 0.75 * 1.0)
    assert rec.estimated_gain == pytest.approx(saved / (1 - saved), rel=1e-4)
