"""A workload's measured share of a GPU it time-slices: read into the model per workload and
GPU, and pricing job-migration's move apart (the prior without it), with its basis said in
the gain model, the recommendation's ``current.gpu_share`` and its calibration cell.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.advisor.builders import cluster, pcie8, workload
from tests.advisor.fakes import ExpositionPrometheus, FakeServer
from toposcope.advisor.calibration_cells import ESTIMATE_BASES, cell_of, estimate_basis
from toposcope.advisor.loaders import PrometheusLoader, Window
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.advisor.policies.share_gain import MIN_MEASURED_SHARE, SHARE_SERIES
from toposcope.advisor.runner import load_model
from toposcope.report.recommendation import Recommendation

KEYS = (
    'gpu="{g}",UUID="GPU-{g}",pci_bus_id="00000000:0{g}:00.0",device="nvidia{g}",'
    'modelName="NVIDIA H100",Hostname="n1"'
)
SERIES = f"""\
# TYPE toposcope_gpu_info gauge
toposcope_gpu_info{{{KEYS.format(g=0)},numa_node="0"}} 1
toposcope_gpu_info{{{KEYS.format(g=1)},numa_node="0"}} 1
# TYPE toposcope_workload_gpu_info gauge
toposcope_workload_gpu_info{{workload="a",gpu="0"}} 1
toposcope_workload_gpu_info{{workload="b",gpu="0"}} 1
toposcope_workload_gpu_info{{workload="c",gpu="1"}} 1
# TYPE {SHARE_SERIES} gauge
{SHARE_SERIES}{{workload="a",gpu="0",shared="true"}} 0.6
{SHARE_SERIES}{{workload="b",gpu="0",shared="true"}} 0.25
"""
LABELS = {"job": "toposcope", "instance": "n1:9400", "node": "n1"}


def test_the_model_reads_each_workloads_share_per_gpu() -> None:
    with FakeServer(ExpositionPrometheus(SERIES, LABELS)).run() as fake:
        model = load_model(
            PrometheusLoader(fake.url), Window.parse("1h"), selector='job="toposcope"'
        )
    shares = {w.name: dict(w.gpu_sm_share) for w in model.workloads}
    assert shares == {"a": {0: 0.6}, "b": {0: 0.25}, "c": {}}
    assert {w.name for w in model.workloads if w.gpus_shared} == {"a", "b"}


def _shared(share_c: float | None, share_d: float | None, util: float = 0.9) -> ClusterModel:
    """Single-GPU jobs c and d time-slicing GPU 2 of n8 (``util`` busy); d moves."""
    jobs: list[WorkloadModel] = []
    for name, share in (("c", share_c), ("d", share_d)):
        job = workload(name, node="n8", gpus=[2])
        jobs.append(replace(job, gpu_sm_share={2: share}) if share is not None else job)
    return cluster([pcie8(util=util)], jobs)


def _move(model: ClusterModel) -> Recommendation:
    [rec] = JobMigration().evaluate(model).recommendations
    assert rec.target.workload == "d"  # c sorts first and stays
    return rec


def test_a_measured_share_prices_the_move_apart() -> None:
    model = _shared(0.55, 0.3)
    rec = _move(model)
    # alone it could run in all the GPU's busy time: 0.9 / 0.3 - 1, the same link class
    assert rec.estimated_gain == pytest.approx(0.9 / 0.3 - 1)
    assert rec.current["gpu_share"] == {
        "estimate": "measured",
        "gpu": 2,
        "share": 0.3,
        "gpu_utilization": 0.9,
        "workloads": 2,
        "gain": pytest.approx(2.0),
    }
    assert "measured share 0.30" in rec.gain_model
    assert "estimate from the measured share" in rec.gain_model
    assert "each assumed to want all of it" not in rec.gain_model
    [share] = [e for e in rec.evidence if e.series == SHARE_SERIES]
    assert share.value == 0.3 and share.labels["workload"] == "d"
    # learned in its own calibration cell
    assert estimate_basis(rec) == "measured-share" and "measured-share" in ESTIMATE_BASES
    assert cell_of(rec, model, "n8", [2])[1] == "job-migration (measured-share estimate)"


def test_a_busier_peer_makes_a_larger_gain_than_the_prior_assumes_for_everyone() -> None:
    starved = _move(_shared(0.75, 0.1, util=0.85)).estimated_gain
    even = _move(_shared(0.45, 0.4, util=0.85)).estimated_gain
    # the prior gives both (2 - 1) x 0.85; the shares tell them apart
    assert starved == pytest.approx(0.85 / 0.1 - 1)
    assert even == pytest.approx(0.85 / 0.4 - 1)
    assert starved > 0.85 and even < starved


def test_without_the_series_the_prior_prices_it_and_says_so() -> None:
    rec = _move(_shared(None, None))
    assert rec.estimated_gain == pytest.approx(0.9)  # (2 - 1) x 0.9
    assert rec.current["gpu_share"]["estimate"] == "prior"
    assert rec.current["gpu_share"]["share"] is None
    assert "each assumed to want all of it" in rec.gain_model
    assert "no measured per-process share" in rec.gain_model
    assert not [e for e in rec.evidence if e.series == SHARE_SERIES]
    # the prior's move keeps the cell its communication share names
    assert estimate_basis(rec) == rec.current["communication_share"]["estimate"]


def test_a_share_too_small_to_price_leaves_the_prior() -> None:
    rec = _move(_shared(0.8, MIN_MEASURED_SHARE / 2))
    assert rec.estimated_gain == pytest.approx(0.9)
    assert rec.current["gpu_share"]["estimate"] == "prior"
    assert "too small to price" in rec.gain_model
    # the measurement is still shown
    assert [e.value for e in rec.evidence if e.series == SHARE_SERIES] == [MIN_MEASURED_SHARE / 2]
