"""GPU health signals over the fake NVML: row remapping, retired pages, NVLink and PCIe
error counters, what "not supported" means, and faults in the health calls.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.gpu.conftest import scrape
from toposcope.errors import ConfigError
from toposcope.exporters.collectors.gpu import GpuCollector
from toposcope.exporters.gpu_source import GpuSource
from toposcope.fake_nvml import FakeNvml, ManualClock, Ramp, load_fake_nvml

Machine = Callable[[str], tuple[FakeNvml, GpuSource, GpuCollector]]


def test_row_remapping_counts_and_flags(collector_for: Machine) -> None:
    fake, _, collector = collector_for("dgx-a100")
    healthy = scrape(("gpu", collector))
    get = healthy.get_sample_value
    rows = "toposcope_gpu_remapped_rows_total"
    assert get(rows, {"gpu": "2", "error_type": "uncorrectable"}) == 0
    assert get("toposcope_gpu_row_remap_pending", {"gpu": "2"}) == 0
    assert get("toposcope_gpu_row_remap_failed", {"gpu": "2"}) == 0
    fake.set_value(2, "remapped_rows", {"correctable": 3.0, "uncorrectable": 1.0})
    fake.set_value(2, "row_remap_pending", True)
    fake.set_value(5, "row_remap_failed", True)
    bad = scrape(("gpu", collector)).get_sample_value
    assert bad(rows, {"gpu": "2", "error_type": "correctable"}) == 3
    assert bad(rows, {"gpu": "2", "error_type": "uncorrectable"}) == 1
    assert bad("toposcope_gpu_row_remap_pending", {"gpu": "2"}) == 1
    assert bad("toposcope_gpu_row_remap_failed", {"gpu": "5"}) == 1
    assert bad("toposcope_gpu_row_remap_failed", {"gpu": "2"}) == 0
    # still up: a pending remap is a reason to reset the GPU, not a lost GPU
    assert bad("toposcope_gpu_up", {"gpu": "2"}) == 1


def test_nvlink_error_counters_per_link(collector_for: Machine) -> None:
    fake, _, collector = collector_for("dgx-a100")
    fake.set_value(4, "nvlink_errors_by_link", {3: {"crc_flit": 7.0, "recovery": 2.0}})
    get = scrape(("gpu", collector)).get_sample_value
    errors = "toposcope_gpu_nvlink_errors_total"
    assert get(errors, {"gpu": "4", "link": "3", "error_type": "crc_flit"}) == 7
    assert get(errors, {"gpu": "4", "link": "3", "error_type": "recovery"}) == 2
    assert get(errors, {"gpu": "4", "link": "3", "error_type": "replay"}) == 0
    assert get(errors, {"gpu": "4", "link": "2", "error_type": "crc_flit"}) == 0
    assert get(errors, {"gpu": "4", "link": "11", "error_type": "crc_data"}) == 0
    assert get(errors, {"gpu": "4", "link": "12", "error_type": "crc_data"}) is None


def test_pcie_replays_follow_the_fake_clock(collector_for: Machine, clock: ManualClock) -> None:
    fake, _, collector = collector_for("pcie-4gpu")
    fake.set_value(1, "pcie_replays", Ramp(start=10.0, rate=2.0))
    first = scrape(("gpu", collector)).get_sample_value
    assert first("toposcope_gpu_pcie_replays_total", {"gpu": "1"}) == 10
    assert first("toposcope_gpu_pcie_replays_total", {"gpu": "0"}) == 0
    clock.advance(30)
    later = scrape(("gpu", collector)).get_sample_value
    assert later("toposcope_gpu_pcie_replays_total", {"gpu": "1"}) == 70


def test_not_supported_means_absent_not_zero(collector_for: Machine) -> None:
    fake, _, collector = collector_for("pcie-4gpu")
    fake.add_fault("nvmlDeviceGetRemappedRows", "NOT_SUPPORTED", gpu=3)
    registry = scrape(("gpu", collector))
    names = {s.name for f in registry.collect() for s in f.samples}
    # PCIe GPUs without NVLink, and page retirement on GPUs that remap rows: no series at all
    assert "toposcope_gpu_nvlink_errors_total" not in names
    assert "toposcope_gpu_retired_pages" not in names
    get = registry.get_sample_value
    assert get("toposcope_gpu_row_remap_pending", {"gpu": "3"}) is None
    assert (
        get("toposcope_gpu_remapped_rows_total", {"gpu": "3", "error_type": "correctable"}) is None
    )
    assert get("toposcope_gpu_row_remap_pending", {"gpu": "2"}) == 0
    scrape(("gpu", collector))
    # NOT_SUPPORTED is remembered: the call is not repeated every scrape
    assert fake.call_count("nvmlDeviceGetRemappedRows", gpu=3) == 1
    assert fake.call_count("nvmlDeviceGetRemappedRows", gpu=2) == 2


def test_retired_pages_on_a_gpu_that_retires_pages(collector_for: Machine) -> None:
    fake, _, collector = collector_for("pcie-4gpu")
    fake.set_value(0, "retired_pages", {"single_bit": 1.0, "double_bit": 2.0})
    fake.set_value(0, "retired_pages_pending", True)
    get = scrape(("gpu", collector)).get_sample_value
    assert get("toposcope_gpu_retired_pages", {"gpu": "0", "cause": "double_bit"}) == 2
    assert get("toposcope_gpu_retired_pages", {"gpu": "0", "cause": "single_bit"}) == 1
    assert get("toposcope_gpu_retired_pages_pending", {"gpu": "0"}) == 1
    assert get("toposcope_gpu_retired_pages_pending", {"gpu": "1"}) is None


def test_a_health_call_that_loses_the_gpu_marks_it_down(collector_for: Machine) -> None:
    fake, _, collector = collector_for("dgx-a100")
    fake.add_fault("nvmlDeviceGetPcieReplayCounter", "GPU_IS_LOST", gpu=6)
    get = scrape(("gpu", collector)).get_sample_value
    assert get("toposcope_gpu_up", {"gpu": "6"}) == 0
    assert get("toposcope_gpu_pcie_replays_total", {"gpu": "6"}) is None
    assert get("toposcope_gpu_pcie_replays_total", {"gpu": "5"}) == 0


def test_health_fields_in_a_description(tmp_path: Path) -> None:
    path = tmp_path / "volta.yaml"
    path.write_text(
        "gpus:\n"
        "  - name: Tesla V100-SXM2-32GB\n"
        "    pci_bus_id: '0000:07:00.0'\n"
        "    retired_pages: {double_bit: 1, pending: true}\n"
        "    nvlinks: ['0000:08:00.0']\n"
        "    nvlink_errors: {crc_flit: {start: 0, rate: 5}, links: {0: {replay: 4}}}\n"
        "    pcie_replays: 3\n"
    )
    fake = load_fake_nvml(f"fake:{path}", clock=lambda: 0.0)
    gpu = fake.spec.gpus[0]
    assert gpu.retired_pages == {"single_bit": 0.0, "double_bit": 1.0}
    assert gpu.retired_pages_pending and gpu.remapped_rows is None
    assert gpu.nvlink_errors_by_link == {0: {"replay": 4.0}}
    assert gpu.pcie_replays == 3.0


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (
            "row_remapping: {pending: maybe}",
            "gpus[0].row_remapping.pending: expected true or false",
        ),
        ("nvlink_errors: {links: {first: {replay: 1}}}", "link 'first' is not a link number"),
        ("nvlink_errors: {crc: 1}", "gpus[0].nvlink_errors.crc: unknown field"),
        ("pcie_replays: -1", "gpus[0].pcie_replays: must not be negative"),
    ],
)
def test_malformed_health_fields_name_the_field(tmp_path: Path, field: str, message: str) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(f"gpus:\n  - name: X\n    pci_bus_id: '0000:07:00.0'\n    {field}\n")
    with pytest.raises(ConfigError) as caught:
        load_fake_nvml(f"fake:{path}")
    assert message in str(caught.value)
