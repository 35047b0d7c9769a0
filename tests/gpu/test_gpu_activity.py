"""GPU throughput and activity over the fake NVML: each source, absent states, counters,
per-link labels, lost GPUs, and the per-workload attribution with a shared GPU.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from tests.gpu.conftest import gpu_series, scrape
from tests.helpers import REPO
from tests.workloads.helpers import WL_A, WL_B, WL_SERVICE, gpu_workloads, workload_value
from tests.workloads.helpers import scrape as scrape_workloads
from toposcope.catalogue import CATALOGUE
from toposcope.catalogue.dcgm_joins import DCGM_EQUIVALENTS
from toposcope.exporters.collectors.gpu import GpuCollector
from toposcope.exporters.gpu_source import GpuSource
from toposcope.fake_nvml import FakeNvml, FakeProcess, ManualClock
from toposcope.host.nvml import PcieSampler

Machine = Callable[[str], tuple[FakeNvml, GpuSource, GpuCollector]]

MIB = 1048576
KIB = 1024
RATIOS = (
    "toposcope_gpu_sm_active_ratio",
    "toposcope_gpu_sm_occupancy_ratio",
    "toposcope_gpu_tensor_active_ratio",
    "toposcope_gpu_dram_active_ratio",
)
#: every activity value family (the source rows aside)
VALUES = {*RATIOS, "toposcope_gpu_pcie_bytes_total", "toposcope_gpu_nvlink_bytes_total"}


def sources(registry: CollectorRegistry, gpu: str) -> dict[str, str]:
    """quantity -> source of one GPU's toposcope_gpu_activity_source_info rows."""
    return {
        sample.labels["quantity"]: sample.labels["source"]
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "toposcope_gpu_activity_source_info" and sample.labels["gpu"] == gpu
    }


def links(registry: CollectorRegistry, gpu: str, direction: str) -> dict[str, float]:
    """link -> bytes of one GPU's NVLink counters in one direction."""
    return {
        sample.labels["link"]: sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == "toposcope_gpu_nvlink_bytes_total"
        and sample.labels["gpu"] == gpu
        and sample.labels["direction"] == direction
    }


def test_h100_reads_every_quantity_from_gpm_after_a_second_sample(
    collector_for: Machine, clock: ManualClock
) -> None:
    fake, _, collector = collector_for("hgx-h100")
    first = scrape(("gpu", collector))
    # GPM measures between two samples: nothing is decided at the first reading
    assert sources(first, "0") == {}
    assert not VALUES & gpu_series(first, "0")
    clock.advance(10.0)
    registry = scrape(("gpu", collector))
    get = registry.get_sample_value
    assert set(sources(registry, "0").values()) == {"gpm"}
    assert len(sources(registry, "0")) == 6
    # the readings at fake time 10 s: 42 % SM, 21 % occupancy, 18 % tensor, 25 % DRAM
    assert get("toposcope_gpu_sm_active_ratio", {"gpu": "0", "source": "gpm"}) == 0.42
    assert get("toposcope_gpu_sm_occupancy_ratio", {"gpu": "0"}) == 0.21
    assert get("toposcope_gpu_tensor_active_ratio", {"gpu": "0"}) == 0.18
    assert get("toposcope_gpu_dram_active_ratio", {"gpu": "0"}) == 0.25
    # PCIe 2400 MiB/s out and 5800 MiB/s in, integrated over the 10 s between samples
    tx = {"gpu": "0", "direction": "tx", "source": "gpm"}
    assert get("toposcope_gpu_pcie_bytes_total", tx) == 2400 * MIB * 10
    assert get("toposcope_gpu_pcie_bytes_total", {**tx, "direction": "rx"}) == 5800 * MIB * 10
    # every one of the 18 NVLinks, labelled with its link number
    per_link = links(registry, "0", "tx")
    assert sorted(per_link, key=int) == [str(n) for n in range(18)]
    assert set(per_link.values()) == {4000 * MIB * 10}
    assert fake.gpm_samples_held() == 8


def test_counters_never_go_down_across_scrapes(collector_for: Machine, clock: ManualClock) -> None:
    _, _, collector = collector_for("hgx-h100")
    seen: list[tuple[float, float, float]] = []
    for _ in range(9):
        registry = scrape(("gpu", collector))
        pcie = registry.get_sample_value(
            "toposcope_gpu_pcie_bytes_total", {"gpu": "3", "direction": "rx"}
        )
        nvlink = links(registry, "3", "tx").get("17")
        sm = registry.get_sample_value("toposcope_gpu_sm_active_ratio", {"gpu": "3"})
        if pcie is not None and nvlink is not None and sm is not None:
            seen.append((pcie, nvlink, sm))
        clock.advance(10.0)
    assert len(seen) == 8
    # the rates step down at 30 s and again at 60 s (the series repeats); the counters grow
    assert all(b[0] > a[0] and b[1] > a[1] for a, b in itertools.pairwise(seen))
    assert seen[-1][0] == MIB * 10 * (5800 * 2 + 20000 * 3 + 5800 * 3)
    assert {s[2] for s in seen} == {0.42, 0.88, 0.93, 0.61}


def test_a100_uses_field_values_for_nvlink_and_the_sampler_for_pcie(
    collector_for: Machine, clock: ManualClock
) -> None:
    fake, source, collector = collector_for("dgx-a100")
    assert source.devices is not None
    sampler = PcieSampler(source.devices)
    source.pcie = sampler
    sampler.sample_once()
    registry = scrape(("gpu", collector))
    assert sources(registry, "5") == {
        "pcie_bytes": "pcie_throughput",
        "nvlink_bytes": "field_values",
        "sm_active": "none",
        "sm_occupancy": "none",
        "tensor_active": "none",
        "dram_active": "none",
    }
    # no GPM on an A100: the ratios are absent, not zero
    assert not set(RATIOS) & gpu_series(registry, "5")
    assert fake.call_count("nvmlGpmSampleGet") == 0
    # the driver's KiB counter of each link, in bytes
    nvlinks = links(registry, "5", "rx")
    assert len(nvlinks) == 12
    assert nvlinks["11"] == 900000000 * KIB
    # the sampler's counter starts at its first sample and adds rate x time between samples
    get = registry.get_sample_value
    tx = {"gpu": "5", "direction": "tx", "source": "pcie_throughput"}
    assert get("toposcope_gpu_pcie_bytes_total", tx) == 0.0
    clock.advance(1.0)
    sampler.sample_once()
    assert scrape(("gpu", collector)).get_sample_value("toposcope_gpu_pcie_bytes_total", tx) == (
        1250000 * 1024
    )
    # a gap longer than the sample age limit is not guessed: counting restarts after it
    clock.advance(30.0)
    sampler.sample_once()
    after_gap = scrape(("gpu", collector))
    assert after_gap.get_sample_value("toposcope_gpu_pcie_bytes_total", tx) == 1250000 * 1024
    assert links(after_gap, "5", "rx")["11"] == (900000000 + 8789062 * 31) * KIB


def test_not_supported_is_absent_and_not_asked_again(
    collector_for: Machine, clock: ManualClock
) -> None:
    fake, _, collector = collector_for("dgx-a100")
    fake.set_value(3, "nvlink_throughput", None)
    for _ in range(3):
        registry = scrape(("gpu", collector))
        clock.advance(5.0)
    # no PCIe sampler running and no NVLink counters: every quantity of GPU 3 says none
    assert set(sources(registry, "3").values()) == {"none"}
    assert not VALUES & gpu_series(registry, "3")
    assert links(registry, "2", "tx")
    # NOT_SUPPORTED in every entry is remembered: the fields are asked once
    assert fake.call_count("nvmlDeviceGetFieldValues", 3) == 1
    assert fake.call_count("nvmlDeviceGetFieldValues", 2) == 3
    assert registry.get_sample_value("toposcope_scrape_collector_success", {"collector": "gpu"})


def test_each_quantity_falls_back_to_the_next_source(
    collector_for: Machine, clock: ManualClock
) -> None:
    fake, _, collector = collector_for("hgx-h100")
    # GPU 1's GPM has the ratios but neither PCIe nor per-link NVLink rates
    fake.set_value(1, "gpm", {"sm_util": 50.0, "nvlink_tx_per_sec": 100.0})
    fake.set_value(1, "gpm_by_link", {})
    fake.set_value(1, "pcie_counter_bits", 64)
    scrape(("gpu", collector))
    clock.advance(10.0)
    registry = scrape(("gpu", collector))
    assert sources(registry, "1") == {
        "pcie_bytes": "field_values",
        "nvlink_bytes": "gpm",
        "sm_active": "gpm",
        "sm_occupancy": "none",
        "tensor_active": "none",
        "dram_active": "none",
    }
    get = registry.get_sample_value
    rx = {"gpu": "1", "direction": "rx", "source": "field_values"}
    assert get("toposcope_gpu_pcie_bytes_total", rx) == 900000000000 + 13000000000 * 10
    assert get("toposcope_gpu_sm_active_ratio", {"gpu": "1"}) == 0.5
    # the fake answers per-link NVLink rates of the links it has values for: link tx only
    assert len(links(registry, "1", "tx")) == 18
    assert links(registry, "1", "rx") == {}


def test_a_32_bit_pcie_counter_is_not_published_as_bytes(
    collector_for: Machine, clock: ManualClock
) -> None:
    """Driver 580 answers the PCIe byte counters as 32-bit ints (tests/fixtures/real-gpu),
    which wrap within a second under load: they are left out, and not asked again."""
    fake, _, collector = collector_for("hgx-h100")
    fake.set_value(1, "gpm", {"sm_util": 50.0})
    for _ in range(3):
        registry = scrape(("gpu", collector))
        clock.advance(10.0)
    assert sources(registry, "1")["pcie_bytes"] == "none"
    assert (
        registry.get_sample_value(
            "toposcope_gpu_pcie_bytes_total",
            {"gpu": "1", "direction": "tx", "source": "field_values"},
        )
        is None
    )
    fake.set_value(1, "pcie_counter_bits", 64)
    # the counters found narrow are not asked again until NVML is initialised again
    clock.advance(10.0)
    assert sources(scrape(("gpu", collector)), "1")["pcie_bytes"] == "none"


def test_gpm_total_stands_in_when_no_link_answers(
    collector_for: Machine, clock: ManualClock
) -> None:
    fake, _, collector = collector_for("hgx-h100")
    # a driver without per-link GPM metrics answers the NVLink totals only
    fake.set_value(2, "gpm_per_link", False)
    scrape(("gpu", collector))
    clock.advance(10.0)
    registry = scrape(("gpu", collector))
    # link-less series: the sum over the 18 links, and no double count under sum()
    assert links(registry, "2", "tx") == {"": 18 * 4000 * MIB * 10}
    assert fake.call_count("nvmlGpmMetricsGet") == 8


def test_a_lost_gpu_leaves_no_activity_and_frees_its_samples(
    collector_for: Machine, clock: ManualClock
) -> None:
    fake, source, collector = collector_for("hgx-h100")
    scrape(("gpu", collector))
    clock.advance(10.0)
    scrape(("gpu", collector))
    fake.lose_gpu(6)
    clock.advance(10.0)
    registry = scrape(("gpu", collector))
    assert registry.get_sample_value("toposcope_gpu_up", {"gpu": "6"}) == 0.0
    assert sources(registry, "6") == {}
    assert not VALUES & gpu_series(registry, "6")
    assert sources(registry, "7")["sm_active"] == "gpm"
    assert fake.gpm_samples_held() == 7
    source.close()
    assert fake.gpm_samples_held() == 0


def test_workloads_get_their_gpus_figures_and_a_shared_gpu_says_so(
    fake_machine: Callable[[str], FakeNvml],
    gpu_source: Callable[..., GpuSource],
    clock: ManualClock,
) -> None:
    fake = fake_machine("hgx-h100")
    # workload A (pids 1001, 1010) and foo.service (3001) share GPU 1; B (2001) has GPU 0
    fake.set_processes(0, [FakeProcess(2001, 1 << 30)])
    fake.set_processes(1, [FakeProcess(1001, 1 << 30), FakeProcess(3001, 1 << 29)])
    for gpu in range(2, 8):
        fake.set_processes(gpu, [])
    source = gpu_source(fake)
    workload_collector = gpu_workloads(source)
    gpus = GpuCollector(source)
    # no GPU reading yet: no workload activity
    before = scrape_workloads(workload_collector)
    assert workload_value(before, "toposcope_workload_gpu_info", workload=WL_B, gpu="0") == 1.0
    assert not [s for f in before.collect() for s in f.samples if "workload_gpu_sm" in s.name]
    scrape(("gpu", gpus))
    clock.advance(10.0)
    by_gpu = scrape(("gpu", gpus))
    registry = scrape_workloads(workload_collector)

    def value(name: str, **labels: str) -> float | None:
        return workload_value(registry, name, **labels)

    sm = "toposcope_workload_gpu_sm_active_ratio"
    assert value(sm, workload=WL_B, gpu="0", source="gpm", shared="false") == 0.42
    assert value(sm, workload=WL_A, gpu="1", source="gpm", shared="true") == 0.42
    assert value(sm, workload=WL_SERVICE, gpu="1", source="gpm", shared="true") == 0.42
    assert value(sm, workload=WL_A, gpu="1", source="gpm", shared="false") is None
    pcie = value(
        "toposcope_workload_gpu_pcie_bytes_total",
        workload=WL_B,
        gpu="0",
        direction="tx",
        source="gpm",
        shared="false",
    )
    assert pcie == by_gpu.get_sample_value(
        "toposcope_gpu_pcie_bytes_total", {"gpu": "0", "direction": "tx"}
    )
    # NVLink: the GPU's links summed, the whole GPU's figure for each holder (not split)
    nvlink = value(
        "toposcope_workload_gpu_nvlink_bytes_total",
        workload=WL_SERVICE,
        gpu="1",
        direction="rx",
        source="gpm",
        shared="true",
    )
    assert nvlink == pytest.approx(sum(links(by_gpu, "1", "rx").values()))
    assert nvlink == 18 * 3800 * MIB * 10


def test_the_dcgm_mapping_names_catalogue_families_and_is_in_the_docs() -> None:
    reference = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert {e.dcgm for e in DCGM_EQUIVALENTS} >= {
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    }
    for equivalent in DCGM_EQUIVALENTS:
        assert equivalent.metric in CATALOGUE
        assert equivalent.metric in equivalent.promql
        assert f"| `{equivalent.dcgm}` | `{equivalent.promql}` |" in reference
        # counters are compared through rate(), gauges as they are
        assert ("rate(" in equivalent.promql) == (CATALOGUE[equivalent.metric].type == "counter")
