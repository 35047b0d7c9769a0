"""GPU traffic and SM activity into the advisor's model, from toposcope's series or from
dcgm-exporter's (``--gpu-metrics-source``), through the PromQL backend against a fake
Prometheus and through the scraper.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.advisor.fakes import ExpositionPrometheus, FakeServer
from toposcope.advisor.loaders import PrometheusLoader, ScrapeLoader, ScrapeTarget, Window
from toposcope.advisor.loaders.dcgm import DCGM_FIELDS, with_gpu_metrics_source
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.runner import load_model
from toposcope.catalogue.dcgm_joins import DCGM_EQUIVALENTS
from toposcope.cli import main

#: rates are a counter's value over this many seconds (the fake's answer to increase())
RATE_DIVISOR = 100.0
KEYS0 = (
    'gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:07:00.0",device="nvidia0",'
    'modelName="NVIDIA H100",Hostname="n1"'
)
KEYS1 = (
    'gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:0B:00.0",device="nvidia1",'
    'modelName="NVIDIA H100",Hostname="n1"'
)
#: the labels of workload train's series on GPU 0, and of a shared GPU's GPM reading
TRAIN = 'workload="train",gpu="0"'
SHARED = 'source="gpm",shared="true"'
TOPOSCOPE = f"""\
# TYPE toposcope_gpu_info gauge
toposcope_gpu_info{{{KEYS0},numa_node="0"}} 1
toposcope_gpu_info{{{KEYS1},numa_node="0"}} 1
# TYPE toposcope_gpu_pcie_bytes_total counter
toposcope_gpu_pcie_bytes_total{{{KEYS0},direction="tx",source="gpm"}} 3e11
toposcope_gpu_pcie_bytes_total{{{KEYS0},direction="rx",source="gpm"}} 1e11
# TYPE toposcope_gpu_nvlink_bytes_total counter
toposcope_gpu_nvlink_bytes_total{{{KEYS0},link="0",direction="tx",source="gpm"}} 5e11
toposcope_gpu_nvlink_bytes_total{{{KEYS0},link="1",direction="tx",source="gpm"}} 5e11
toposcope_gpu_nvlink_bytes_total{{{KEYS0},link="0",direction="rx",source="gpm"}} 1e12
# TYPE toposcope_gpu_sm_active_ratio gauge
toposcope_gpu_sm_active_ratio{{{KEYS0},source="gpm"}} 0.25
toposcope_gpu_sm_active_ratio{{{KEYS1},source="gpm"}} 0.75
# TYPE toposcope_gpu_dram_active_ratio gauge
toposcope_gpu_dram_active_ratio{{{KEYS0},source="gpm"}} 0.5
# TYPE toposcope_workload_gpu_info gauge
toposcope_workload_gpu_info{{workload="train",gpu="0"}} 1
# TYPE toposcope_workload_gpu_pcie_bytes_total counter
toposcope_workload_gpu_pcie_bytes_total{{{TRAIN},direction="tx",{SHARED}}} 3e11
toposcope_workload_gpu_pcie_bytes_total{{{TRAIN},direction="rx",{SHARED}}} 1e11
# TYPE toposcope_workload_gpu_nvlink_bytes_total counter
toposcope_workload_gpu_nvlink_bytes_total{{{TRAIN},direction="tx",{SHARED}}} 1e12
# TYPE toposcope_workload_gpu_sm_active_ratio gauge
toposcope_workload_gpu_sm_active_ratio{{{TRAIN},{SHARED}}} 0.25
"""
#: dcgm-exporter's series of the same GPUs (another job, instance and Hostname format), a
#: MIG instance's row, a GPU joined by Hostname and PCI address only, and a GPU toposcope
#: does not know
DCGM0 = 'gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:07:00.0",Hostname="n1"'
DCGM = f"""\
# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge
DCGM_FI_PROF_PCIE_TX_BYTES{{{DCGM0},dcgm_job="dcgm"}} 7e9
DCGM_FI_PROF_PCIE_TX_BYTES{{gpu="0",UUID="GPU-aaaa",GPU_I_ID="1",Hostname="n1"}} 1e15
DCGM_FI_PROF_PCIE_TX_BYTES{{gpu="1",pci_bus_id="00000000:0b:00.0",Hostname="n1"}} 2e9
DCGM_FI_PROF_PCIE_TX_BYTES{{gpu="0",UUID="GPU-zzzz",Hostname="other"}} 9e9
# TYPE DCGM_FI_PROF_PCIE_RX_BYTES gauge
DCGM_FI_PROF_PCIE_RX_BYTES{{{DCGM0}}} 1e9
# TYPE DCGM_FI_PROF_NVLINK_TX_BYTES gauge
DCGM_FI_PROF_NVLINK_TX_BYTES{{gpu="0",UUID="GPU-aaaa",Hostname="n1"}} 4e10
# TYPE DCGM_FI_PROF_NVLINK_RX_BYTES gauge
DCGM_FI_PROF_NVLINK_RX_BYTES{{gpu="0",UUID="GPU-aaaa",Hostname="n1"}} 2e10
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="GPU-aaaa",Hostname="n1"}} 0.125
"""
LABELS = {"job": "toposcope", "instance": "n1:9400", "node": "n1"}


def _model(text: str, source: str) -> tuple[ClusterModel, list[str]]:
    fake_prometheus = ExpositionPrometheus(text, LABELS, rate_divisor=RATE_DIVISOR)
    with FakeServer(fake_prometheus).run() as fake:
        backend = with_gpu_metrics_source(PrometheusLoader(fake.url), source)
        model = load_model(backend, Window.parse("1h"), selector='job="toposcope"')
        return model, [r.params.get("query", "") for r in fake.requests]


def test_toposcope_source_gives_each_gpu_and_workload_its_rates_and_sm_active() -> None:
    model, _ = _model(TOPOSCOPE + DCGM, "toposcope")
    gpu0, gpu1 = model.nodes["n1"].gpus
    assert gpu0.pcie_bytes_per_second == pytest.approx(4e11 / RATE_DIVISOR)
    assert gpu0.nvlink_bytes_per_second == pytest.approx(2e12 / RATE_DIVISOR)
    assert (gpu0.sm_active, gpu1.sm_active, gpu0.dram_active) == (0.25, 0.75, 0.5)
    assert gpu1.pcie_bytes_per_second is None and gpu1.nvlink_bytes_per_second is None
    [train] = model.workloads
    assert train.gpu_pcie_bytes_per_second == {0: pytest.approx(4e11 / RATE_DIVISOR)}
    assert train.gpu_nvlink_bytes_per_second == {0: pytest.approx(1e12 / RATE_DIVISOR)}
    assert train.gpu_sm_active == {0: 0.25}
    assert train.gpus_shared
    assert model.gpu_activity_source == "toposcope"


def test_dcgm_source_reads_dcgm_fields_joined_to_toposcopes_gpus() -> None:
    model, asked = _model(TOPOSCOPE + DCGM, "dcgm")
    gpu0, gpu1 = model.nodes["n1"].gpus
    # dcgm's byte fields are rates already: averaged, TX and RX added; the MIG row is skipped
    assert gpu0.pcie_bytes_per_second == pytest.approx(8e9)
    assert gpu0.nvlink_bytes_per_second == pytest.approx(6e10)
    assert gpu0.sm_active == 0.125
    # joined by Hostname and PCI address (dcgm's hex case differs) when UUID is missing
    assert gpu1.pcie_bytes_per_second == pytest.approx(2e9)
    assert gpu1.sm_active is None
    # dcgm names no toposcope workload: the workload keeps no figures of its own
    [train] = model.workloads
    assert train.gpu_pcie_bytes_per_second == {} and not train.gpus_shared
    # a GPU toposcope does not know makes no node
    assert set(model.nodes) == {"n1"}
    assert model.gpu_activity_source == "dcgm"
    assert "(GPU activity from dcgm-exporter)" in model.source
    dcgm_queries = [q for q in asked if "DCGM_FI_PROF" in q]
    assert "avg_over_time(DCGM_FI_PROF_PCIE_TX_BYTES[1h])" in dcgm_queries
    assert not any("toposcope_gpu_pcie_bytes_total" in q for q in asked)
    assert not any('job="toposcope"' in q for q in dcgm_queries)


def test_without_activity_series_the_fields_stay_absent() -> None:
    text = "\n".join(TOPOSCOPE.splitlines()[:3]) + "\n"
    for source in ("toposcope", "dcgm"):
        model, _ = _model(text, source)
        gpu0 = model.nodes["n1"].gpus[0]
        assert (gpu0.pcie_bytes_per_second, gpu0.nvlink_bytes_per_second) == (None, None)
        assert gpu0.sm_active is None


def test_a_scrape_has_no_rate_of_the_byte_counters_but_has_sm_active(tmp_path: Path) -> None:
    path = tmp_path / "n1.prom"
    path.write_text(TOPOSCOPE)
    model = load_model(ScrapeLoader([ScrapeTarget.parse(f"n1={path}")]), Window.parse("1h"))
    gpu0 = model.nodes["n1"].gpus[0]
    assert gpu0.pcie_bytes_per_second is None and gpu0.nvlink_bytes_per_second is None
    assert gpu0.sm_active == 0.25
    assert model.workloads[0].gpu_pcie_bytes_per_second == {}


def test_every_dcgm_field_read_is_a_documented_equivalent_of_the_query_it_answers() -> None:
    from toposcope.advisor.loaders import QUERY_TABLE

    documented = {(e.dcgm, e.metric) for e in DCGM_EQUIVALENTS}
    metric_of = {row.name: row.metric for row in QUERY_TABLE}
    for query, fields in DCGM_FIELDS.items():
        for field, _ in fields:
            assert (field, metric_of[query]) in documented


def test_the_option_is_offered_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["advise"], ["place", "--gpus", "2"], ["advisor", "serve"]):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--gpu-metrics-source", "nvml", "--prometheus", "http://x"])
        assert exit_info.value.code == 2
        assert "invalid choice: 'nvml'" in capsys.readouterr().err


def test_the_smaller_pcie_direction_is_kept_for_each_gpu_and_workload() -> None:
    """A peer exchange moves as much each way; host copies mostly one way (tx 3e11, rx 1e11)."""
    model, _ = _model(TOPOSCOPE, "toposcope")
    gpu0, gpu1 = model.nodes["n1"].gpus
    assert gpu0.pcie_each_way_bytes_per_second == pytest.approx(1e11 / RATE_DIVISOR)
    assert gpu1.pcie_each_way_bytes_per_second is None
    [train] = model.workloads
    assert train.gpu_pcie_each_way_bytes_per_second == {0: pytest.approx(1e11 / RATE_DIVISOR)}
