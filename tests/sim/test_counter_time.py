"""Counters read per wall-clock second at any speed: ``rate()`` over a scrape interval gives
true per-second figures while the jobs run ``speed`` times faster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.sim.test_metrics import Samples, by, parse
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario

SPEED = 60.0
INTERVAL = 10.0


class HandWall:
    """A wall clock the test moves by hand (the clock's injectable time source)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def two_scrapes(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SimCluster, dict[str, tuple[Samples, Samples]]]]:
    """The demo at ``--speed 60``: cpu-01 and pcie4-02 scraped twice, 10 wall seconds apart."""
    wall = HandWall()
    cluster = build_cluster(load_scenario("builtin:demo"), SimClock(speed=SPEED, wall=wall))
    exporters = SimExporters(cluster, tmp_path_factory.mktemp("speed-state"), background=False)
    try:
        nodes = ("cpu-01", "pcie4-02")
        first = {n: parse(exporters.scrape(n)) for n in nodes}
        wall.now += INTERVAL
        second = {n: parse(exporters.scrape(n)) for n in nodes}
        assert cluster.now == pytest.approx(SPEED * INTERVAL)
        yield cluster, {n: (first[n], second[n]) for n in nodes}
    finally:
        exporters.close()


def _rates(pair: tuple[Samples, Samples], family: str, key: str, **match: str) -> dict[str, float]:
    before, after = (by(s, family, key, **match) for s in pair)
    return {k: (after[k] - before[k]) / INTERVAL for k in after}


def test_cpu_seconds_rate_is_per_wall_second_at_speed_60(
    two_scrapes: tuple[SimCluster, dict[str, tuple[Samples, Samples]]],
) -> None:
    cluster, scrapes = two_scrapes
    template = cluster.template_of("cpu-01")
    modes = ("user", "system", "idle", "nice", "iowait", "irq", "softirq", "steal")
    for numa in template.numa_ids:
        total = sum(
            _rates(scrapes["cpu-01"], "toposcope_numa_cpu_seconds_total", "mode",
                   numa_node=str(numa)).get(mode, 0.0)
            for mode in modes
        )  # fmt: skip
        assert total == pytest.approx(len(template.node_cpus(numa)), rel=0.02)
    busy = sum(
        sum(
            _rates(
                scrapes["cpu-01"], "toposcope_numa_cpu_seconds_total", "numa_node", mode=m
            ).values()
        )
        for m in ("user", "system")
    )
    expected = sum(w.perf.cpu_rate for w in cluster.node_snapshot("cpu-01").workloads)
    assert busy == pytest.approx(expected, rel=0.02)
    assert busy <= len(template.cpus)  # not 60 times the CPUs the node has


def test_gpu_energy_rate_reads_as_the_power_drawn(
    two_scrapes: tuple[SimCluster, dict[str, tuple[Samples, Samples]]],
) -> None:
    _, scrapes = two_scrapes
    energy = _rates(scrapes["pcie4-02"], "toposcope_gpu_energy_joules_total", "gpu")
    power = by(scrapes["pcie4-02"][1], "toposcope_gpu_power_watts", "gpu")
    busy = [gpu for gpu, watts in power.items() if watts > 100]
    assert busy, power
    for gpu in busy:
        assert energy[gpu] == pytest.approx(power[gpu], rel=0.01)


def test_counter_time_follows_the_wall_across_speed_changes() -> None:
    wall = HandWall()
    clock = SimClock(speed=SPEED, wall=wall)
    wall.now += 5
    assert clock.now() == pytest.approx(300.0) and clock.counter_time() == pytest.approx(5.0)
    assert clock.counter_scale() == pytest.approx(1 / SPEED)
    clock.advance(120)  # a jump of two simulated minutes is two wall seconds of counters
    assert clock.counter_time() == pytest.approx(7.0)
    clock.set_speed(0)
    clock.advance(30)  # manual: counters follow simulated seconds
    assert clock.counter_time() == pytest.approx(37.0) and clock.counter_scale() == 1.0
    clock.set_speed(2)
    wall.now += 4
    assert clock.counter_time() == pytest.approx(41.0)
    assert clock.now() == pytest.approx(300 + 120 + 30 + 8)


def test_manual_clock_counters_stay_in_simulated_seconds() -> None:
    cluster = build_cluster(load_scenario("builtin:memory-pressure"))
    cluster.advance(100)
    snap = cluster.node_snapshot("xeon-02")
    assert snap.counter_time == pytest.approx(100.0)
    expected = sum(w.perf.cpu_rate for w in snap.workloads) * 100
    assert sum(snap.cpu_busy.values()) == pytest.approx(expected, rel=1e-6)
