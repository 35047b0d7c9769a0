"""The NVML probe records every answer of the library, values and error classes alike."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest

from toposcope.fake_nvml import SPEC_DIR, FakeNvml, ManualClock, load_spec
from toposcope.host.nvml.probe import main, probe


def fake(name: str, clock: ManualClock) -> FakeNvml:
    """The shipped description ``name`` with its faults cleared, on a clock the test moves."""
    library = FakeNvml(load_spec(SPEC_DIR / f"{name}.yaml"), clock=clock)
    library.clear_faults()
    return library


def test_gpm_rates_come_from_two_samples_the_interval_apart() -> None:
    sleeps = _Sleeps(ManualClock())
    answers = probe(fake("hgx-h100", sleeps.clock), gpm_interval=15.0, sleep=sleeps)
    assert sleeps.slept == [15.0] * 8
    gpu = answers["gpus"][0]
    assert answers["system"]["nvmlDeviceGetCount"] == {"value": 8}
    assert gpu["gpm"]["support"]["value"]["isSupportedDevice"] == 1
    metrics = gpu["gpm"]["metrics"]
    assert metrics[str(pynvml.NVML_GPM_METRIC_SM_UTIL)]["value"] > 0
    assert gpu["nvlinks_present"] == list(range(18))
    assert gpu["calls"]["nvmlDeviceGetUUID"]["value"].startswith("GPU-")


def test_a_call_the_gpu_refuses_is_recorded_by_its_error_class() -> None:
    sleeps = _Sleeps(ManualClock())
    answers = probe(fake("dgx-a100", sleeps.clock), gpm_interval=0.0, sleep=sleeps)
    assert sleeps.slept == []
    gpu = answers["gpus"][0]
    assert "metrics" not in gpu["gpm"]
    assert gpu["gpm"]["support"]["value"]["isSupportedDevice"] == 0
    errors = {key: answer["error"] for key, answer in gpu["calls"].items() if "error" in answer}
    assert all(name.startswith("NVMLError_") for name in errors.values())
    assert answers["pairs"]["0-1"]["value"] in range(0, 60)


def test_the_command_writes_json_and_refuses_a_bad_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "probe.json"
    assert main(["--nvml", "fake:pcie-4gpu", "--gpm-interval", "0", "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["gpus"]) == 4
    with pytest.raises(SystemExit) as stopped:
        main(["--gpm-interval", "-1"])
    assert stopped.value.code == 2
    assert "--gpm-interval" in capsys.readouterr().err


class _Sleeps:
    """Records the pauses asked for and moves the fake's clock instead of sleeping."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.slept: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock.advance(seconds)
