"""The scale benchmark's history: simulated scrapes backfilled into a real Prometheus and
imported into a real VictoriaMetrics, read back by the advisor at the history's end.

Two simulated DGX nodes, three scrape rounds a minute apart: small, but the same generator,
``promtool`` backfill and import the 1,000-node benchmark uses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.procs import require_binary
from toposcope.advisor.loaders import PrometheusLoader, Window, load_all, queries
from toposcope.devtools.procs import instant_query

sys.path.insert(0, str(REPO / "bench"))

import advisor_backends
import advisor_history

END = 1_700_000_040.0
NODES = 2
ROUNDS = 3


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> advisor_history.History:
    """Three rounds of ``dgx-misplaced`` written by the generator's own command line."""
    out = tmp_path_factory.mktemp("history")
    done = subprocess.run(
        [
            *(sys.executable, str(REPO / "bench/advisor_history.py"), "--scenario"),
            *("builtin:dgx-misplaced", "--duration", "2m", "--step", "60s"),
            *("--end", f"{END:.0f}", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = advisor_history.read_history(out)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def prometheus(
    history: advisor_history.History, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[advisor_backends.Loaded]:
    """A real Prometheus backfilled with the history by ``promtool``."""
    require_binary("promtool")
    require_binary("prometheus")
    with advisor_backends.prometheus(history, tmp_path_factory.mktemp("prom")) as loaded:
        yield loaded


def test_the_generator_reports_what_it_wrote(history: advisor_history.History) -> None:
    assert (history.nodes, history.rounds) == (NODES, ROUNDS)
    assert (history.start, history.end) == (END - 120, END)
    assert 0 < history.series <= history.samples <= ROUNDS * history.series
    text = history.openmetrics.read_text(encoding="utf-8")
    assert text.endswith("# EOF\n")
    assert "# TYPE toposcope_workload_cpu_seconds counter\n" in text
    assert text.count("# TYPE toposcope_exporter_build_info ") == 1


def test_every_round_is_one_sample_of_every_series(
    history: advisor_history.History, prometheus: advisor_backends.Loaded
) -> None:
    counts = instant_query(
        prometheus.url, "count_over_time(toposcope_exporter_build_info[2m])", END
    )
    assert sorted(c["metric"]["node"] for c in counts) == sorted(
        f"dgx-{i:02d}" for i in range(1, NODES + 1)
    )
    assert {c["value"][1] for c in counts} == {str(ROUNDS)}


def test_counters_grow_between_rounds(prometheus: advisor_backends.Loaded) -> None:
    rates = instant_query(prometheus.url, "rate(toposcope_numa_cpu_seconds_total[2m]) > 0", END)
    assert rates, "the simulated clock did not move the CPU counters between rounds"


def test_the_loader_times_every_query_at_the_history_end(
    prometheus: advisor_backends.Loaded,
) -> None:
    needs = queries()
    data = load_all(PrometheusLoader(prometheus.url), Window.parse("2m", end=END), needs)
    assert set(data.timings) == {q.name for q in needs}
    assert all(seconds >= 0 for seconds in data.timings.values())
    assert data.query_seconds == pytest.approx(sum(data.timings.values()))
    assert len(data.samples("build-info")) == NODES


def test_advise_at_the_end_logs_its_query_time(prometheus: advisor_backends.Loaded) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "toposcope.cli", "advise", "--prometheus", prometheus.url),
            *("--window", "2m", "--at", f"{END:.0f}", "--format", "json"),
            *("--log.level", "debug", "--log.format", "json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["recommendations"], "dgx-misplaced's misplaced jobs gave no recommendation"
    messages = [json.loads(line)["msg"] for line in done.stderr.splitlines() if line]
    assert any(m.startswith(f"{len(queries())} queries to {prometheus.url} in ") for m in messages)


def test_only_active_clock_events_are_sent_and_all_idle_still_counts_as_present(
    prometheus: advisor_backends.Loaded,
) -> None:
    window = Window.parse("2m", end=END)
    every = instant_query(
        prometheus.url, "avg_over_time(toposcope_gpu_clock_event_active[2m])", END
    )
    assert every and all(float(s["value"][1]) == 0 for s in every), "the sim never throttles"
    data = load_all(PrometheusLoader(prometheus.url), window, queries(names=["gpu-clock-events"]))
    assert [s.labels for s in data.samples("gpu-clock-events")] == [{}]
    assert "toposcope_gpu_clock_event_active" in data.present_metrics()


def test_victoriametrics_answers_as_prometheus_does(
    history: advisor_history.History,
    prometheus: advisor_backends.Loaded,
    tmp_path: Path,
) -> None:
    require_binary("victoria-metrics")
    exprs = [
        "sum(toposcope_workload_memory_bytes)",
        queries(names=["gpu-clock-events"])[0].promql(Window.parse("2m")),
    ]
    with advisor_backends.victoriametrics(history, tmp_path) as loaded:
        from_vm = [instant_query(loaded.url, expr, END) for expr in exprs]
    assert from_vm == [instant_query(prometheus.url, expr, END) for expr in exprs]
