"""Counter rates of series younger than the window read right through the advisor's loader.

A history of three workloads' CPU counters at a constant 2 cores, scraped every 15 s, is
backfilled into a real Prometheus by ``promtool`` (and imported into a real VictoriaMetrics):
one counting for an hour, one started 60 s into the 5 m window, one first seen half a second
before the window's end. ``rate()`` alone reads the young one at about 1.6 cores (it divides
by the whole window); the loader divides by the series' age.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.procs import require_binary
from toposcope.advisor.loaders import PrometheusLoader, Window, load_all, queries
from toposcope.advisor.loaders.base import AGE_POINTS
from toposcope.procs import instant_query

sys.path.insert(0, str(REPO / "bench"))

import advisor_backends
from advisor_history import History

#: the evaluation time, not a multiple of the age subquery's step (2.5 s for a 5 m window)
END = 1_700_000_001.0
WINDOW = "5m"
SCRAPE_S = 15
CORES = 2.0
METRIC = "toposcope_workload_cpu_seconds_total"
#: workload -> when its counter's first sample was taken (each counts from 0 then)
STARTS = {"old": END - 3600, "young": END - 240, "newborn": END - 0.5}


def _samples(start: float) -> list[float]:
    """Scrape times of a counter first seen at ``start``, every 15 s, and at ``END``."""
    times = [start + i * SCRAPE_S for i in range(int((END - start) // SCRAPE_S) + 1)]
    return times if times[-1] == END else [*times, END]


def _write_history(directory: Path) -> History:
    """The counters and one build-info series, as OpenMetrics and as Prometheus text."""
    info = [f'toposcope_exporter_build_info{{node="n1"}} 1 {t:.3f}' for t in _samples(END - 3600)]
    counters = [
        f'{METRIC}{{node="n1",workload="{name}",numa_node="0"}} {CORES * (t - start):g} {t:.3f}'
        for name, start in STARTS.items()
        for t in _samples(start)
    ]
    lines = info + counters
    openmetrics = directory / "history.om"
    openmetrics.write_text(
        "# TYPE toposcope_exporter_build_info gauge\n"
        + "".join(f"{line}\n" for line in info)
        + "# TYPE toposcope_workload_cpu_seconds counter\n"
        + "".join(f"{line}\n" for line in counters)
        + "# EOF\n",
        encoding="utf-8",
    )
    prometheus_text = directory / "history.prom"
    prometheus_text.write_text(
        "".join(f"{head} {float(t) * 1000:.0f}\n" for head, t in (x.rsplit(" ", 1) for x in lines)),
        encoding="utf-8",
    )
    return History(
        "rate-age", openmetrics, prometheus_text, END - 3600, END, SCRAPE_S, 241, 1, 3,
        4, len(lines), openmetrics.stat().st_size, 0.0,
    )  # fmt: skip


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    """The three counters' hour, written once for both backends."""
    return _write_history(tmp_path_factory.mktemp("history"))


@pytest.fixture(scope="module")
def prometheus(
    history: History, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[advisor_backends.Loaded]:
    """A real Prometheus backfilled with the history."""
    require_binary("promtool")
    require_binary("prometheus")
    with advisor_backends.prometheus(history, tmp_path_factory.mktemp("prom")) as loaded:
        yield loaded


def _loaded_rates(url: str) -> dict[str, float]:
    """CPU cores per workload as the advisor's loader reads them at ``END``."""
    window = Window.parse(WINDOW, end=END)
    data = load_all(PrometheusLoader(url), window, queries(names=["workload-cpu"]))
    assert not data.notes
    return {s.labels["workload"]: s.value for s in data.samples("workload-cpu")}


def _plain_rates(url: str) -> dict[str, float]:
    """What ``rate()`` over the window alone answers per workload."""
    found = instant_query(url, f"rate({METRIC}[{WINDOW}])", END)
    return {r["metric"]["workload"]: float(r["value"][1]) for r in found}


def test_plain_rate_under_reports_the_young_counter(prometheus: advisor_backends.Loaded) -> None:
    plain = _plain_rates(prometheus.url)
    assert plain["young"] == pytest.approx(1.6, rel=0.03)
    assert plain["old"] == pytest.approx(CORES, rel=1e-9)


def test_a_counter_started_inside_the_window_reads_its_rate(
    prometheus: advisor_backends.Loaded,
) -> None:
    assert _loaded_rates(prometheus.url)["young"] == pytest.approx(CORES, rel=0.05)


def test_a_counter_older_than_the_window_reads_as_rate_does(
    prometheus: advisor_backends.Loaded,
) -> None:
    loaded = _loaded_rates(prometheus.url)["old"]
    assert loaded == pytest.approx(_plain_rates(prometheus.url)["old"], rel=1e-9)


def test_a_counter_first_seen_after_the_last_age_point_is_kept(
    prometheus: advisor_backends.Loaded,
) -> None:
    step = Window.parse(WINDOW).step_seconds(AGE_POINTS)
    assert END % step > END - STARTS["newborn"], "the newborn must follow the last point"
    assert 0 < _loaded_rates(prometheus.url)["newborn"] <= CORES


def test_victoriametrics_reads_the_same_rates(history: History, tmp_path: Path) -> None:
    require_binary("victoria-metrics")
    with advisor_backends.victoriametrics(history, tmp_path) as loaded:
        rates = _loaded_rates(loaded.url)
    assert rates["young"] == pytest.approx(CORES, rel=0.05)
    assert rates["old"] == pytest.approx(CORES, rel=0.01)
    assert 0 < rates["newborn"] <= CORES
