"""``promtool check metrics`` accepts a full scrape of our exporter, with no exemptions."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from toposcope.cli import main
from tests.procs import require_binary

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
