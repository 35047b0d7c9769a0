"""Per-process GPU utilization over the fake NVML: the fake's samples, the reader's absent
states, and each workload's share of a GPU it holds (shared or not) in the workloads
collector.
"""

from __future__ import annotations

from collections.abc import Callable

import pynvml
import pytest

from tests.workloads.helpers import WL_A, WL_B, WL_SERVICE, gpu_workloads, workload_value
from tests.workloads.helpers import scrape as scrape_workloads
from toposcope.exporters.gpu_source import GpuSource
from toposcope.fake_nvml import FakeNvml, FakeProcess, ManualClock, parse_spec
from toposcope.fake_nvml.device_calls import SAMPLE_EPOCH_US
from toposcope.fake_nvml.structs import FakeHandle

SHARE = "toposcope_workload_gpu_sm_utilization_ratio"


def test_the_fake_answers_one_sample_per_process_with_sm_util_after_the_last_seen(
    fake_machine: Callable[[str], FakeNvml], clock: ManualClock
) -> None:
    fake = fake_machine("hgx-h100")
    fake.nvmlInit()
    fake.set_processes(
        1, [FakeProcess(1001, 1 << 30, sm_util=35.0), FakeProcess(3001, 1 << 29, sm_util=50.0)]
    )
    fake.set_processes(2, [FakeProcess(4001, 1 << 30)])  # holds memory, no samples
    clock.advance(2.0)
    handle = fake.nvmlDeviceGetHandleByIndex(1)
    samples = fake.nvmlDeviceGetProcessUtilization(handle, 0)
    assert {(s.pid, s.smUtil) for s in samples} == {(1001, 35), (3001, 50)}
    stamp = samples[0].timeStamp
    assert stamp == SAMPLE_EPOCH_US + 2_000_000
    # nothing newer than the last seen sample: NOT_FOUND, as the driver
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetProcessUtilization(handle, stamp)
    clock.advance(1.0)
    assert len(fake.nvmlDeviceGetProcessUtilization(handle, stamp)) == 2
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetProcessUtilization(fake.nvmlDeviceGetHandleByIndex(2), 0)


def test_a_description_gives_sm_util_and_mig_mode_is_not_supported() -> None:
    spec = parse_spec(
        {
            "defaults": {"name": "NVIDIA A100-SXM4-80GB"},
            "gpus": [
                {
                    "uuid": "GPU-0",
                    "pci_bus_id": "00000000:07:00.0",
                    "processes": [{"pid": 10, "used_bytes": 1024, "sm_util": 40}],
                },
                {
                    "uuid": "GPU-1",
                    "pci_bus_id": "00000000:0F:00.0",
                    "mig": {"mode": "enabled"},
                    "processes": [{"pid": 11, "used_bytes": 1024, "sm_util": 40}],
                },
            ],
        },
        "test",
    )
    assert spec.gpus[0].processes[0].sm_util == 40.0
    clock = ManualClock()
    fake = FakeNvml(spec, clock=clock)
    fake.nvmlInit()
    clock.advance(1.0)
    assert fake.nvmlDeviceGetProcessUtilization(FakeHandle(0), 0)[0].smUtil == 40
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetProcessUtilization(FakeHandle(1), 0)


def test_each_workload_gets_its_own_share_and_a_gpu_without_samples_none(
    fake_machine: Callable[[str], FakeNvml],
    gpu_source: Callable[..., GpuSource],
    clock: ManualClock,
) -> None:
    fake = fake_machine("hgx-h100")
    # workload A (pids 1001, 1010) and foo.service (3001) time-slice GPU 1; B (2001) has GPU 0
    fake.set_processes(0, [FakeProcess(2001, 1 << 30, sm_util=80.0)])
    fake.set_processes(
        1,
        [
            FakeProcess(1001, 1 << 30, sm_util=20.0),
            FakeProcess(1010, 1 << 29, sm_util=10.0),
            FakeProcess(3001, 1 << 29, sm_util=55.0),
        ],
    )
    for gpu in range(2, 8):
        fake.set_processes(gpu, [])
    source = gpu_source(fake)
    collector = gpu_workloads(source)
    clock.advance(5.0)
    registry = scrape_workloads(collector)

    def share(workload: str, gpu: str, shared: str) -> float | None:
        return workload_value(registry, SHARE, workload=workload, gpu=gpu, shared=shared)

    # A's two processes summed; each holder of GPU 1 its own figure, not the GPU's
    assert share(WL_A, "1", "true") == pytest.approx(0.30)
    assert share(WL_SERVICE, "1", "true") == pytest.approx(0.55)
    assert share(WL_B, "0", "false") == pytest.approx(0.80)
    # no new sample since the last reading: absent, not 0
    again = scrape_workloads(collector)
    assert workload_value(again, SHARE, workload=WL_B, gpu="0", shared="false") is None
    # a GPU with samples, but none of the workload's processes ran a kernel: 0
    fake.set_processes(1, [FakeProcess(1001, 1 << 30), FakeProcess(3001, 1 << 29, sm_util=90.0)])
    clock.advance(5.0)
    later = scrape_workloads(collector)
    assert workload_value(later, SHARE, workload=WL_A, gpu="1", shared="true") == 0.0
    assert workload_value(later, SHARE, workload=WL_SERVICE, gpu="1", shared="true") == 0.9


def test_not_supported_leaves_the_gpu_without_a_share_and_is_not_asked_again(
    fake_machine: Callable[[str], FakeNvml],
    gpu_source: Callable[..., GpuSource],
    clock: ManualClock,
) -> None:
    fake = fake_machine("hgx-h100")
    fake.set_processes(0, [FakeProcess(2001, 1 << 30, sm_util=80.0)])
    fake.set_processes(1, [FakeProcess(1001, 1 << 30, sm_util=20.0)])
    for gpu in range(2, 8):
        fake.set_processes(gpu, [])
    fake.add_fault("nvmlDeviceGetProcessUtilization", "NOT_SUPPORTED", gpu=0)
    source = gpu_source(fake)
    collector = gpu_workloads(source)
    for _ in range(2):
        clock.advance(5.0)
        registry = scrape_workloads(collector)
        assert workload_value(registry, SHARE, workload=WL_B, gpu="0", shared="false") is None
        assert workload_value(registry, SHARE, workload=WL_A, gpu="1", shared="false") == 0.2
        # the GPU itself is still attributed
        assert workload_value(registry, "toposcope_workload_gpu_info", workload=WL_B, gpu="0")
    assert fake.call_count("nvmlDeviceGetProcessUtilization", gpu=0) == 1
    # a lost GPU gives no share either, and the others go on
    fake.lose_gpu(1)
    clock.advance(5.0)
    registry = scrape_workloads(collector)
    assert workload_value(registry, SHARE, workload=WL_A, gpu="1", shared="false") is None
