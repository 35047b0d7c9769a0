"""``toposcope dashboards export DIR``: write the Grafana dashboards' JSON files.

The files are the committed ``json/*.json`` shipped inside the package (package data), so a
``pip install`` user has them without cloning the repository or installing the Grafana SDK
that generates them. Each dashboard picks its Prometheus data source, cluster and job through
template variables; import them into Grafana or point a dashboard provider at DIR.
``--check`` writes nothing and exits 1 when a file in DIR differs.
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from toposcope.errors import UsageError
from toposcope.exportfiles import add_export_parser, write_or_check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``toposcope dashboards export`` and its options."""
    add_export_parser(
        parser,
        "dashboards_command",
        "write the dashboards' JSON files into DIR",
        "write the Grafana dashboards' JSON files into DIR",
    )


def packaged_dashboards() -> dict[str, str]:
    """File name -> JSON text of every dashboard shipped in the package."""
    folder = resources.files(__package__ or "toposcope.dashboards.grafana").joinpath("json")
    found = {
        item.name: item.read_text(encoding="utf-8")
        for item in folder.iterdir()
        if item.name.endswith(".json")
    }
    if not found:
        raise UsageError("this installation carries no dashboard JSON (a broken package?)")
    return dict(sorted(found.items()))


def run(args: argparse.Namespace) -> int:
    """Write (or compare) the dashboards; 1 when ``--check`` finds a stale file."""
    return write_or_check(
        Path(args.directory), packaged_dashboards(), "toposcope dashboards export", args.check
    )
