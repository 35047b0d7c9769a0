"""The simulator's clock: deterministic, seeded, real-time or accelerated, or manual.

Simulated time is seconds since the scenario started. A :class:`SimClock` runs in one of
two modes:

* ``speed > 0``: simulated time follows the wall clock, ``speed`` simulated seconds per real
  second (``--speed 60``: a simulated hour per real minute);
* ``speed == 0`` (manual): time stands still until :meth:`SimClock.advance` moves it, which
  is what tests use.

**Counters read per wall-clock second.** Prometheus computes ``rate()`` per wall-clock
second between its scrapes, so the counters the simulated nodes export (CPU seconds, page
allocations, GPU energy) advance by the simulated work scaled to wall-clock time: one
simulated second adds ``1 / speed`` of that second's work (:meth:`SimClock.counter_scale`),
and the fake NVML's readings follow :meth:`SimClock.counter_time`. At any ``--speed``, a CPU
busy all the time then shows ``rate() == 1`` and a 300 W GPU 300 W, while the jobs progress
``speed`` times faster. Gauges (utilisation, memory, temperature) are not scaled. In manual
mode (tests) counters advance by simulated seconds, as they did.

:meth:`SimClock.advance` also works in the real-time modes (it jumps ahead). The clock
owns the simulation's random generator (:attr:`SimClock.rng`), seeded once, so that a run
with the same seed and the same calls is the same run. Thread-safe.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable


class SimClock:
    """Simulated seconds since the start (see the module docstring).

    ``wall`` is the real monotonic clock (tests may pass their own).
    """

    def __init__(
        self,
        seed: int = 0,
        speed: float = 0.0,
        start: float = 0.0,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        if speed < 0:
            raise ValueError(f"speed must be >= 0, not {speed}")
        self.seed = seed
        self.speed = speed
        self.rng = random.Random(seed)
        self._wall = wall
        self._lock = threading.Lock()
        self._base = start
        self._wall_base = wall()
        #: counter time at the last change of speed, and the simulated time then
        self._counter_base = 0.0
        self._sim_mark = start

    def now(self) -> float:
        """The current simulated time in seconds."""
        with self._lock:
            if self.speed == 0:
                return self._base
            return self._base + (self._wall() - self._wall_base) * self.speed

    def __call__(self) -> float:
        """Same as :meth:`now`, so the clock can be passed where a ``() -> float`` is wanted
        (the fake NVML's clock).
        """
        return self.now()

    def counter_scale(self) -> float:
        """How much one simulated second of work adds to the exported counters: ``1 /
        speed`` when time follows the wall clock, 1 in manual mode (see the module docstring).
        """
        speed = self.speed
        return 1.0 / speed if speed > 0 else 1.0

    def counter_time(self) -> float:
        """The time the exported counters run on: wall-clock seconds since the start in the
        real-time modes (a jump by :meth:`advance` counts ``seconds / speed``), simulated
        seconds in manual mode. Never goes back, across changes of speed too.
        """
        with self._lock:
            return self._counter_now(self._wall())

    def _counter_now(self, wall: float) -> float:
        """:meth:`counter_time` at wall time ``wall``, the lock held."""
        if self.speed == 0:
            return self._counter_base + (self._base - self._sim_mark)
        return self._counter_base + (wall - self._wall_base)

    def advance(self, seconds: float) -> float:
        """Jump ``seconds`` ahead (never back) and return the new simulated time."""
        if seconds < 0:
            raise ValueError("the simulated clock cannot go back")
        with self._lock:
            self._base += seconds
            self._counter_base += seconds / self.speed if self.speed else 0.0
            if self.speed == 0:
                return self._base
            return self._base + (self._wall() - self._wall_base) * self.speed

    def set_speed(self, speed: float) -> None:
        """Change the speed from now on without a jump in simulated time."""
        if speed < 0:
            raise ValueError(f"speed must be >= 0, not {speed}")
        with self._lock:
            wall = self._wall()
            self._counter_base = self._counter_now(wall)
            if self.speed:
                self._base += (wall - self._wall_base) * self.speed
            self._sim_mark = self._base
            self._wall_base = wall
            self.speed = speed

    def real_seconds_until(self, sim_time: float) -> float | None:
        """Real seconds until simulated ``sim_time`` (``None`` when the clock is manual)."""
        if self.speed == 0:
            return None
        return max(sim_time - self.now(), 0.0) / self.speed
