"""Readings over a fake clock: constants, step series and counters, and the clock itself.

A description gives each reading as a number, a :class:`Series` (a step function of fake
time, optionally repeating) or a :class:`Ramp` (a counter growing at a rate);
:func:`evaluate` turns any of them into the number at a moment. :class:`ManualClock` is the
clock tests move by hand.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Series:
    """A step function of fake time: the value of the last point at or before ``t``.

    With ``period`` the series repeats; before the first point the first value holds.
    """

    points: tuple[tuple[float, float], ...]
    period: float | None = None

    def at(self, t: float) -> float:
        """The value at fake time ``t`` (seconds since the fake started)."""
        if self.period:
            t = t % self.period
        value = self.points[0][1]
        for when, point in self.points:
            if when <= t:
                value = point
            else:
                break
        return value


@dataclass(frozen=True)
class Ramp:
    """A counter: ``start + rate * t`` (energy in mJ, ECC error counts)."""

    start: float
    rate: float

    def at(self, t: float) -> float:
        """The counter's value at fake time ``t``."""
        return self.start + self.rate * max(t, 0.0)


Value = float | Series | Ramp


def evaluate(value: Value, t: float) -> float:
    """The number a spec value stands for at fake time ``t``."""
    if isinstance(value, Series | Ramp):
        return value.at(t)
    return value


class ManualClock:
    """A monotonic clock that only moves when told to; tests share it with the NVML source."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        """The current fake time in seconds."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward and return the new time."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go back")
        with self._lock:
            self._now += seconds
            return self._now
