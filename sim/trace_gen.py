"""A seeded synthetic job trace shaped like Microsoft's Philly trace, for trace replay.

The public Philly trace (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters
for DNN Training Workloads", USENIX ATC 2019) is dominated by single-GPU jobs; multi-GPU
jobs ask for powers of two. The mix used here is an approximation of the paper's figures
as best we know them, not a fit to the raw data: 1 GPU 70%, 2 GPUs 12%, 4 GPUs 10%, 8 GPUs
8% (:data:`GPU_MIX`). Run times are log-normal (the paper's run-time CDF spans minutes to
days with a median around an hour): median :data:`MEDIAN_DURATION_S`, sigma
:data:`DURATION_SIGMA`, clipped to [:data:`MIN_DURATION_S`, :data:`MAX_DURATION_S`].
Arrivals are a Poisson process whose rate follows a day/night cycle (peak at midday, a
trough of :data:`NIGHT_FACTOR` of the peak at midnight). Every job belongs to one of
:data:`ACCOUNTS` (tenants, drawn with unequal weights, as virtual clusters are in Philly).

The same seed gives the same rows on every platform (``random.Random``); the rows have the
columns :func:`toposcope.sim.traces.load_trace` reads (plus ``account``).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: (GPUs, probability) of a job, after the Philly paper's job-size figures (approximate)
GPU_MIX: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.12), (4, 0.10), (8, 0.08))
#: median run time at the best placement, seconds (log-normal)
MEDIAN_DURATION_S = 3600.0
#: sigma of the log-normal run time
DURATION_SIGMA = 1.2
MIN_DURATION_S = 120.0
MAX_DURATION_S = 2 * 86400.0
#: arrival rate at midnight as a share of the midday peak
NIGHT_FACTOR = 0.4
#: tenants and their weights in the arrivals
ACCOUNTS: tuple[tuple[str, float], ...] = (
    ("vc-vision", 0.4),
    ("vc-nlp", 0.35),
    ("vc-speech", 0.25),
)
DAY_S = 86400.0


@dataclass(frozen=True)
class TraceJob:
    """One generated row: name, arrival, GPUs, run time at its best and tenant."""

    name: str
    submit_time: float
    gpus: int
    duration: float
    account: str


def _weighted(rng: random.Random, choices: Iterable[tuple[object, float]]) -> object:
    items = list(choices)
    return rng.choices([c for c, _ in items], weights=[w for _, w in items])[0]


def mean_gpu_seconds() -> float:
    """Expected GPU-seconds of one job (mean GPUs times the log-normal's clipped-free mean),
    used to turn a target load into an arrival rate.
    """
    mean_gpus = sum(g * p for g, p in GPU_MIX)
    return mean_gpus * MEDIAN_DURATION_S * math.exp(DURATION_SIGMA**2 / 2)


def generate(seed: int, days: float, total_gpus: int, load: float) -> list[TraceJob]:
    """Jobs arriving over ``days`` simulated days whose GPU demand is about ``load`` times
    ``total_gpus`` on average (see the module docstring for the distributions).
    """
    if days <= 0 or total_gpus < 1 or not 0 < load <= 10:
        raise ValueError("days must be above 0, total_gpus at least 1, load in (0, 10]")
    rng = random.Random(seed)
    mean_rate = load * total_gpus / mean_gpu_seconds()
    peak = mean_rate / ((1 + NIGHT_FACTOR) / 2)
    jobs: list[TraceJob] = []
    now = 0.0
    end = days * DAY_S
    while True:
        now += rng.expovariate(peak)
        if now >= end:
            return jobs
        phase = math.cos(2 * math.pi * (now % DAY_S - DAY_S / 2) / DAY_S)
        rate = peak * (NIGHT_FACTOR + (1 - NIGHT_FACTOR) * (1 + phase) / 2)
        if rng.random() > rate / peak:
            continue
        gpus = int(str(_weighted(rng, GPU_MIX)))
        duration = rng.lognormvariate(math.log(MEDIAN_DURATION_S), DURATION_SIGMA)
        duration = min(max(duration, MIN_DURATION_S), MAX_DURATION_S)
        account = str(_weighted(rng, ACCOUNTS))
        jobs.append(
            TraceJob(f"philly-{len(jobs):05d}", round(now, 1), gpus, round(duration, 1), account)
        )


def write_csv(jobs: Iterable[TraceJob], path: Path) -> None:
    """Write rows in the trace format the simulator reads (``job_type`` ``gpu-train``)."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["job_id", "submit_time", "gpus", "duration", "job_type", "account"])
        for job in jobs:
            writer.writerow(
                [job.name, job.submit_time, job.gpus, job.duration, "gpu-train", job.account]
            )
