"""The simulator's clock: deterministic, seeded, real-time or accelerated, or manual.

Simulated time is seconds since the scenario started. A :class:`SimClock` runs in one of
two modes:

* ``speed > 0``: simulated time follows the wall clock, ``speed`` simulated seconds per real
  second (``--speed 60``: a simulated hour per real minute);
* ``speed == 0`` (manual): time stands still until :meth:`SimClock.advance` moves it, which
  is what tests use.

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

    def advance(self, seconds: float) -> float:
        """Jump ``seconds`` ahead (never back) and return the new simulated time."""
        if seconds < 0:
            raise ValueError("the simulated clock cannot go back")
        with self._lock:
            self._base += seconds
            if self.speed == 0:
                return self._base
            return self._base + (self._wall() - self._wall_base) * self.speed

    def set_speed(self, speed: float) -> None:
        """Change the speed from now on without a jump in simulated time."""
        if speed < 0:
            raise ValueError(f"speed must be >= 0, not {speed}")
        with self._lock:
            wall = self._wall()
            if self.speed:
                self._base += (wall - self._wall_base) * self.speed
            self._wall_base = wall
            self.speed = speed

    def real_seconds_until(self, sim_time: float) -> float | None:
        """Real seconds until simulated ``sim_time`` (``None`` when the clock is manual)."""
        if self.speed == 0:
            return None
        return max(sim_time - self.now(), 0.0) / self.speed
