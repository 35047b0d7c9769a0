"""The exporter's collectors, one module each, and the table that lists them."""

from __future__ import annotations

from toposcope.exporters.registry import CollectorTable


def default_table() -> CollectorTable:
    """A fresh table of every collector toposcope ships, in scrape order."""
    from toposcope.exporters.collectors import topology

    return CollectorTable(
        [
            topology.ENTRY,
        ]
    )
