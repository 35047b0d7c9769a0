"""The fake NVML behaves like the bindings: real error classes, init state, faults, specs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from toposcope.errors import ConfigError
from toposcope.fake_nvml import (
    SPEC_DIR,
    FakeNvml,
    ManualClock,
    load_fake_nvml,
    load_spec,
    resolve_spec,
    shipped_specs,
)


def test_shipped_descriptions_load() -> None:
    assert set(shipped_specs()) >= {"dgx-a100", "pcie-4gpu", "mig"}
    dgx = load_spec(SPEC_DIR / "dgx-a100.yaml")
    assert len(dgx.gpus) == 8
    assert [g.pci_bus_id[5:7] for g in dgx.gpus] == ["07", "0f", "47", "4e", "87", "90", "b7", "bd"]
    assert {g.name for g in dgx.gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert all(g.nvlinks is not None and len(g.nvlinks) == 12 for g in dgx.gpus)
    assert resolve_spec("fake") == SPEC_DIR / "dgx-a100.yaml"
    assert resolve_spec("fake:mig") == SPEC_DIR / "mig.yaml"


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVMLError_GpuIsLost),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVMLError_NotSupported),
        (pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVMLError_NoPermission),
        (pynvml.NVML_ERROR_TIMEOUT, pynvml.NVMLError_Timeout),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVMLError_DriverNotLoaded),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, pynvml.NVMLError_LibRmVersionMismatch),
        (pynvml.NVML_ERROR_UNKNOWN, pynvml.NVMLError_Unknown),
    ],
)
def test_fake_raises_the_real_error_subclasses(
    fake_machine: Callable[[str], FakeNvml], code: int, cls: type[Exception]
) -> None:
    fake = fake_machine("pcie-4gpu")
    fake.nvmlInit()
    name = next(k for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_") and v == code)
    fake.add_fault("nvmlDeviceGetPowerUsage", name, gpu=1)
    handle = fake.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError) as caught:
        fake.nvmlDeviceGetPowerUsage(handle)
    assert type(caught.value) is cls
    assert isinstance(caught.value, pynvml.NVMLError)
    assert caught.value.value == code
    # the other GPUs are not affected
    assert fake.nvmlDeviceGetPowerUsage(fake.nvmlDeviceGetHandleByIndex(0)) == 95000


def test_fake_needs_init_like_the_library(fake_machine: Callable[[str], FakeNvml]) -> None:
    fake = fake_machine("pcie-4gpu")
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 4
    fake.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_fake_structures_look_like_the_bindings(fake_machine: Callable[[str], FakeNvml]) -> None:
    fake = fake_machine("dgx-a100")
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(2)
    assert fake.nvmlDeviceGetPciInfo(handle).busId == b"00000000:47:00.0"
    memory = fake.nvmlDeviceGetMemoryInfo(handle)
    assert memory.total == 85899345920 and memory.used + memory.free == memory.total
    assert fake.nvmlDeviceGetUtilizationRates(handle).gpu == 35
    words = fake.nvmlDeviceGetCpuAffinity(handle, 4)
    assert words[0] == 0xFFFFFFFF and words[2] == 0xFFFFFFFF and words[1] == 0
    assert fake.NVML_CLOCK_SM == pynvml.NVML_CLOCK_SM
    assert fake.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost
    with pytest.raises(AttributeError):
        _ = fake.nvmlDeviceGetSomethingNew


def test_faults_after_times_and_fake_time() -> None:
    clock = ManualClock()
    fake = load_fake_nvml("fake:pcie-4gpu", clock=clock)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.add_fault("nvmlDeviceGetTemperature", "TIMEOUT", gpu=0, after=2, times=1)
    fake.add_fault("nvmlDeviceGetPowerUsage", "GPU_IS_LOST", at=10.0)
    temperature = pynvml.NVML_TEMPERATURE_GPU
    assert fake.nvmlDeviceGetTemperature(handle, temperature) == 38
    assert fake.nvmlDeviceGetTemperature(handle, temperature) == 38
    with pytest.raises(pynvml.NVMLError_Timeout):
        fake.nvmlDeviceGetTemperature(handle, temperature)
    assert fake.nvmlDeviceGetTemperature(handle, temperature) == 38
    assert fake.nvmlDeviceGetPowerUsage(handle) == 95000
    clock.advance(20.0)
    # a series moves with fake time (20 s into a 40 s period)
    assert fake.nvmlDeviceGetTemperature(handle, temperature) == 66
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(handle)


def test_gpu_lost_mid_run_from_the_description(tmp_path: Path) -> None:
    text = (SPEC_DIR / "pcie-4gpu.yaml").read_text()
    spec_file = tmp_path / "lost.yaml"
    spec_file.write_text(text + 'faults:\n  - {call: "*", gpu: 3, error: GPU_IS_LOST, at: 5}\n')
    clock = ManualClock()
    fake = load_fake_nvml(f"fake:{spec_file}", clock=clock)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(3)
    assert fake.nvmlDeviceGetPowerUsage(handle) == 95000
    clock.advance(5.0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(handle)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetHandleByIndex(3)
    assert fake.nvmlDeviceGetHandleByIndex(2) is not None


def test_hold_blocks_a_call_until_released(fake_machine: Callable[[str], FakeNvml]) -> None:
    fake = fake_machine("pcie-4gpu")
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    gate = fake.hold("nvmlDeviceGetPcieThroughput")
    results: list[int] = []
    worker = threading.Thread(
        target=lambda: results.append(
            fake.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        )
    )
    worker.start()
    assert gate.entered.wait(5)
    assert results == []
    gate.release()
    worker.join(5)
    assert results == [800000]


def test_missing_library_description() -> None:
    fake = FakeNvml(replace(load_spec(SPEC_DIR / "mig.yaml"), library_present=False))
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        fake.nvmlInit()


MALFORMED = [
    ("gpus: []\n", "gpus: needs at least one GPU"),
    ("[1, 2]\n", "(top): expected a mapping"),
    (
        "gpus:\n  - {name: X, pci_bus_id: '00000000:07:00.0'}\n  - {name: X, pci_bus_id: nope}\n",
        "gpus[1].pci_bus_id: expected a PCI bus id",
    ),
    (
        "gpus:\n  - {name: X, pci_bus_id: '0000:07:00.0', utilisation_gpu: 3}\n",
        "gpus[0].utilisation_gpu: unknown field",
    ),
    (
        "gpus:\n  - {name: X, pci_bus_id: '0000:07:00.0', utilization_gpu: 130}\n",
        "gpus[0].utilization_gpu: must be at most 100",
    ),
    (
        "gpus:\n  - name: X\n    pci_bus_id: '0000:07:00.0'\n"
        "    power_mw: {series: [[0, 1], [0, 2]]}\n",
        "gpus[0].power_mw.series[1]: times must increase",
    ),
    (
        "gpus:\n  - {name: X, pci_bus_id: '0000:07:00.0'}\n"
        "faults:\n  - {call: nvmlDeviceGetPowerUsage, error: GPU_ON_FIRE}\n",
        "faults[0].error: unknown NVML error 'GPU_ON_FIRE'",
    ),
    (
        "gpus:\n  - {name: X, pci_bus_id: '0000:07:00.0'}\n"
        "faults:\n  - {call: nvmlDeviceGetFrobnication, error: UNKNOWN}\n",
        "faults[0].call: the fake NVML has no function",
    ),
    (
        "gpus:\n  - {name: X, pci_bus_id: '0000:07:00.0'}\n"
        "  - {name: X, pci_bus_id: '0000:08:00.0'}\n"
        "topology: {matrix: [[X, PIX], [SYS, X]]}\n",
        "topology.matrix[0][1]: the matrix must be symmetric",
    ),
    ("gpus: [{name: X, pci_bus_id: '0000:07:00.0'\n", "not valid YAML/JSON"),
    ("gpus:\n  - {pci_bus_id: '0000:07:00.0'}\n", "gpus[0].name: is required"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_description_names_file_field_and_problem(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_fake_nvml(f"fake:{path}")
    assert str(path) in str(caught.value)
    assert message in str(caught.value)


def test_unknown_fake_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no such file and not a shipped description"):
        resolve_spec("fake:no-such-machine")
