"""The fake NVML's GPM and field value calls answer like the bindings, from the description."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest
import yaml

from toposcope.errors import ConfigError
from toposcope.fake_nvml import SPEC_DIR, FakeNvml, ManualClock, load_spec, shipped_specs
from toposcope.fake_nvml.activity_calls import ALL_LINKS
from toposcope.fake_nvml.structs import FakeHandle


def started(name: str, clock: ManualClock) -> FakeNvml:
    fake = FakeNvml(load_spec(SPEC_DIR / f"{name}.yaml"), clock=clock)
    fake.clear_faults()
    fake.nvmlInit()
    return fake


def test_the_h100_description_has_gpm_and_the_a100_has_not() -> None:
    clock = ManualClock()
    assert "hgx-h100" in shipped_specs()
    h100, a100 = started("hgx-h100", clock), started("dgx-a100", clock)
    handle = FakeHandle(0)
    assert h100.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 1
    assert a100.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 0
    sample = a100.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        a100.nvmlGpmSampleGet(handle, sample)
    a100.nvmlGpmSampleFree(sample)
    assert a100.gpm_samples_held() == 0


def test_gpm_metrics_follow_the_description_between_two_samples() -> None:
    clock = ManualClock()
    fake = started("hgx-h100", clock)
    first = fake.nvmlGpmSampleGet(FakeHandle(4), fake.nvmlGpmSampleAlloc())
    clock.advance(16.0)
    second = fake.nvmlGpmSampleGet(FakeHandle(4), fake.nvmlGpmSampleAlloc())
    request = fake.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    wanted = [
        pynvml.NVML_GPM_METRIC_SM_UTIL,
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
        pynvml.NVML_GPM_METRIC_NVLINK_L17_RX_PER_SEC,
        pynvml.NVML_GPM_METRIC_FP64_UTIL,
    ]
    request.numMetrics = len(wanted)
    request.sample1, request.sample2 = first, second
    for slot, metric in enumerate(wanted):
        request.metrics[slot].metricId = metric
    answer = fake.nvmlGpmMetricsGet(request)
    got = [(m.nvmlReturn, m.value) for m in answer.metrics[: len(wanted)]]
    assert got == [
        (pynvml.NVML_SUCCESS, 88.0),
        (pynvml.NVML_SUCCESS, 18 * 4000.0),
        (pynvml.NVML_SUCCESS, 3800.0),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0),
    ]
    other = fake.nvmlGpmSampleGet(FakeHandle(5), fake.nvmlGpmSampleAlloc())
    request.sample2 = other
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlGpmMetricsGet(request)
    for sample in (first, second, other):
        fake.nvmlGpmSampleFree(sample)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlGpmSampleFree(first)


def test_field_values_answer_each_entry_with_its_own_code() -> None:
    clock = ManualClock()
    fake = started("dgx-a100", clock)
    clock.advance(2.0)
    entries = fake.nvmlDeviceGetFieldValues(
        FakeHandle(0),
        [
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 12),
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        ],
    )
    per_link = 1000000000 + 9765625 * 2
    assert [(e.nvmlReturn, e.value.ullVal) for e in entries] == [
        (pynvml.NVML_SUCCESS, per_link),
        (pynvml.NVML_SUCCESS, 12 * per_link),
        (pynvml.NVML_ERROR_INVALID_ARGUMENT, 0),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, 0),
    ]
    assert entries[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert entries[0].scopeId == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpm": {"sm_util": 120}}, r"gpus\[0\]\.gpm\.sm_util: must be at most 100"),
        ({"gpm": {"sm_active": 50}}, r"gpus\[0\]\.gpm\.sm_active: unknown field"),
        ({"gpm": {"links": {"x": {}}}}, r"gpus\[0\]\.gpm\.links: link 'x' is not a link number"),
        ({"gpm": {"per_link": "no"}}, r"gpus\[0\]\.gpm\.per_link: expected true or false"),
        ({"nvlink_throughput": {"data_tx_kib": -1}}, r"data_tx_kib: must not be negative"),
        ({"pcie_counters": {"tx": 1}}, r"gpus\[0\]\.pcie_counters\.tx: unknown field"),
    ],
)
def test_malformed_activity_descriptions_name_the_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    spec = yaml.safe_load((SPEC_DIR / "hgx-h100.yaml").read_text())
    spec["gpus"][0].update(change)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=message):
        load_spec(path)
