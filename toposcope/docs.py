"""``toposcope docs``: generate reference documentation from the code's own tables.

``docs/metrics.md`` is generated from the metric catalogue so that the documentation can
never drift from what the exporters publish; a test checks the committed file is current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from toposcope.catalogue import CATALOGUE
from toposcope.catalogue.dcgm_joins import equivalents_markdown, joins_markdown, labels_markdown
from toposcope.catalogue.node_exporter_equivalents import infiniband_markdown


def metrics_markdown() -> str:
    """The metric reference as Markdown, one table row per catalogue entry, by part."""
    lines = [
        "# Metric reference",
        "",
        "Generated from the catalogue in `toposcope/catalogue/` by `toposcope docs metrics "
        "--output docs/metrics.md`; do not edit by hand.",
        "",
        *labels_markdown(),
    ]
    parts: dict[str, list[str]] = {}
    for metric in CATALOGUE.values():
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "-"
        unit = metric.unit or "-"
        kind = "gauge (=1)" if metric.type == "info" else metric.type
        help_text = metric.help.replace("|", "\\|")
        parts.setdefault(metric.part, []).append(
            f"| `{metric.name}` | {kind} | {unit} | {labels} | {help_text} |"
        )
    for part, rows in parts.items():
        lines += [
            f"## {part}",
            "",
            "| metric | type | unit | labels | meaning |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    lines += joins_markdown()
    lines += equivalents_markdown()
    lines += infiniband_markdown()
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare which document to generate and where to write it."""
    parser.add_argument("document", choices=["metrics"], help="which reference to generate")
    parser.add_argument("--output", metavar="FILE", help="write here instead of stdout")


def run(args: argparse.Namespace) -> int:
    """Write the requested document."""
    text = metrics_markdown()
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
