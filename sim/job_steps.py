"""Each simulated job's step counter: what a training job's own metrics endpoint publishes.

A real training or serving job counts its steps (optimizer steps, request batches) and
publishes the count; a user tells the advisor to judge moved jobs by it with
``--progress-metric``. The simulator does the same for every job that has a throughput
(notebooks have none): ``toposcope_sim_job_steps_total{workload}``, served on the
simulator's ``/metrics`` beside its queue families and alone on ``/jobs/metrics`` (a
scrape job of its own, as a job's exporter would be). The truth stays on ``/truth/metrics``:
the counter is a measurement of it, with the noise a real step timer has.

**Step.** One step is :data:`STEP_SECONDS` seconds of the job's work at its base rate, so a
job slowed down by ``s`` (the performance model's total slowdown) makes ``1 / (STEP_SECONDS
* s)`` steps per second: the counter's rate is proportional to the job's true throughput.
Steps advance in the clock's counter time, like every other counter of the simulator, and
not while the job is paused (a checkpoint-restore) or stalled.

**Noise.** Each step's duration varies: its coefficient of variation is
:data:`STEP_JITTER` (data-loader hiccups, collective stragglers). Over an interval in which
``n`` steps are expected, the count is ``n`` plus a normal deviation of ``STEP_JITTER *
sqrt(n)`` (the central-limit sum of ``n`` jittered steps), never below zero, drawn from a
hash of the job's name and the interval's end (reproducible, no shared random state). The
published value is the whole steps done (``floor``), so a short window also shows the
quantisation of a real counter: one step in ``n``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator

from prometheus_client.core import Metric

from toposcope.catalogue import spec
from toposcope.exporters.exposition import render_families

#: seconds of a job's work at its base rate that make one step
STEP_SECONDS = 0.25
#: coefficient of variation of one step's duration
STEP_JITTER = 0.10
#: how far (standard deviations) one interval's deviation may go
MAX_DEVIATION = 4.0
#: the counter's family in the catalogue
FAMILY = "toposcope_sim_job_steps_total"


def _normal(name: str, until: float) -> float:
    """A standard normal deviate from a hash of ``name`` and ``until`` (Box-Muller)."""
    digest = hashlib.blake2b(f"{name}\0{until!r}".encode(), digest_size=16).digest()
    first = (int.from_bytes(digest[:8], "big") + 1) / 2.0**64
    second = int.from_bytes(digest[8:], "big") / 2.0**64
    deviate = math.sqrt(-2.0 * math.log(first)) * math.cos(2.0 * math.pi * second)
    return max(-MAX_DEVIATION, min(MAX_DEVIATION, deviate))


def steps_in(name: str, seconds: float, slowdown: float, until: float) -> float:
    """The steps job ``name`` makes in ``seconds`` of counter time ending at ``until`` while
    slowed down by ``slowdown`` (module docstring: expected count plus the step timer's
    noise; 0 for a stalled job or an empty interval).
    """
    if seconds <= 0 or not math.isfinite(slowdown) or slowdown <= 0:
        return 0.0
    expected = seconds / (STEP_SECONDS * slowdown)
    noise = STEP_JITTER * math.sqrt(expected) * _normal(name, until)
    return max(0.0, expected + noise)


def steps_family(counts: Iterable[tuple[str, float]]) -> Metric:
    """The step counter family of ``(workload, steps done)`` pairs (whole steps)."""
    family = spec(FAMILY).family()
    for name, steps in sorted(counts):
        family.add_metric([name], float(math.floor(steps)))
    return family


def render_steps(counts: Iterable[tuple[str, float]]) -> bytes:
    """``/jobs/metrics``: the step counters alone, in the Prometheus text format."""

    def families() -> Iterator[Metric]:
        yield steps_family(counts)

    return render_families(families())
