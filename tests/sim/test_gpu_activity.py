"""GPU readings that read like NVML's: utilisation counts any kernel running (collectives
waiting on slow links included, input stalls not), and the energy counter's rate is the
power gauge's mean at every state and speed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sim.test_metrics import Samples, by, parse
from toposcope.rm import Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.model import evaluate
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.templates import builtin_template

PCIE4 = builtin_template("pcie-4gpu")
INTERVAL = 10.0
#: wall seconds after the start when the input-bound job arrives: inside the first window
ARRIVAL = 4.0
#: the input-bound job's GPU (socket 0, beside the comm-bound job's first GPU)
LOADER_GPU = 1


class HandWall:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _socket_gpus() -> tuple[int, int]:
    """A GPU of socket 0 and one of socket 1 on ``pcie-4gpu``."""
    by_package: dict[int, int] = {}
    for gpu in PCIE4.gpus:
        package = PCIE4.package_of_node(gpu.numa_node)
        assert package is not None
        by_package.setdefault(package, gpu.index)
    return by_package[0], by_package[1]


def _cluster(clock: SimClock) -> SimCluster:
    """One ``pcie-4gpu`` node: a communication-bound 2-GPU job across sockets from the start,
    and an input-bound 1-GPU job whose 8 loader threads share 1 CPU, arriving
    ``ARRIVAL`` wall seconds in (at any speed)."""
    cluster = SimCluster(clock, scheduler="none")
    cluster.add_node("gpu-01", PCIE4)
    a, b = _socket_gpus()
    comm = make_job("comm-bound", JobKind.GPU_TRAIN, gpus=2, comm_intensity=0.9,
                    input_intensity=0.0, numa_sensitivity=0.0)  # fmt: skip
    cluster.submit(comm, Allocation("gpu-01", [], [], [a, b]))
    home = PCIE4.gpu(LOADER_GPU).numa_node
    assert home is not None
    loader = make_job("input-bound", JobKind.GPU_TRAIN, gpus=1, input_intensity=0.7,
                      numa_sensitivity=0.0, submit_time=ARRIVAL * clock.speed)  # fmt: skip
    cpus = list(PCIE4.node_cpus(home)[:1])
    cluster.submit(loader, Allocation("gpu-01", cpus, [home], [LOADER_GPU]))
    return cluster


def test_model_counts_collective_kernels_as_busy_and_input_stalls_as_idle() -> None:
    a, b = _socket_gpus()
    comm = make_job("comm", JobKind.GPU_TRAIN, gpus=2, comm_intensity=0.9, input_intensity=0.0,
                    numa_sensitivity=0.0)  # fmt: skip
    perf = evaluate(comm, Allocation("n", list(PCIE4.cpus), [], [a, b]), PCIE4)
    assert perf.factors["link"] > 2.0
    assert perf.gpu_busy > 0.9  # NCCL kernels spin while the link crawls
    assert perf.gpu_compute < 0.5  # the compute kernels alone are a small share
    alone = evaluate(comm, Allocation("n", list(PCIE4.cpus), [], [a]), PCIE4)
    assert alone.gpu_busy == pytest.approx(alone.gpu_compute)  # one GPU: no collectives


@pytest.fixture(scope="module", params=[1.0, 60.0], ids=["speed-1", "speed-60"])
def scraped(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SimCluster, list[Samples]]]:
    """The node scraped three times, INTERVAL wall seconds apart; the input-bound job
    arrives inside the first window."""
    wall = HandWall()
    cluster = _cluster(SimClock(speed=request.param, wall=wall))
    exporters = SimExporters(cluster, Path(tmp_path_factory.mktemp("gpu-activity")), False)
    try:
        scrapes = [parse(exporters.scrape("gpu-01"))]
        for _ in range(2):
            wall.now += INTERVAL
            scrapes.append(parse(exporters.scrape("gpu-01")))
        yield cluster, scrapes
    finally:
        exporters.close()


def test_comm_bound_job_shows_high_utilisation_input_bound_low(
    scraped: tuple[SimCluster, list[Samples]],
) -> None:
    _, scrapes = scraped
    util = by(scrapes[1], "toposcope_gpu_utilization_ratio", "gpu")
    for gpu in _socket_gpus():
        assert util[str(gpu)] >= 0.9, util
    assert 0.0 < util[str(LOADER_GPU)] <= 0.4, util
    power = by(scrapes[1], "toposcope_gpu_power_watts", "gpu")
    half = (PCIE4.gpu_idle_watts + PCIE4.gpu_power_limit_watts) / 2
    for gpu in _socket_gpus():  # power follows the compute kernels, not the spinning ones
        assert power[str(gpu)] < half, power


def _energy_rate(scrapes: list[Samples], window: int) -> dict[str, float]:
    start, end = (
        by(scrapes[i], "toposcope_gpu_energy_joules_total", "gpu") for i in (window, window + 1)
    )
    return {gpu: (end[gpu] - start[gpu]) / INTERVAL for gpu in end}


def test_energy_rate_is_the_mean_power_in_every_state(
    scraped: tuple[SimCluster, list[Samples]],
) -> None:
    _, scrapes = scraped
    power = [by(s, "toposcope_gpu_power_watts", "gpu") for s in scrapes]
    idle = PCIE4.gpu_idle_watts
    assert power[0][str(LOADER_GPU)] == pytest.approx(idle)
    assert power[1][str(LOADER_GPU)] > idle + 5
    steady = _energy_rate(scrapes, 1)
    for gpu, watts in power[2].items():  # idle, comm-bound and input-bound GPUs alike
        assert steady[gpu] == pytest.approx(watts, rel=1e-3)
    first = _energy_rate(scrapes, 0)
    share = ARRIVAL / INTERVAL  # idle until the arrival, then the loader's power
    mean = share * idle + (1 - share) * power[1][str(LOADER_GPU)]
    assert first[str(LOADER_GPU)] == pytest.approx(mean, rel=1e-3)
    spare = (
        {str(g.index) for g in PCIE4.gpus} - {str(LOADER_GPU)} - {str(g) for g in _socket_gpus()}
    )
    for gpu in spare:
        assert first[gpu] == pytest.approx(idle, rel=1e-3) and power[2][gpu] == idle
