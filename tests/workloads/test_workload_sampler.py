"""The background workload sampler: last complete sample served, age, errors, stopping."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.procs import poll
from tests.workloads.helpers import V2HOST, WL_A, WL_SERVICE, copy_host
from toposcope.config import ExporterConfig, HostPaths, WorkloadSettings
from toposcope.errors import ConfigError
from toposcope.exporters.collectors import workloads
from toposcope.exporters.collectors.workloads import WorkloadsCollector
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.exposition import RenderedFamily, render_families
from toposcope.host.processes import ProcFs
from toposcope.host.sampler import PeriodicSampler
from toposcope.sim.proc_text import stat_line

AGE = "toposcope_workload_sample_age_seconds"


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _Gate:
    """A ``take`` for the sampler that counts calls and can be held inside one."""

    def __init__(self) -> None:
        self.calls = 0
        self.hold = False
        self.fail = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> int:
        self.calls += 1
        if self.fail:
            raise OSError("cgroup filesystem went away")
        if self.hold:
            self.entered.set()
            self.release.wait(30)
        return self.calls


def test_a_scrape_gets_the_last_complete_sample_while_one_is_under_way() -> None:
    gate = _Gate()
    sampler = PeriodicSampler("test", gate, interval=60)
    first = sampler.latest()  # nothing yet: taken on demand
    assert first is not None and (first.value, first.generation) == (1, 1)
    gate.hold = True
    worker = threading.Thread(target=sampler.sample_now)
    worker.start()
    assert gate.entered.wait(30)
    during = sampler.latest()  # does not wait for the sample in progress
    assert during is first
    gate.release.set()
    worker.join(30)
    after = sampler.latest()
    assert after is not None and (after.value, after.generation) == (2, 2)


def test_a_failed_sample_is_logged_once_and_the_last_good_one_stays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = _Gate()
    sampler = PeriodicSampler("test", gate, interval=60)
    good = sampler.sample_now()
    gate.fail = True
    with caplog.at_level(logging.ERROR, logger="toposcope.exporter.sampler"):
        assert sampler.sample_now() is good
        assert sampler.sample_now() is good
    failures = [r for r in caplog.records if "cgroup filesystem went away" in r.getMessage()]
    assert len(failures) == 1
    gate.fail = False
    recovered = sampler.sample_now()
    assert recovered is not None and recovered.generation == 2


def test_the_age_follows_the_clock() -> None:
    clock = _Clock()
    sampler = PeriodicSampler("test", _Gate(), interval=60, clock=clock)
    sample = sampler.sample_now()
    assert sample is not None
    clock.now += 7.5
    assert sampler.age(sample) == 7.5


def test_the_thread_samples_on_its_interval_and_stops_cleanly() -> None:
    gate = _Gate()
    sampler = PeriodicSampler("test", gate, interval=0.02)
    sampler.start()
    poll(lambda: gate.calls >= 3, 30, 0.01, what="three background samples")
    assert sampler.stop(30)
    assert not sampler.running
    calls = gate.calls
    sampler.start()  # a stopped sampler stays stopped
    assert not sampler.running and gate.calls == calls


def test_a_sampler_needs_a_positive_interval() -> None:
    with pytest.raises(ValueError, match="positive interval"):
        PeriodicSampler("test", _Gate(), interval=0)
    with pytest.raises(ConfigError, match="sample interval"):
        WorkloadSettings(sample_interval=-1)


def _background(root: Path) -> tuple[WorkloadsCollector, CollectorContext]:
    config = ExporterConfig(
        paths=HostPaths.under(root), workloads=WorkloadSettings(sample_interval=3600)
    )
    ctx = CollectorContext(config)
    collector = workloads.ENTRY.factory(ctx)
    assert isinstance(collector, WorkloadsCollector)
    return collector, ctx


def _parsed(text: bytes) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``{sample name: {sorted labels: value}}`` of an exposition."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[key] = sample.value
    return found


def test_background_mode_serves_the_same_series_as_a_scrape_that_reads_itself() -> None:
    collector, ctx = _background(V2HOST)
    assert ctx.background == [collector]
    inline = ExporterConfig(paths=HostPaths.under(V2HOST))
    direct = workloads.ENTRY.factory(CollectorContext(inline))
    try:
        served = list(collector.collect())
        assert all(isinstance(f, RenderedFamily) for f in served if f.name != AGE)
        assert collector.sampler is not None and collector.sampler.running
        ours = _parsed(render_families(served))
        theirs = _parsed(render_families(direct.collect()))
        assert ours.pop(AGE)[()] >= 0
        assert theirs.pop(AGE)[()] == 0
        assert ours == theirs
        assert any(dict(k)["workload"] == WL_A for k in ours["toposcope_workload_threads"])
    finally:
        assert ctx.stop_background()
    assert not collector.sampler.running


def test_a_process_gone_after_the_sample_leaves_the_next_one(tmp_path: Path) -> None:
    root = copy_host(V2HOST, tmp_path)
    collector, ctx = _background(root)
    assert collector.sampler is not None
    assert collector.sampler.stop()  # driven by hand below, never by its thread
    clock = _Clock()
    collector.sampler.clock = clock
    try:
        first = _parsed(render_families(collector.collect()))
        assert any(dict(k)["workload"] == WL_SERVICE for k in first["toposcope_workload_info"])
        shutil.rmtree(root / "proc" / "3001")
        clock.now += 4.0
        served = _parsed(render_families(collector.collect()))
        assert served[AGE][()] == 4.0  # the last complete sample, still with the process
        assert any(dict(k)["workload"] == WL_SERVICE for k in served["toposcope_workload_info"])
        collector.sampler.sample_now()
        later = _parsed(render_families(collector.collect()))
        assert later[AGE][()] == 0.0
        names = {dict(k)["workload"] for k in later["toposcope_workload_info"]}
        assert WL_SERVICE not in names and WL_A in names
    finally:
        ctx.stop_background()


def test_a_scrape_that_reads_itself_says_its_sample_is_fresh() -> None:
    collector = workloads.ENTRY.factory(CollectorContext(ExporterConfig(HostPaths.under(V2HOST))))
    assert _parsed(render_families(collector.collect()))[AGE] == {(): 0.0}


def test_a_single_threaded_process_is_read_from_its_own_stat(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "stat").write_text(
        stat_line(7, "solo", ppid=1, utime=300, stime=100, starttime=55, processor=3)
    )
    threads = ProcFs(proc, clock_ticks=100).threads(7)  # no task/ directory at all
    assert threads.ppid == 1 and threads.comm == "solo"
    assert threads.samples == [(7, 55, 4.0, 3)]
    (proc / "8" / "task" / "9").mkdir(parents=True)
    (proc / "8" / "stat").write_text(
        stat_line(8, "duo", ppid=1, utime=5, stime=0, starttime=60, processor=0, num_threads=2)
    )
    (proc / "8" / "task" / "9" / "stat").write_text(
        stat_line(9, "duo", ppid=1, utime=200, stime=0, starttime=61, processor=2)
    )
    assert ProcFs(proc, clock_ticks=100).threads(8).samples == [(9, 61, 2.0, 2)]
