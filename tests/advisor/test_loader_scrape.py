"""The embedded scraper against a real exporter's output, served over HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.advisor.conftest import ExporterScrape
from tests.advisor.fakes import FakeServer
from tests.procs import free_port
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.loaders import ScrapeLoader, ScrapeTarget, Window, load_all, queries
from toposcope.advisor.model_builder import build_model
from toposcope.advisor.runner import load_model


def test_target_parsing() -> None:
    assert ScrapeTarget.parse("http://h:9400/metrics") == ScrapeTarget("http://h:9400/metrics")
    named = ScrapeTarget.parse("gpu-7=http://h:9400/metrics?x=1")
    assert named == ScrapeTarget("http://h:9400/metrics?x=1", "gpu-7")
    assert named.instance == "h:9400"


def test_scraper_answers_the_loader_queries(exporter_scrape: ExporterScrape) -> None:
    body = exporter_scrape.text.encode()
    with FakeServer(lambda r: (200, body)).run() as fake:
        loader = ScrapeLoader([ScrapeTarget.parse(f"n1={fake.url}/metrics")])
        data = load_all(loader, Window.parse("1h"), queries())
        assert len(fake.requests) == 1  # one snapshot answers every query
    assert data.results["workload-cpu"].cumulative
    assert data.samples("gpu-utilization-samples")[0].value == 1
    assert len(data.series("gpu-utilization-history")[0].points) == 1
    model = build_model(data)
    assert list(model.nodes) == ["n1"]
    node = model.nodes["n1"]
    assert [n.id for n in node.numa_nodes] == [0, 1]
    assert node.numa(1) is not None and node.numa(1).cpus == (4, 5, 6, 7)  # type: ignore[union-attr]
    assert node.distance(0, 1) == 21
    assert len(node.gpus) == 4
    [history] = [
        h for h in data.series("gpu-utilization-history") if h.labels.get("gpu") == "0"
    ]  # the latest sample of the window, which tells a GPU in use from one just left
    assert node.gpus[0].utilization_last == history.points[-1][1]
    assert node.links[(0, 1)] == "PIX" and node.links[(0, 2)] == "SYS"
    names = {w.name for w in exporter_scrape.tree.workloads}
    assert {w.name for w in model.workloads} == names
    holder = next(w for w in exporter_scrape.tree.workloads if w.gpu_minor is not None)
    modelled = next(w for w in model.workloads if w.name == holder.name)
    assert modelled.gpus == (holder.gpu_minor,)
    assert modelled.cores_used() is None  # counters without a rate


def test_each_model_load_reads_the_targets_anew(exporter_scrape: ExporterScrape) -> None:
    """A service analyses again and again with one loader: every analysis scrapes afresh,
    while the queries of one analysis share its snapshot."""
    bodies = [exporter_scrape.text.encode(), b"# nothing exported any more\n"]
    with FakeServer(lambda r: (200, bodies[min(len(fake.requests), 2) - 1])).run() as fake:
        loader = ScrapeLoader([ScrapeTarget.parse(f"n1={fake.url}/metrics")])
        first = load_model(loader, Window.parse("1h"))
        assert len(fake.requests) == 1
        second = load_model(loader, Window.parse("1h"))
        assert len(fake.requests) == 2
    assert list(first.nodes) == ["n1"] and len(first.nodes["n1"].gpus) == 4
    assert list(second.nodes) == []


def test_unreachable_target_is_a_warning_when_others_answer(scrape_file: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    loader = ScrapeLoader([ScrapeTarget(scrape_file.as_uri(), "n1"), ScrapeTarget(dead)])
    data = load_all(loader, Window.parse("1h"), queries(names=["numa-nodes"]))
    assert len(data.samples("numa-nodes")) == 2
    assert any(dead in note for note in data.notes)


def test_all_targets_down_is_a_connection_error() -> None:
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    loader = ScrapeLoader([ScrapeTarget(dead)], timeout=2)
    with pytest.raises(AdvisorConnectionError, match=dead):
        load_all(loader, Window.parse("1h"), queries())


def test_not_prometheus_text_is_reported() -> None:
    with FakeServer(lambda r: (200, b"{{{ not metrics")).run() as fake:
        loader = ScrapeLoader([ScrapeTarget(fake.url + "/metrics")])
        with pytest.raises(AdvisorConnectionError, match="not Prometheus text"):
            loader.scrape()


def test_nan_samples_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "nan.prom"
    path.write_text(
        "# TYPE toposcope_gpu_utilization_ratio gauge\n"
        'toposcope_gpu_utilization_ratio{gpu="0"} NaN\n'
        'toposcope_gpu_utilization_ratio{gpu="1"} 0.5\n'
    )
    data = load_all(ScrapeLoader([ScrapeTarget(path.as_uri())]), Window.parse("1h"), queries())
    assert [s.labels["gpu"] for s in data.samples("gpu-utilization")] == ["1"]
    assert data.results["gpu-utilization"].dropped == 1
