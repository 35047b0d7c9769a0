"""The ``toposcope`` entry point: exit codes and the generated metric reference."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import REPO, holds_any, modules_loaded_by
from toposcope.catalogue import CATALOGUE
from toposcope.cli import main
from toposcope.docs import metrics_markdown


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2


def test_unknown_option_exits_2() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["exporter", "--no-such-flag"])
    assert exited.value.code == 2


def test_missing_root_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["exporter", "--root", "/nonexistent-toposcope-root", "--print"]) == 2
    err = capsys.readouterr().err
    assert "sysfs root /nonexistent-toposcope-root/sys does not exist" in err


def test_unknown_collector_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], hwloc_root: Callable[[str], Path]
) -> None:
    root = str(hwloc_root("16amd64-8n2c"))
    assert main(["exporter", "--root", root, "--collectors", "nope", "--print"]) == 2
    assert "unknown collector 'nope'" in capsys.readouterr().err


def test_print_one_scrape(
    capsys: pytest.CaptureFixture[str], hwloc_root: Callable[[str], Path]
) -> None:
    root = str(hwloc_root("16amd64-8n2c"))
    assert main(["exporter", "--root", root, "--collectors", "topology", "--print"]) == 0
    out = capsys.readouterr().out
    assert 'toposcope_numa_node_info{cpus="0-1",numa_node="0",package="0"} 1.0' in out
    assert 'toposcope_scrape_collector_success{collector="topology"} 1.0' in out


def test_console_script_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("toposcope ")


def test_metrics_reference_is_generated_and_current() -> None:
    committed = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert committed == metrics_markdown(), "run `make docs` and commit docs/metrics.md"
    for name in CATALOGUE:
        assert f"`{name}`" in committed


def test_catalogue_names_follow_prometheus_conventions() -> None:
    for spec in CATALOGUE.values():
        assert spec.name.startswith("toposcope_")
        if spec.type == "counter":
            assert spec.name.endswith("_total"), spec.name
        else:
            assert not spec.name.endswith("_total"), spec.name
        if spec.type == "info":
            assert spec.name.endswith("_info"), spec.name
        if spec.unit:
            assert spec.unit in spec.name, spec.name
        assert spec.help.endswith("."), spec.name


HEAVY = ("dash", "plotly", "pandas", "flask", "apiflask")


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (["--version"], (*HEAVY, "toposcope.exporters", "toposcope.advisor")),
        (["exporter", "--help"], (*HEAVY, "toposcope.advisor", "toposcope.sim")),
        (["--log-level", "error", "topology", "--help"], HEAVY),
    ],
)
def test_a_command_loads_only_its_part(argv: list[str], absent: tuple[str, ...]) -> None:
    """``toposcope exporter`` must not pay for the Dash app or the advisor (memory, start-up)."""
    loaded = modules_loaded_by(argv)
    assert "toposcope.cli" in loaded
    for prefix in absent:
        assert not holds_any(loaded, prefix), prefix


def test_help_lists_every_subcommand_without_importing_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for name in ("topology", "exporter", "advise", "sim", "agent", "advisor", "dash"):
        assert name in out
