"""Our text writer is byte-identical to prometheus_client's for every family we emit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.exporters.text_registry import client_python_text
from toposcope.catalogue import CATALOGUE
from toposcope.catalogue.model import MetricSpec
from toposcope.config import ExporterConfig, HostPaths
from toposcope.exporters.app import build_runner
from toposcope.exporters.collectors import default_table
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.exposition import FamilyWriter, RenderedFamily, render_families
from toposcope.exporters.gpu_source import attach_gpu_source, close_gpu_source


def with_samples(families: list[Metric]) -> list[Metric]:
    """``families`` with each family written straight to text (the NUMA collectors') replaced
    by the client_python family its text parses into, for client_python to render again.
    """
    out: list[Metric] = []
    for family in families:
        if isinstance(family, RenderedFamily):
            out.extend(text_string_to_metric_families(render_families([family]).decode()))
        else:
            out.append(family)
    return out


def test_escaping_and_special_values_match_client_python() -> None:
    gauge = GaugeMetricFamily("toposcope_x", 'help with \\ and\nnewline "q"', labels=["a", "b"])
    gauge.add_metric(['quote " back \\ nl \n', "z"], float("nan"))
    gauge.add_metric(["plain", ""], float("inf"))
    gauge.add_metric(["neg", "1"], -0.5)
    counter = CounterMetricFamily("toposcope_y_total", "a counter", labels=["k"])
    counter.add_metric(["v"], 12345678901234.0)
    bare = GaugeMetricFamily("toposcope_z", "no labels", value=1e-9)
    created = CounterMetricFamily("toposcope_w", "with created", labels=[], created=5.0)
    created.add_metric([], 3.0, created=7.0)
    families: list[Metric] = [gauge, counter, bare, created]
    assert render_families(families) == client_python_text(families)


def test_full_scrapes_match_client_python(hwloc_root: Callable[[str], Path]) -> None:
    for fixture in ("64amd64-4s2n4ca2co", "offline-cpu0-node0"):
        config = ExporterConfig(paths=HostPaths.under(hwloc_root(fixture)), nvml="fake")
        context = CollectorContext(config)
        attach_gpu_source(context)
        try:
            runner = build_runner(config, default_table().select(), context)
            families = [
                f
                for f in runner.collect()
                if f.name != "toposcope_scrape_collector_duration_seconds"
            ]
        finally:
            close_gpu_source(context)
        assert len(families) > 10
        # every collector writes its families as text; only the runner's own are not
        written = [f for f in families if not f.name.startswith("toposcope_scrape_collector_")]
        assert written and all(isinstance(f, RenderedFamily) for f in written)
        assert render_families(families) == client_python_text(with_samples(families))


#: Label values as they come from hosts: any text, quotes, backslashes and newlines included.
LABEL_VALUES = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ['"', "\\", "\n", 'a"b\\c\nd', ""]
)
VALUES = (
    st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 1, 999_999, 1_000_000, 2**53, 1e6, -0.0, 0.25])
)


@st.composite
def filled(draw: st.DrawFn) -> tuple[MetricSpec, list[tuple[list[str], float]]]:
    """A catalogue row and a few samples for it (possibly none)."""
    row = draw(st.sampled_from(sorted(CATALOGUE.values(), key=lambda r: r.name)))
    labels = st.lists(LABEL_VALUES, min_size=len(row.labels), max_size=len(row.labels))
    return row, draw(st.lists(st.tuples(labels, VALUES), max_size=4))


@settings(max_examples=300, deadline=None, database=None)
@given(filled())
def test_family_writer_writes_what_client_python_does_for_every_catalogue_row(
    case: tuple[MetricSpec, list[tuple[list[str], float]]],
) -> None:
    """The one way a collector writes a family gives, for any row and samples, the bytes
    client_python gives for the family ``MetricSpec.family()`` makes, and the same identity.
    """
    row, samples = case
    writer, reference = FamilyWriter(row), row.family()
    for labels, value in samples:
        writer.add_metric(labels, value)
        reference.add_metric(labels, value)
    assert bool(writer) == bool(samples)
    for written in (writer.plain(), writer.rendered()):
        assert (written.name, written.type) == (reference.name, reference.type)
        assert render_families([written]) == client_python_text([reference])
