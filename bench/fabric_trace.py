"""The fabric trace replay's inputs: a tree fabric and a seeded job trace with a published mix.

* :func:`read_mix` reads a job-size and run-time distribution (``sim/traces/helios_mix.csv``:
  the SenseTime Helios traces' CDFs, source and licence in the file's header): the share of
  jobs asking for at most 1, 2, 4 ... 64 GPUs, and of jobs running at most 1, 2, 4 ... seconds.
* :func:`generate` draws jobs from it: Poisson arrivals whose rate gives an offered GPU load
  (``load`` x the fabric's GPUs on average), each job's GPU count from the size CDF (a size
  between two listed points is taken as the upper one: powers of two, as jobs ask for them)
  and its run time at its best placement by inverting the run-time CDF, log-linear between
  points, kept within [:data:`MIN_RUN_S`, :data:`MAX_RUN_S`] (the shortest Helios jobs are
  mostly failed starts, the longest ran for weeks). Size and run time are drawn
  independently. A job of more GPUs than a node has is a gang of whole nodes.
* :func:`build_fabric` builds a three-level tree (nodes under leaves, leaves under pods'
  spines, pods under a core) as a :class:`~toposcope.fabric.model.Fabric`.

The same seed gives the same jobs on every platform (``random.Random``).
"""

from __future__ import annotations

import bisect
import csv
import itertools
import math
import random
from dataclasses import dataclass
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.fabric.model import Fabric, Switch, assemble

#: the published mix the replay draws from by default
DEFAULT_MIX = Path(__file__).resolve().parent.parent / "sim" / "traces" / "helios_mix.csv"
MIN_RUN_S = 60.0
MAX_RUN_S = 3 * 86400.0
#: the largest job the replay draws (GPUs)
MAX_JOB_GPUS = 64


@dataclass(frozen=True)
class Mix:
    """A size CDF (GPUs, cumulative share in [0, 1]) and a run-time CDF (seconds, share)."""

    sizes: tuple[tuple[int, float], ...]
    runs: tuple[tuple[float, float], ...]

    def mean_gpus(self) -> float:
        """The expected GPUs of one job."""
        total, below = 0.0, 0.0
        for gpus, share in self.sizes:
            total += gpus * (share - below)
            below = share
        return total / below

    def mean_run_s(self) -> float:
        """The expected run time of one job between the clip bounds (numerically)."""
        steps = 2000
        return sum(self.run_at((i + 0.5) / steps) for i in range(steps)) / steps

    def run_at(self, u: float) -> float:
        """The run time at quantile ``u`` of the part of the CDF within the clip bounds."""
        low, high = self._cdf(MIN_RUN_S), self._cdf(MAX_RUN_S)
        target = low + u * (high - low)
        shares = [s for _, s in self.runs]
        at = min(max(bisect.bisect_left(shares, target), 1), len(self.runs) - 1)
        (x0, s0), (x1, s1) = self.runs[at - 1], self.runs[at]
        if s1 <= s0:
            return x1
        frac = (target - s0) / (s1 - s0)
        return math.exp(math.log(x0) + frac * (math.log(x1) - math.log(x0)))

    def _cdf(self, seconds: float) -> float:
        for (x0, s0), (x1, s1) in itertools.pairwise(self.runs):
            if x0 <= seconds <= x1:
                return s0 + (s1 - s0) * math.log(seconds / x0) / math.log(x1 / x0)
        return self.runs[-1][1] if seconds > self.runs[-1][0] else self.runs[0][1]

    def gpus_at(self, u: float) -> int:
        """The GPU count at quantile ``u`` of the size CDF."""
        top = self.sizes[-1][1]
        for gpus, share in self.sizes:
            if u * top <= share:
                return gpus
        return self.sizes[-1][0]


@dataclass(frozen=True)
class FabricJob:
    """One job of the trace: name, arrival, GPUs and run time at its tightest placement."""

    name: str
    submit_time: float
    gpus: int
    duration: float


def read_mix(path: Path) -> Mix:
    """The mix of ``path`` (``quantity,at_most,cdf_percent`` rows; ``#`` lines are comments).

    A :class:`ConfigError` names the line when a row is malformed, a CDF does not rise, or
    a size is above :data:`MAX_JOB_GPUS`.
    """
    sizes: list[tuple[int, float]] = []
    runs: list[tuple[float, float]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    for number, row in enumerate(csv.DictReader(lines), start=2):
        try:
            quantity = row["quantity"]
            at_most, share = float(row["at_most"]), float(row["cdf_percent"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"{path}: data row {number}: want quantity,at_most,cdf_percent"
            ) from None
        if not (0 < at_most < math.inf and 0 <= share <= 100):
            raise ConfigError(f"{path}: data row {number}: value out of range")
        if quantity == "gpus":
            if at_most != int(at_most) or at_most > MAX_JOB_GPUS:
                raise ConfigError(f"{path}: data row {number}: GPUs must be 1 to {MAX_JOB_GPUS}")
            sizes.append((int(at_most), share / 100))
        elif quantity == "duration_s":
            runs.append((at_most, share / 100))
        else:
            raise ConfigError(f"{path}: data row {number}: unknown quantity {quantity[:40]!r}")
    for name, points in (("gpus", sizes), ("duration_s", runs)):
        if len(points) < 2 or any(
            b[0] <= a[0] or b[1] < a[1] for a, b in itertools.pairwise(points)
        ):
            raise ConfigError(f"{path}: {name} needs two or more rising points")
    return Mix(tuple(sizes), tuple(runs))


def generate(mix: Mix, seed: int, days: float, total_gpus: int, load: float) -> list[FabricJob]:
    """Jobs arriving over ``days`` whose GPU demand is about ``load`` x ``total_gpus``."""
    if days <= 0 or total_gpus < 1 or not 0 < load <= 10:
        raise ConfigError("days must be above 0, total_gpus at least 1, load in (0, 10]")
    rng = random.Random(seed)
    rate = load * total_gpus / (mix.mean_gpus() * mix.mean_run_s())
    jobs: list[FabricJob] = []
    now, end = 0.0, days * 86400.0
    while True:
        now += rng.expovariate(rate)
        if now >= end:
            return jobs
        gpus = mix.gpus_at(rng.random())
        run = mix.run_at(rng.random())
        jobs.append(FabricJob(f"job-{len(jobs):05d}", round(now, 1), gpus, round(run, 1)))


@dataclass(frozen=True)
class Shape:
    """A tree fabric's shape: pods under one core, leaves per pod, nodes per leaf, GPUs per
    node.
    """

    pods: int = 2
    leaves: int = 4
    nodes: int = 32
    gpus: int = 8

    @property
    def total_gpus(self) -> int:
        """Every GPU of the fabric."""
        return self.pods * self.leaves * self.nodes * self.gpus


def parse_shape(text: str) -> Shape:
    """A :class:`Shape` from ``PODSxLEAVESxNODESxGPUS`` (``2x4x32x8``)."""
    parts = text.lower().split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 4 or not all(1 <= v <= 256 for v in values):
        raise ConfigError(f"--fabric-shape: want PODSxLEAVESxNODESxGPUS, each 1-256, not {text!r}")
    shape = Shape(*values)
    if shape.pods * shape.leaves * shape.nodes > 8192:
        raise ConfigError("--fabric-shape: at most 8192 nodes")
    return shape


def build_fabric(shape: Shape) -> tuple[Fabric, dict[str, int]]:
    """The fabric of ``shape`` and each node's GPU count. Nodes are named so that name order
    is leaf order (``p1-l2-n07``): first-fit by name fills a leaf before the next.
    """
    switches: list[Switch] = []
    gpus: dict[str, int] = {}
    spines: list[str] = []
    for p in range(1, shape.pods + 1):
        leaves: list[str] = []
        for leaf in range(1, shape.leaves + 1):
            nodes = tuple(f"p{p}-l{leaf}-n{n:02d}" for n in range(1, shape.nodes + 1))
            gpus.update(dict.fromkeys(nodes, shape.gpus))
            name = f"leaf-p{p}-{leaf}"
            switches.append(Switch(name, level=0, nodes=nodes))
            leaves.append(name)
        spine = f"spine-p{p}"
        switches.append(Switch(spine, level=1, switches=tuple(leaves)))
        spines.append(spine)
    switches.append(Switch("core", level=2, switches=tuple(spines)))
    return assemble(switches), gpus
