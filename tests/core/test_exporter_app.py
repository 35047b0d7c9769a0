"""The exporter's runner and HTTP app: self-metrics, failing collectors, collect[]/exclude[]."""

from __future__ import annotations

import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.procs import http_get
from toposcope import __version__
from toposcope.config import ExporterConfig, HostPaths
from toposcope.errors import NoDataError, UsageError
from toposcope.exporters.app import ExporterServer, build_runner, render
from toposcope.exporters.collectors import default_table
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.registry import CollectorEntry, CollectorTable
from toposcope.exporters.runner import NamedCollector, ScrapeRunner
from toposcope.serving.httpserver import parse_listen


class _Failing:
    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("toposcope_partial", "never shown", labels=["x"])
        family.add_metric(["1"], 1.0)
        yield family
        raise OSError("disk on fire")


class _NoData:
    def collect(self) -> Iterator[Metric]:
        raise NoDataError("no resctrl here")


class _Fine:
    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("toposcope_fine", "fine", value=2.0)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_failing_collector_never_fails_the_scrape() -> None:
    runner = ScrapeRunner(
        [
            NamedCollector("bad", _Failing()),
            NamedCollector("empty", _NoData()),
            NamedCollector("good", _Fine()),
        ]
    )
    values = samples(render(runner, "host-a").decode())
    assert values[("toposcope_scrape_collector_success", (("collector", "bad"),))] == 0.0
    assert values[("toposcope_scrape_collector_success", (("collector", "empty"),))] == 0.0
    assert values[("toposcope_scrape_collector_success", (("collector", "good"),))] == 1.0
    assert values[("toposcope_fine", ())] == 2.0
    # a failing collector's partial output is discarded, never served half-done
    assert not any(name == "toposcope_partial" for name, _ in values)
    assert ("toposcope_scrape_collector_duration_seconds", (("collector", "bad"),)) in values
    build_info = (("hostname", "host-a"), ("version", __version__))
    assert values[("toposcope_exporter_build_info", build_info)] == 1.0


def test_collector_that_cannot_start_is_reported_not_fatal() -> None:
    def broken_factory(ctx: CollectorContext) -> _Fine:
        raise OSError("library not found")

    table = CollectorTable(
        [
            CollectorEntry("broken", True, broken_factory, "always fails"),
            CollectorEntry("fine", True, lambda ctx: _Fine(), "works"),
        ]
    )
    runner = build_runner(ExporterConfig(), table.select())
    values = samples(render(runner, "h").decode())
    assert values[("toposcope_scrape_collector_success", (("collector", "broken"),))] == 0.0
    assert values[("toposcope_fine", ())] == 2.0


def test_table_selection_rules() -> None:
    table = CollectorTable(
        [
            CollectorEntry("a", True, lambda ctx: _Fine(), ""),
            CollectorEntry("b", False, lambda ctx: _Fine(), ""),
            CollectorEntry("c", True, lambda ctx: _Fine(), ""),
        ]
    )
    assert [e.name for e in table.select()] == ["a", "c"]
    assert [e.name for e in table.select(enable=["b"], disable=["a"])] == ["b", "c"]
    assert [e.name for e in table.select(only=["b"])] == ["b"]
    with pytest.raises(UsageError, match=r"unknown collector 'zz'.*known: a, b, c"):
        table.select(only=["zz"])


def test_default_table_has_the_host_collectors() -> None:
    names = default_table().names()
    assert names[0] == "topology"
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("text", "expected"),
    [(":9847", ("", 9847)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:80", ("::1", 80))],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["9847", "host:port", "h:70000"])
def test_parse_listen_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_listen(text)


def test_http_collect_and_exclude(hwloc_root: Callable[[str], Path]) -> None:
    config = ExporterConfig(paths=HostPaths.under(hwloc_root("16amd64-8n2c")), nvml="off")
    table = CollectorTable(
        [
            *[e for e in default_table() if e.name == "topology"],
            CollectorEntry("fine", True, lambda ctx: _Fine(), ""),
        ]
    )
    server = ExporterServer(build_runner(config, table.select()), "h", "127.0.0.1:0")
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        full = http_get(f"{base}/metrics").decode()
        assert "toposcope_numa_node_info" in full and "toposcope_fine" in full
        only = http_get(f"{base}/metrics?collect[]=fine").decode()
        assert "toposcope_fine" in only and "toposcope_numa_node_info" not in only
        without = http_get(f"{base}/metrics?exclude[]=fine").decode()
        assert "toposcope_fine" not in without and "toposcope_numa_node_info" in without
        assert b"topology" in http_get(f"{base}/")
        assert http_get(f"{base}/-/healthy") == b"OK\n"
        with pytest.raises(urllib.error.HTTPError) as bad:
            http_get(f"{base}/metrics?collect[]=nope")
        assert bad.value.code == 400
    finally:
        server.shutdown()
