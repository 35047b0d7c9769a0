"""Our exposition text next to client_python's.

The collectors write their families straight to text (no client_python samples), so a test
looks their samples up the way a scraper sees them: the text parsed by client_python's own
parser (:func:`parsed`), behind a registry whose ``get_sample_value`` collects again on
every call (:func:`text_registry`). And :func:`client_python_text` is client_python's own
rendering, the reference our text is compared with.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from toposcope.exporters.exposition import render_families
from toposcope.exporters.registry import Collector


def parsed(families: Iterable[Metric]) -> list[Metric]:
    """``families`` rendered to text and parsed back by client_python, with their samples."""
    return list(text_string_to_metric_families(render_families(families).decode("utf-8")))


class Parsed:
    """``collector``'s families as client_python parses its text, collected on every call."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def collect(self) -> list[Metric]:
        """Collect, render and parse once."""
        return parsed(self.collector.collect())


def text_registry(collector: Collector) -> CollectorRegistry:
    """A registry serving ``collector``'s samples as parsed from its text."""
    registry = CollectorRegistry()
    registry.register(Parsed(collector))
    return registry


class _Fixed:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def client_python_text(families: list[Metric]) -> bytes:
    """``families`` rendered by client_python's ``generate_latest``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return generate_latest(registry)
