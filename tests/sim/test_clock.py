"""The simulated clock: manual, accelerated, seeded."""

from __future__ import annotations

import pytest

from toposcope.sim.clock import SimClock


class FakeWall:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_manual_clock_moves_only_when_advanced() -> None:
    clock = SimClock(speed=0)
    assert clock.now() == 0.0
    assert clock.advance(30) == 30.0
    assert clock() == 30.0
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)


def test_accelerated_clock_follows_the_wall_clock() -> None:
    wall = FakeWall()
    clock = SimClock(speed=60, wall=wall)
    wall.now += 2.0
    assert clock.now() == pytest.approx(120.0)
    clock.advance(10)
    assert clock.now() == pytest.approx(130.0)
    assert clock.real_seconds_until(190.0) == pytest.approx(1.0)


def test_changing_speed_does_not_jump() -> None:
    wall = FakeWall()
    clock = SimClock(speed=1, wall=wall)
    wall.now += 10
    clock.set_speed(100)
    assert clock.now() == pytest.approx(10.0)
    wall.now += 1
    assert clock.now() == pytest.approx(110.0)
    clock.set_speed(0)
    wall.now += 50
    assert clock.now() == pytest.approx(110.0)
    assert clock.real_seconds_until(200.0) is None


def test_same_seed_same_random_sequence() -> None:
    a, b, c = SimClock(seed=7), SimClock(seed=7), SimClock(seed=8)
    seq_a = [a.rng.random() for _ in range(5)]
    assert seq_a == [b.rng.random() for _ in range(5)]
    assert seq_a != [c.rng.random() for _ in range(5)]


def test_negative_speed_is_refused() -> None:
    with pytest.raises(ValueError, match="speed"):
        SimClock(speed=-1)
