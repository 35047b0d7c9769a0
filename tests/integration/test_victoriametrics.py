"""The scale-out path end to end: simulated nodes -> a real Prometheus -> ``remote_write`` ->
a real single-node VictoriaMetrics, and ``toposcope advise`` reading each of the two PromQL
APIs in turn. Over the same samples, at the same evaluation time and window, both must give
the same recommendations (docs/scale-out.md).

Both backends must hold the same data range for that to hold: the evaluation time is chosen
so that every series was scraped for longer than the window (Prometheus' ``rate()``
extrapolates and VictoriaMetrics' does not, so a window reaching back before the first
sample gives different rates), and the test waits until VictoriaMetrics counts exactly the
samples Prometheus counts in that window.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.procs import Prometheus, VictoriaMetrics, free_port, http_get, poll, running
from toposcope.cli import main

pytestmark = pytest.mark.integration

#: the advisor's look-back window; with a 1 s scrape interval, 15 samples per series
WINDOW = "15s"
WINDOW_SECONDS = 15.0
#: seconds of data beyond the window, so that every series starts before the window does
MARGIN_SECONDS = 2.0
NODES = 10
#: every raw sample of every toposcope series in the window: "the same data" on both
SAMPLES = f'{{__name__=~"toposcope_.+"}}[{WINDOW}]'

Samples = dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]


def advise(url: str, at: float, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    """``toposcope advise --prometheus URL --format json`` in this process; the report."""
    capsys.readouterr()
    argv = ["advise", "--prometheus", url, "--window", WINDOW, "--at", f"{at:.3f}"]
    code = main([*argv, "--format", "json", *extra])
    captured = capsys.readouterr()
    assert code == 0, f"exit {code} (0 = the run worked): {captured.err}"
    report: dict[str, Any] = json.loads(captured.out)
    return report


def raw_samples(result: list[dict[str, Any]]) -> Samples:
    """A range-selector query's answer as ``{labels: [(timestamp, value), ...]}``."""
    return {
        tuple(sorted(series["metric"].items())): [(float(t), float(v)) for t, v in series["values"]]
        for series in result
    }


def same_data(ours: Samples, theirs: Samples) -> bool:
    """The same series with the same timestamps, and values equal to 12 significant digits.

    VictoriaMetrics stores a float as a decimal mantissa and exponent, so 41.04000000000003
    written comes back as 41.04: equal for any purpose of the advisor, not bit for bit.
    """
    if ours.keys() != theirs.keys():
        return False
    for key, points in ours.items():
        other = theirs[key]
        if [t for t, _ in points] != [t for t, _ in other]:
            return False
        if not all(
            math.isclose(a, b, rel_tol=1e-11) for (_, a), (_, b) in zip(points, other, strict=True)
        ):
            return False
    return True


def summary(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(id, kind, target)`` of every recommendation, sorted."""
    return sorted(
        (r["id"], r["kind"], json.dumps(r["target"], sort_keys=True))
        for r in report["recommendations"]
    )


def test_advisor_recommends_the_same_from_victoriametrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    targets = tmp_path / "targets.json"
    sim = [
        sys.executable, "-m", "toposcope.cli", "sim", "--scenario", "builtin:demo",
        "--listen", f"127.0.0.1:{port}", "--file-sd", str(targets),
        "--state-dir", str(tmp_path / "state"),
    ]  # fmt: skip
    with running(sim, tmp_path / "sim.log"), VictoriaMetrics(tmp_path).run() as vm:
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/ready"))
        poll(targets.exists)
        prometheus = Prometheus(
            tmp_path,
            [
                {
                    "job_name": "toposcope-sim",
                    "file_sd_configs": [{"files": [str(targets)]}],
                    "relabel_configs": [{"source_labels": ["node"], "target_label": "instance"}],
                }
            ],
            # the remote_write of docs/scale-out.md, with a 1 s batch deadline for the test
            remote_write=[
                {"url": vm.remote_write_url, "queue_config": {"batch_send_deadline": "1s"}}
            ],
        )
        with prometheus.run() as prom:
            poll(lambda: len(prom.query('up{job="toposcope-sim"} == 1')) == NODES)
            # every target has been scraped by now, so every series starts before `at - window`
            at = time.time() + WINDOW_SECONDS + MARGIN_SECONDS

            def same_samples() -> Samples | None:
                if time.time() < at:
                    return None
                expected = raw_samples(prom.query(SAMPLES, at))
                return expected if same_data(expected, raw_samples(vm.query(SAMPLES, at))) else None

            data = poll(same_samples, deadline_s=WINDOW_SECONDS + 30)
            from_prometheus = advise(prom.url, at, capsys)
            from_victoriametrics = advise(vm.url, at, capsys)
    # the same data compared: many series, each with about one sample a second
    assert len(data) > 100
    assert all(len(points) >= WINDOW_SECONDS - 2 for points in data.values())
    assert from_prometheus["run"]["source"] == prom.url
    assert from_victoriametrics["run"]["source"] == vm.url
    expected = summary(from_prometheus)
    assert expected, "the demo scenario has misplaced jobs: Prometheus must give recommendations"
    # release-idle rests on a range query (how much of the window the samples cover), pin on
    # rate(), migrate-job on both: the two APIs agree on every kind of query the advisor makes
    assert {kind for _, kind, _ in expected} >= {"pin", "migrate-job", "release-idle"}
    assert summary(from_victoriametrics) == expected
