"""What a real GPU machine answered (tests/fixtures/real-gpu) against the catalogue and the fake.

The fixtures are one capture on an NVIDIA H200 (driver 580.159.04) by ``capture.sh`` in that
folder; its README lists what differed from the fake NVML and what was changed for it. Nothing
here needs a GPU: the tests read the saved answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from toposcope.catalogue import CATALOGUE
from toposcope.fake_nvml import SPEC_DIR, FakeNvml, ManualClock, load_spec
from toposcope.host.nvml.activity import FI_PCIE_FIELDS, NARROW_VALUE_TYPES
from toposcope.host.nvml.probe import probe

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu"

#: calls the real GPU answered that the fake's H100 answers differently, each for a reason:
#: the H200 ran in a virtual machine, where the driver gives no NUMA node for the GPU
KNOWN_DIFFERENCES = {"nvmlDeviceGetNumaNodeId"}


def real(name: str) -> dict[str, Any]:
    """One saved probe of the real GPU."""
    answers: dict[str, Any] = json.loads((REAL / name).read_text())
    return answers


@pytest.fixture(scope="module")
def fake_answers() -> dict[str, Any]:
    """The fake H100's answers to the same calls, GPM over 2 s of fake time."""
    clock = ManualClock()
    fake = FakeNvml(load_spec(SPEC_DIR / "hgx-h100.yaml"), clock=clock)
    fake.clear_faults()
    return probe(fake, gpm_interval=2.0, sleep=clock.advance)


@pytest.mark.parametrize("capture", ["exporter-metrics.txt", "exporter-print.txt"])
def test_every_family_the_real_exporter_published_is_in_the_catalogue(capture: str) -> None:
    text = (REAL / capture).read_text()
    seen = 0
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("toposcope_"):
            continue
        spec = CATALOGUE.get(family.name) or CATALOGUE.get(f"{family.name}_total")
        assert spec is not None, family.name
        for sample in family.samples:
            assert set(sample.labels) <= set(spec.labels), (sample.name, sample.labels)
        seen += 1
    assert seen > 40
    assert "toposcope_gpu_memory_used_bytes" in text
    # the first capture's second scrape had GPM's rates decided; a single scrape has not
    assert ("toposcope_gpu_sm_active_ratio" in text) == (capture == "exporter-metrics.txt")


def test_the_pcie_link_collector_read_the_real_link() -> None:
    """An H200 on PCIe Gen 5 x16 (``gpu-sysfs-pci.txt``): 32 GT/s and 16 lanes, max and now."""
    sysfs = dict(
        line.split(": ", 1) for line in (REAL / "gpu-sysfs-pci.txt").read_text().splitlines()
    )
    assert sysfs["max_link_speed"] == "32.0 GT/s PCIe" and sysfs["max_link_width"] == "16"
    samples = {
        (s.name, s.labels["state"]): s.value
        for family in text_string_to_metric_families((REAL / "exporter-print.txt").read_text())
        if family.name.startswith("toposcope_gpu_pcie_link")
        for s in family.samples
    }
    assert samples == {
        ("toposcope_gpu_pcie_link_speed_transfers_per_second", "max"): 32e9,
        ("toposcope_gpu_pcie_link_speed_transfers_per_second", "current"): 32e9,
        ("toposcope_gpu_pcie_link_width_lanes", "max"): 16.0,
        ("toposcope_gpu_pcie_link_width_lanes", "current"): 16.0,
    }


@pytest.mark.parametrize("capture", ["nvml-probe-idle.json", "nvml-probe-busy.json"])
def test_the_fake_answers_every_call_the_real_gpu_answered_in_the_same_shape(
    capture: str, fake_answers: dict[str, Any]
) -> None:
    real_calls = real(capture)["gpus"][0]["calls"]
    fake_calls = fake_answers["gpus"][0]["calls"]
    compared = 0
    for key, answer in real_calls.items():
        skipped = key in KNOWN_DIFFERENCES or key.startswith("nvmlDeviceGetNvLink")
        if "value" not in answer or skipped:
            continue
        assert "value" in fake_calls[key], key
        assert type(fake_calls[key]["value"]) is type(answer["value"]), key
        if isinstance(answer["value"], dict):
            assert set(fake_calls[key]["value"]) >= set(answer["value"]), key
        compared += 1
    assert compared >= 25


def test_pcie_byte_counters_are_32_bit_on_the_real_driver_and_in_the_fake(
    fake_answers: dict[str, Any],
) -> None:
    real_fields = real("nvml-probe-busy.json")["gpus"][0]["calls"]["nvmlDeviceGetFieldValues"]
    fake_fields = fake_answers["gpus"][0]["calls"]["nvmlDeviceGetFieldValues"]["value"]
    for field_id in FI_PCIE_FIELDS.values():
        key = f"{field_id}/0"
        assert real_fields["value"][key]["value_type"] == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        assert real_fields["value"][key]["value"] < 2**32
        assert fake_fields[key]["value_type"] in NARROW_VALUE_TYPES
        assert fake_fields[key]["value"] < 2**32


def test_gpm_answers_the_metrics_the_exporter_asks_for_in_both(
    fake_answers: dict[str, Any],
) -> None:
    real_gpm = real("nvml-probe-busy.json")["gpus"][0]["gpm"]
    fake_gpm = fake_answers["gpus"][0]["gpm"]
    assert (
        real_gpm["support"]
        == fake_gpm["support"]
        == {"value": {"isSupportedDevice": 1, "version": 1}}
    )
    answered = {metric for metric, entry in real_gpm["metrics"].items() if "value" in entry}
    assert answered == {
        str(m)
        for m in (
            pynvml.NVML_GPM_METRIC_SM_UTIL,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
            pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
            pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
        )
    }
    assert answered <= {m for m, entry in fake_gpm["metrics"].items() if "value" in entry}
    # percentages and MiB/s, as the fake's description gives them
    assert 0 < real_gpm["metrics"][str(pynvml.NVML_GPM_METRIC_SM_UTIL)]["value"] <= 100
