"""``advise --sim URL``: every node of a real ``toposcope sim`` process on loopback, named as
the simulator names them, without one ``--scrape`` flag per node.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.procs import free_port, http_get, poll
from toposcope.advisor.errors import AdvisorConnectionError
from toposcope.advisor.loaders.base import Window
from toposcope.advisor.loaders.scrape import ScrapeLoader, ScrapeTarget, check_targets
from toposcope.advisor.loaders.sim_targets import node_names, sim_targets
from toposcope.advisor.runner import load_model
from toposcope.cli import main
from toposcope.errors import UsageError

XEONS = [f"xeon-0{i}" for i in range(1, 5)]


@contextlib.contextmanager
def running_sim(scenario: str, tmp: Path) -> Iterator[str]:
    """The URL of ``toposcope sim --scenario builtin:SCENARIO`` on loopback while it runs."""
    port = free_port()
    argv = [
        sys.executable, "-m", "toposcope.cli", "sim", "--scenario", f"builtin:{scenario}",
        "--listen", f"127.0.0.1:{port}", "--speed", "0", "--state-dir", str(tmp / "state"),
    ]  # fmt: skip
    with open(tmp / "sim.log", "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        poll(lambda: http_get(f"{url}/-/ready"))
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of ``toposcope sim --scenario builtin:cpu-numa`` (four Xeon nodes)."""
    with running_sim("cpu-numa", tmp_path_factory.mktemp("sim")) as url:
        yield url


def test_sim_targets_are_every_node_named_as_the_simulator_names_it(sim_url: str) -> None:
    targets = sim_targets(sim_url + "/")
    assert [t.node for t in targets] == [*XEONS, None]
    assert [t.url for t in targets] == [
        *(f"{sim_url}/nodes/{n}/metrics" for n in XEONS),
        f"{sim_url}/metrics",
    ]
    assert [t.job for t in targets] == ["scrape"] * 4 + ["toposcope-sim-cluster"]


def test_two_unnamed_targets_on_one_address_are_refused_unless_their_jobs_differ() -> None:
    node = ScrapeTarget("http://h:9850/metrics")
    with pytest.raises(UsageError, match="cannot be told apart"):
        check_targets([node, ScrapeTarget("http://h:9850/other")])
    check_targets([node, ScrapeTarget("http://h:9850/metrics", None, "toposcope-sim-cluster")])


def test_advise_sim_scrapes_every_node(
    sim_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    argv = ["advise", "--sim", sim_url, "--min-gain", "0", "--format", "json"]
    assert main([*argv, "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["run"]["source"] == f"sim:{sim_url} (4 nodes)"
    nodes = {r["target"]["node"] for r in report["recommendations"]}
    assert nodes and nodes <= set(XEONS)
    assert "scrape failed" not in capsys.readouterr().err


def test_advise_sim_sees_the_multi_node_jobs_the_simulator_publishes(tmp_path: Path) -> None:
    """The cluster page gives what no node publishes: each gang's parts, for fabric advice."""
    with running_sim("fabric-spread", tmp_path) as url:
        model = load_model(ScrapeLoader(sim_targets(url)), Window.parse("1h"))
        by_node_only = load_model(ScrapeLoader(sim_targets(url)[:-1]), Window.parse("1h"))
    assert {job: dict(parts) for job, parts in model.fabric_jobs.items()} == {
        "gpt-dp": {"fs-01": 8, "fs-03": 8},
        "moe-pp": {"fs-04": 4, "fs-06": 4},
        "t5-tp": {"fs-02": 8, "fs-05": 8},
    }
    assert not by_node_only.fabric_jobs


def test_sim_with_another_source_or_at_is_a_usage_error(
    sim_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["advise", "--sim", sim_url, "--scrape", f"{sim_url}/nodes/xeon-01/metrics"]) == 2
    assert "exactly one of --prometheus URL, --scrape URL" in capsys.readouterr().err
    assert main(["advise", "--sim", sim_url, "--at", "0"]) == 2
    assert "--at needs --prometheus" in capsys.readouterr().err
    assert main(["advise", "--sim", "ftp://127.0.0.1/"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err


def test_a_url_that_is_not_a_simulator_fails_clearly(
    sim_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["advise", "--sim", f"{sim_url}/nodes"]) == 2
    err = capsys.readouterr().err
    assert "HTTP 404 (is this a toposcope simulator?)" in err and "Traceback" not in err


def test_listed_names_are_checked_like_scrape_names() -> None:
    with pytest.raises(AdvisorConnectionError, match="node 'bad name'"):
        node_names([{"labels": {"node": "bad name"}}], "http://sim/targets.json")
    with pytest.raises(AdvisorConnectionError, match="lists no node"):
        node_names([], "http://sim/targets.json")
    with pytest.raises(AdvisorConnectionError, match="no node label"):
        node_names([{"targets": ["x:1"]}], "http://sim/targets.json")
    assert node_names(
        [{"labels": {"node": "a"}}, {"labels": {"node": "a"}}, {"labels": {"node": "b"}}], "u"
    ) == ["a", "b"]
