"""Counter rates of series that lived only part of the window read right through the loader.

A history of five workloads' CPU counters at a constant 2 cores, scraped every 15 s, is
backfilled into a real Prometheus by ``promtool`` (and imported into a real VictoriaMetrics):
one counting for an hour, one started 60 s into the 5 m window, one first seen half a second
before the window's end, one that ran for an hour and ended 3 minutes into the window, and
one that started 60 s into the window and ended 60 s before its end. ``rate()`` alone reads
the young one at about 1.6 cores and the ended ones at about 1.25 (it divides by the whole
window); the loader divides by the time each series was sampled in the window.
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
from toposcope.devtools.procs import instant_query

sys.path.insert(0, str(REPO / "bench"))

import advisor_backends
from advisor_history import History

#: the evaluation time, not a multiple of the age subquery's step (2.5 s for a 5 m window)
END = 1_700_000_001.0
WINDOW = "5m"
SCRAPE_S = 15
CORES = 2.0
METRIC = "toposcope_workload_cpu_seconds_total"
#: workload -> when its counter's first and last samples were taken (each counts from 0 then)
LIVES = {
    "old": (END - 3600, END),
    "young": (END - 240, END),
    "newborn": (END - 0.5, END),
    "ended": (END - 3600, END - 120),
    "brief": (END - 240, END - 60),
}


def _samples(start: float, stop: float = END) -> list[float]:
    """Scrape times of a counter first seen at ``start``, every 15 s, and at ``stop``."""
    times = [start + i * SCRAPE_S for i in range(int((stop - start) // SCRAPE_S) + 1)]
    return times if times[-1] == stop else [*times, stop]


def _write_history(directory: Path) -> History:
    """The counters and one build-info series, as OpenMetrics and as Prometheus text."""
    info = [f'toposcope_exporter_build_info{{node="n1"}} 1 {t:.3f}' for t in _samples(END - 3600)]
    counters = [
        f'{METRIC}{{node="n1",workload="{name}",numa_node="0"}} {CORES * (t - start):g} {t:.3f}'
        for name, (start, stop) in LIVES.items()
        for t in _samples(start, stop)
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
        "rate-age", openmetrics, prometheus_text, END - 3600, END, SCRAPE_S, 241, 1, len(LIVES),
        len(LIVES) + 1, len(lines), openmetrics.stat().st_size, 0.0,
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


def _loaded_rates(url: str, at: float = END, window_text: str = WINDOW) -> dict[str, float]:
    """CPU cores per workload as the advisor's loader reads them at ``at``."""
    window = Window.parse(window_text, end=at)
    data = load_all(PrometheusLoader(url), window, queries(names=["workload-cpu"]))
    assert not data.notes
    return {s.labels["workload"]: s.value for s in data.samples("workload-cpu")}


def _plain_rates(url: str, at: float = END) -> dict[str, float]:
    """What ``rate()`` over the window alone answers per workload at ``at``."""
    found = instant_query(url, f"rate({METRIC}[{WINDOW}])", at)
    return {r["metric"]["workload"]: float(r["value"][1]) for r in found}


def test_plain_rate_under_reports_counters_that_lived_part_of_the_window(
    prometheus: advisor_backends.Loaded,
) -> None:
    plain = _plain_rates(prometheus.url)
    assert plain["young"] == pytest.approx(1.6, rel=0.03)
    assert plain["ended"] < 0.65 * CORES
    assert plain["brief"] < 0.65 * CORES
    assert plain["old"] == pytest.approx(CORES, rel=1e-9)


def test_a_counter_started_inside_the_window_reads_its_rate(
    prometheus: advisor_backends.Loaded,
) -> None:
    assert _loaded_rates(prometheus.url)["young"] == pytest.approx(CORES, rel=0.05)


@pytest.mark.parametrize("after_last_sample", [0.0, 7.0, 14.0])
def test_a_counter_older_than_the_window_reads_as_rate_does(
    prometheus: advisor_backends.Loaded, after_last_sample: float
) -> None:
    at = END + after_last_sample
    loaded = _loaded_rates(prometheus.url, at)["old"]
    assert loaded == pytest.approx(_plain_rates(prometheus.url, at)["old"], rel=1e-9)


def test_a_counter_that_ended_inside_the_window_reads_its_rate(
    prometheus: advisor_backends.Loaded,
) -> None:
    assert _loaded_rates(prometheus.url)["ended"] == pytest.approx(CORES, rel=0.05)


def test_a_counter_started_and_ended_inside_the_window_reads_its_rate(
    prometheus: advisor_backends.Loaded,
) -> None:
    assert _loaded_rates(prometheus.url)["brief"] == pytest.approx(CORES, rel=0.05)


def test_counters_that_ended_before_the_lookback_read_their_rates(
    prometheus: advisor_backends.Loaded,
) -> None:
    rates = _loaded_rates(prometheus.url, END + 600, "1h")
    assert {name: rates[name] for name in ("old", "young", "ended", "brief")} == pytest.approx(
        dict.fromkeys(("old", "young", "ended", "brief"), CORES), rel=0.05
    )


def test_a_counter_first_seen_after_the_last_age_point_is_kept(
    prometheus: advisor_backends.Loaded,
) -> None:
    step = Window.parse(WINDOW).step_seconds(AGE_POINTS)
    assert END % step > END - LIVES["newborn"][0], "the newborn must follow the last point"
    assert 0 < _loaded_rates(prometheus.url)["newborn"] <= CORES


def test_victoriametrics_reads_the_same_rates(history: History, tmp_path: Path) -> None:
    require_binary("victoria-metrics")
    with advisor_backends.victoriametrics(history, tmp_path) as loaded:
        rates = _loaded_rates(loaded.url)
    assert rates["young"] == pytest.approx(CORES, rel=0.05)
    assert rates["old"] == pytest.approx(CORES, rel=0.01)
    assert rates["ended"] == pytest.approx(CORES, rel=0.05)
    assert rates["brief"] == pytest.approx(CORES, rel=0.05)
    assert 0 < rates["newborn"] <= CORES
