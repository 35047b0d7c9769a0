"""A background sampler: reads a costly source on its own interval, scrapes serve the result.

Reading every thread of hundreds of workloads takes far longer than a scrape should, so the
exporter reads them on a thread of their own every few seconds and a scrape serves the last
complete sample with its age (the metric rules allow a cache whose age is exported).
:class:`PeriodicSampler` is that thread:

* :meth:`~PeriodicSampler.latest` never waits for a sample in progress: it returns the last
  complete one. Only before the first sample exists does it take one itself (or wait for
  the one under way), so that the first scrape after start-up is complete, not empty.
* A failing sample is logged (once per distinct message) and the last good sample stays;
  the thread goes on at its interval.
* :meth:`~PeriodicSampler.stop` ends the thread between two samples; tests drive
  :meth:`~PeriodicSampler.sample_now` directly instead of waiting on the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from toposcope.background import BackgroundLoop

LOG = logging.getLogger("toposcope.exporter.sampler")

T = TypeVar("T")


@dataclass(frozen=True)
class Sample(Generic[T]):
    """One complete sample: its value, when it was taken (the clock's time when it ended) and
    its sequence number (1 for the first), which tells a reader whether it changed.
    """

    value: T
    taken_at: float
    generation: int


class PeriodicSampler(BackgroundLoop, Generic[T]):
    """Calls ``take`` every ``interval`` seconds on a daemon thread (see the module docstring).

    ``clock`` times the samples' age (monotonic by default; tests pass their own).
    """

    def __init__(
        self,
        name: str,
        take: Callable[[], T],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"sampler {name!r} needs a positive interval, not {interval}")
        super().__init__()
        self.name = name
        self.interval = interval
        self.clock = clock
        self._take = take
        self._sampling = threading.Lock()
        self._latest: Sample[T] | None = None
        self._generation = 0
        self._last_error = ""

    def sample_now(self) -> Sample[T] | None:
        """Take one sample now (waiting for one under way first); the latest complete sample
        after it, ``None`` when every attempt so far failed.
        """
        with self._sampling:
            try:
                value = self._take()
            except Exception as exc:
                self._log_failure(exc)
                return self._latest
            if self._last_error:
                LOG.info("%s: sampling again", self.name)
                self._last_error = ""
            self._generation += 1
            self._latest = Sample(value, self.clock(), self._generation)
            return self._latest

    def latest(self) -> Sample[T] | None:
        """The last complete sample, without waiting; the first one is taken on demand (or
        waited for, when the thread is taking it).
        """
        current = self._latest
        if current is not None:
            return current
        with self._sampling:
            if self._latest is not None:
                return self._latest
        return self.sample_now()

    def age(self, sample: Sample[T]) -> float:
        """Seconds since ``sample`` was taken (never negative)."""
        return max(self.clock() - sample.taken_at, 0.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.clock()
            self.sample_now()
            spent = self.clock() - started
            # a source slower than the interval still leaves the process a tenth of it idle
            self._stop.wait(max(self.interval - spent, self.interval / 10))

    def _log_failure(self, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if message != self._last_error:
            self._last_error = message
            LOG.error("%s: sample failed: %s; serving the last good one", self.name, message)
