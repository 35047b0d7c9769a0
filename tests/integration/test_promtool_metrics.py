"""``promtool check metrics`` accepts a full scrape of our exporter, with no exemptions."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.procs import require_binary
from toposcope.cli import main

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fixture", ["64amd64-4s2n4ca2co", "offline-cpu0-node0"])
def test_scrape_passes_promtool(
    fixture: str,
    hwloc_root: Callable[[str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    promtool = require_binary("promtool")
    assert main(["exporter", "--root", str(hwloc_root(fixture)), "--nvml", "off", "--print"]) == 0
    scrape = capsys.readouterr().out
    assert "toposcope_numa_node_info" in scrape
    result = subprocess.run(
        [promtool, "check", "metrics"], input=scrape, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


#: The one lint promtool raises on purpose: GPU series keep dcgm-exporter's label names
#: (UUID, modelName, Hostname, GPU_I_ID, GPU_I_PROFILE) so that they join dcgm-exporter's.
DCGM_LABEL_LINT = re.compile(
    r"toposcope_gpu_[a-z_]+ label names should be written in 'snake_case' not 'camelCase'"
)


@pytest.mark.parametrize("nvml", ["fake", "fake:pcie-4gpu", "fake:mig", "fake:hgx-h100"])
def test_fake_gpu_scrape_passes_promtool(
    nvml: str,
    hwloc_root: Callable[[str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    promtool = require_binary("promtool")
    root = str(hwloc_root("64amd64-4s2n4ca2co"))
    assert main(["exporter", "--root", root, "--nvml", nvml, "--print"]) == 0
    scrape = capsys.readouterr().out
    assert 'toposcope_scrape_collector_success{collector="gpu"} 1.0' in scrape
    assert "toposcope_gpu_utilization_ratio{" in scrape
    result = subprocess.run(
        [promtool, "check", "metrics"], input=scrape, capture_output=True, text=True, check=False
    )
    problems = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and not DCGM_LABEL_LINT.fullmatch(line.strip())
    ]
    assert problems == [], problems
    assert result.returncode in (0, 3)
