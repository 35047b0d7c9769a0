"""Fixtures of the advisor tests: a real exporter scrape of a generated host tree."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from toposcope.cli import main
from toposcope.sim.fsgen import GeneratedTree, write_workload_tree


@dataclass(frozen=True)
class ExporterScrape:
    """One ``toposcope exporter --print`` output and the tree it was read from."""

    text: str
    tree: GeneratedTree


@pytest.fixture(scope="session")
def exporter_scrape(tmp_path_factory: pytest.TempPathFactory) -> ExporterScrape:
    """Scrape of the real exporter on a generated 2-socket tree with 6 workloads and the
    fake NVML's 4-GPU PCIe server (GPU0/1 on one switch, 2/3 on the other socket).
    """
    root = tmp_path_factory.mktemp("advisor-host")
    tree = write_workload_tree(root, workloads=6, seed=1)
    out = io.StringIO()
    argv = ["--log-level", "warning", "exporter", "--root", str(root), "--print"]
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--nvml", "fake:pcie-4gpu", "--hostname", "n1"]) == 0
    return ExporterScrape(out.getvalue(), tree)


@pytest.fixture
def scrape_file(tmp_path: Path, exporter_scrape: ExporterScrape) -> Path:
    """The scrape saved as a file (the scraper reads ``file:`` URLs too)."""
    path = tmp_path / "n1.prom"
    path.write_text(exporter_scrape.text)
    return path
