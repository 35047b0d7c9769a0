"""The pcie_link collector: each GPU's PCIe link speed and width from sysfs, and the
advisor pricing a pair by a link that trained down.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.exporters.text_registry import parsed
from toposcope.cli import main
from toposcope.config import ExporterConfig, HostPaths
from toposcope.exporters.app import build_runner
from toposcope.exporters.collectors import default_table
from toposcope.sim.fsgen import write_topology_sysfs
from toposcope.sim.templates import builtin_template
from toposcope.topology.pcie_link import parse_speed, parse_width, read_pcie_link


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    write_topology_sysfs(tmp_path, builtin_template("pcie-4gpu").topology)
    return tmp_path / "sys"


def gpu_dirs(sysfs: Path) -> list[Path]:
    """The PCI directories of the tree's GPUs (class 0x03xx), by bus id."""
    devices = sysfs / "bus" / "pci" / "devices"
    return sorted(d for d in devices.iterdir() if (d / "class").read_text().startswith("0x03"))


def link(entry: Path, speed: str, width: str, now_speed: str, now_width: str) -> None:
    for name, text in (
        ("max_link_speed", speed),
        ("max_link_width", width),
        ("current_link_speed", now_speed),
        ("current_link_width", now_width),
    ):
        (entry / name).write_text(text + "\n")


def scrape(sysfs: Path) -> dict[str, float]:
    config = ExporterConfig(paths=HostPaths.from_options(sysfs=str(sysfs)), nvml="off")
    runner = build_runner(config, default_table().select(["pcie_link"]))
    found: dict[str, float] = {}
    for family in parsed(runner.collect()):
        for sample in family.samples:
            if sample.name.startswith("toposcope_gpu_pcie_link"):
                key = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{key}}}"] = sample.value
    return found


def test_sysfs_speeds_and_widths_parse_as_the_kernel_writes_them() -> None:
    assert parse_speed("16.0 GT/s PCIe\n") == 16.0
    assert parse_speed("8 GT/s") == 8.0 and parse_speed("2.5 GT/s PCIe") == 2.5
    assert parse_speed("Unknown") is None and parse_speed("") is None
    assert parse_width("16\n") == 16
    assert parse_width("0") is None and parse_width("64") is None and parse_width("x16") is None


def test_each_gpu_publishes_its_link_the_most_and_now(sysfs: Path) -> None:
    first, second, *_ = gpu_dirs(sysfs)
    link(first, "16.0 GT/s PCIe", "16", "2.5 GT/s PCIe", "16")
    link(second, "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "8")
    found = scrape(sysfs)
    speed = "toposcope_gpu_pcie_link_speed_transfers_per_second"
    width = "toposcope_gpu_pcie_link_width_lanes"
    assert found[f"{speed}{{gpu=0,pci_bus_id={first.name},state=max}}"] == 16e9
    assert found[f"{speed}{{gpu=0,pci_bus_id={first.name},state=current}}"] == 2.5e9
    assert found[f"{width}{{gpu=1,pci_bus_id={second.name},state=current}}"] == 8
    assert not any("gpu=2" in key for key in found)  # no link files: absent, never 0


def test_a_tree_without_link_files_publishes_nothing(sysfs: Path) -> None:
    assert scrape(sysfs) == {}


def test_a_bus_id_of_another_form_reads_nothing(sysfs: Path) -> None:
    assert not read_pcie_link(sysfs, "../../../etc").known()


def test_the_advisor_prices_a_pair_by_a_link_that_trained_down(
    sysfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, *_ = gpu_dirs(sysfs)
    link(first, "16.0 GT/s PCIe", "16", "16.0 GT/s PCIe", "4")
    argv = ["--log-level", "error", "exporter", "--root", str(sysfs.parent), "--print"]
    assert main([*argv, "--nvml", "fake:pcie-4gpu", "--hostname", "n1"]) == 0
    scraped = sysfs.parent / "scrape.txt"
    scraped.write_text(capsys.readouterr().out)
    source = ["--scrape", f"n1=file://{scraped}", "--format", "json", "--top", "6"]
    assert main(["place", "--gpus", "2", *source]) == 0
    ranked = json.loads(capsys.readouterr().out)
    assert ranked[0]["gpus"] == [2, 3]  # the switch pair (0, 1) lost to the narrow link
    narrow = next(p for p in ranked if p["gpus"] == [0, 1])
    assert narrow["worst_link"] == "PIX" and "x4" in narrow["price_detail"]
    assert narrow["link_factor"] > ranked[0]["link_factor"]
