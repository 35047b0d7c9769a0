"""Series whose names break the naming rules, and scrape targets that cannot be told apart.

A node label such as ``127.0.0.1:19999/stolen?`` or a workload name holding terminal
escapes is dropped where it enters the advisor (the loaders), counted and logged once,
and the rest of the analysis goes on; two unnamed ``--scrape`` targets on one host:port are
refused instead of one of them silently vanishing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.advisor.conftest import ExporterScrape
from tests.advisor.fakes import ExpositionPrometheus, FakeServer
from tests.advisor.hostile import HOSTILE_NODE, TERMINAL, renamed_workloads, with_labels
from toposcope.advisor.loaders import (
    PrometheusLoader,
    ScrapeLoader,
    ScrapeTarget,
    Window,
    load_all,
    queries,
)
from toposcope.advisor.loaders.screen import MAX_LOGGED
from toposcope.advisor.model_builder import build_model
from toposcope.advisor.policies import build
from toposcope.advisor.runner import advise
from toposcope.cli import main

LOGGER = "toposcope.advisor.loaders"


def test_the_scraper_drops_a_hostile_node_and_advises_on_the_others(
    exporter_scrape: ExporterScrape, caplog: pytest.LogCaptureFixture
) -> None:
    good = exporter_scrape.text.encode()
    evil = with_labels(exporter_scrape.text, node=HOSTILE_NODE).encode()
    with (
        FakeServer(lambda r: (200, good)).run() as one,
        FakeServer(lambda r: (200, evil)).run() as two,
        caplog.at_level(logging.WARNING, logger=LOGGER),
    ):
        targets = [ScrapeTarget.parse(f"n1={one.url}/metrics"), ScrapeTarget(f"{two.url}/metrics")]
        data = load_all(ScrapeLoader(targets), Window.parse("1h"), queries())
    assert two.requests  # the hostile exporter was read, its series left out
    model = build_model(data)
    assert list(model.nodes) == ["n1"]
    report = advise(model, build(), min_gain=0.0)
    assert any(r.kind == "pin" for r in report.recommendations)
    assert HOSTILE_NODE not in json.dumps(report.to_dict()["recommendations"])
    assert data.dropped_series["invalid_node_name"] > 10  # every series of that exporter
    assert len([r for r in caplog.records if HOSTILE_NODE in r.getMessage()]) == 1
    assert any("invalid_node_name" in note for note in data.notes)


def test_the_promql_loader_drops_a_bad_workload_name_and_keeps_its_node(
    exporter_scrape: ExporterScrape, caplog: pytest.LogCaptureFixture
) -> None:
    names = sorted({w.name for w in exporter_scrape.tree.workloads})
    n2 = renamed_workloads(exporter_scrape.text, {names[0]: TERMINAL})
    text = with_labels(exporter_scrape.text, node="n1") + with_labels(n2, node="n2")
    labels = {"job": "toposcope", "instance": "10.1.2.3:9400"}
    with (
        FakeServer(ExpositionPrometheus(text, labels)).run() as fake,
        caplog.at_level(logging.WARNING, logger=LOGGER),
    ):
        data = load_all(PrometheusLoader(fake.url), Window.parse("1h"), queries())
    model = build_model(data)
    assert sorted(model.nodes) == ["n1", "n2"]
    on_n2 = sorted(w.name for w in model.workloads if w.node == "n2")
    assert on_n2 == names[1:]
    assert set(data.dropped_series) == {"invalid_workload_name"}
    assert "\\x1b[2J\\x07" in caplog.text and "\x1b" not in caplog.text  # logged, escaped


def test_many_bad_names_are_logged_a_bounded_number_of_times(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bad.prom"
    lines = ["# TYPE toposcope_workload_info gauge"]
    lines += [f'toposcope_workload_info{{workload="bad\\n{i}",pid="1"}} 1' for i in range(50)]
    lines += ['toposcope_workload_info{workload="good",pid="2"} 1']
    path.write_text("\n".join(lines) + "\n")
    loader = ScrapeLoader([ScrapeTarget(path.as_uri(), "n1")])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        data = load_all(loader, Window.parse("1h"), queries(names=["workload-info"]))
    assert [s.labels["workload"] for s in data.samples("workload-info")] == ["good"]
    assert data.dropped_series == {"invalid_workload_name": 50}
    assert len(caplog.records) == MAX_LOGGED + 1
    assert "40 more" in caplog.records[-1].getMessage()


def test_two_unnamed_scrapes_on_one_address_are_refused(
    exporter_scrape: ExporterScrape, capsys: pytest.CaptureFixture[str]
) -> None:
    body = exporter_scrape.text.encode()
    with FakeServer(lambda r: (200, body)).run() as fake:
        first, second = f"{fake.url}/metrics", f"{fake.url}/metrics?again=1"
        assert main(["advise", "--scrape", first, "--scrape", second]) == 2
        err = capsys.readouterr().err
        assert first in err and second in err and "NAME=URL" in err
        assert fake.requests == []  # refused before anything is read
        argv = ["advise", "--scrape", f"a={first}", "--scrape", f"b={second}"]
        assert main([*argv, "--format", "json", "--min-gain", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {r["target"]["node"] for r in report["recommendations"]} == {"a", "b"}


def test_a_scrape_name_must_be_a_host_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advise", "--scrape", "bad/name=http://127.0.0.1:1/metrics"]) == 2
    assert "is not a host name" in capsys.readouterr().err
