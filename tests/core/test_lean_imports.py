"""What a serving exporter holds in memory: no NVML bindings, YAML or bcrypt it does not use.

The exporter's peak RSS target (docs/benchmarks.md) leaves no room for libraries a host never
needs: the NVML bindings where no ``libnvidia-ml`` loads or with ``--nvml off``, PyYAML and
bcrypt without ``--web.config.file``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from tests.helpers import holds_any, modules_loaded_by
from toposcope.exporters.gpu_source import nvml_library_missing
from toposcope.host.nvml import CLOCK_EVENT_REASONS

LEAN_ABSENT = ("pynvml", "yaml", "bcrypt", "toposcope.host.nvml.library")


@pytest.mark.parametrize("nvml", ["off", "auto"])
def test_exporter_print_without_nvml_loads_no_bindings_yaml_or_bcrypt(
    hwloc_root: Callable[[str], Path], nvml: str
) -> None:
    if nvml == "auto" and nvml_library_missing() is None:
        pytest.skip("this host has an NVML library, so auto mode rightly loads the bindings")
    root = str(hwloc_root("16amd64-8n2c"))
    loaded = modules_loaded_by(["exporter", "--print", "--root", root, "--nvml", nvml])
    # the scrape ran: the collectors, the GPU one included, were built
    assert "toposcope.exporters.collectors.gpu" in loaded
    assert "toposcope.host.nvml.records" in loaded
    for prefix in LEAN_ABSENT:
        assert not holds_any(loaded, prefix), prefix


def test_clock_event_reasons_match_the_bindings() -> None:
    # the bits are copied from nvml.h; the installed bindings must agree with every one
    names = {
        "gpu_idle": "GpuIdle",
        "applications_clocks_setting": "ApplicationsClocksSetting",
        "sw_power_cap": "SwPowerCap",
        "hw_slowdown": "HwSlowdown",
        "sync_boost": "SyncBoost",
        "sw_thermal": "SwThermalSlowdown",
        "hw_thermal": "HwThermalSlowdown",
        "hw_power_brake": "HwPowerBrakeSlowdown",
        "display_clocks_setting": "DisplayClockSetting",
    }
    assert [reason for reason, _ in CLOCK_EVENT_REASONS] == list(names)
    for reason, bit in CLOCK_EVENT_REASONS:
        assert bit == getattr(pynvml, f"nvmlClocksEventReason{names[reason]}"), reason
        assert bit == getattr(pynvml, f"nvmlClocksThrottleReason{names[reason]}"), reason
    bits = [bit for _, bit in CLOCK_EVENT_REASONS]
    assert len(set(bits)) == len(bits)
