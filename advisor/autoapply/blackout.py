"""Blackout windows: times at which the automatic loop applies nothing.

Two forms, each in its own time zone (an IANA name such as ``Europe/Berlin``; ``UTC`` when
not given), so that "not during office hours in Berlin" stays right across daylight-saving
changes:

* a daily time range on some weekdays: ``{days: [mon, fri], from: "08:00", to: "18:00"}``;
  a range whose end is before its start runs past midnight and belongs to the day it
  starts on (``{days: [fri], from: "22:00", to: "06:00"}`` is Friday night into Saturday);
  ``to: "24:00"`` ends at midnight;
* a cron schedule and a duration: ``{cron: "0 22 * * fri", duration: 60h}`` is blacked out
  for 60 hours from each time the schedule fires (cron's five fields: minute, hour, day of
  month, month, day of week; ``*``, lists, ranges, steps and day names; when both day
  fields are restricted either may match, as in cron).

:meth:`Blackout.active` answers for one Unix time; :func:`parse_cron` and
:func:`parse_clock` raise :class:`ValueError` with a message fit for a config error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, tzinfo

#: weekday names as Python numbers them (Monday 0)
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: the longest cron blackout, in seconds (one week: the schedule is checked minute by minute)
MAX_CRON_DURATION = 7 * 86400
_CLOCK_RE = re.compile(r"([01]?\d|2[0-4]):([0-5]\d)")
#: the bounds of each cron field: minute, hour, day of month, month, day of week
_CRON_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_CRON_NAMES = ("minute", "hour", "day of month", "month", "day of week")


def parse_clock(text: str) -> int:
    """Minutes after midnight of ``HH:MM`` (``24:00`` is 1440)."""
    match = _CLOCK_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a time of day HH:MM")
    minutes = int(match[1]) * 60 + int(match[2])
    if minutes > 1440:
        raise ValueError(f"{text!r} is after 24:00")
    return minutes


def parse_day(text: str) -> int:
    """The weekday number (Monday 0) of a three-letter day name."""
    name = text.strip().lower()[:3]
    if name not in DAYS or len(text.strip()) < 3:
        raise ValueError(f"{text!r} is not a day (one of {', '.join(DAYS)})")
    return DAYS.index(name)


def _cron_value(text: str, index: int) -> int:
    if index == 4 and text.lower() in DAYS:
        return (DAYS.index(text.lower()) + 1) % 7  # cron counts from Sunday 0
    if not text.isdigit():
        raise ValueError(f"{_CRON_NAMES[index]}: {text!r} is not a number")
    value = int(text)
    low, high = _CRON_BOUNDS[index]
    if not low <= value <= high:
        raise ValueError(f"{_CRON_NAMES[index]}: {value} is not within {low}-{high}")
    return value


def _cron_field(text: str, index: int) -> frozenset[int]:
    low, high = _CRON_BOUNDS[index]
    values: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"{_CRON_NAMES[index]}: step {step_text!r} must be a number > 0")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            start, _, end = span.partition("-")
            first, last = _cron_value(start, index), _cron_value(end, index)
            if first > last:
                raise ValueError(f"{_CRON_NAMES[index]}: range {span!r} runs backwards")
        else:
            first = _cron_value(span, index)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    if index == 4 and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values)


@dataclass(frozen=True)
class CronSchedule:
    """The times a five-field cron expression fires (see the module docstring)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    any_day_of_month: bool
    any_day_of_week: bool

    def fires(self, moment: datetime) -> bool:
        """Whether the schedule fires in the minute of ``moment`` (local time)."""
        if moment.minute not in self.minutes or moment.hour not in self.hours:
            return False
        if moment.month not in self.months:
            return False
        by_month = moment.day in self.days_of_month
        by_week = (moment.weekday() + 1) % 7 in self.days_of_week
        if self.any_day_of_month or self.any_day_of_week:
            return by_month and by_week
        return by_month or by_week


def parse_cron(text: str) -> CronSchedule:
    """The schedule of a five-field cron expression (``ValueError`` naming the bad field)."""
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"{text!r} needs five fields (minute hour day-of-month month weekday)")
    minutes, hours, days, months, weekdays = (_cron_field(p, i) for i, p in enumerate(parts))
    return CronSchedule(minutes, hours, days, months, weekdays, parts[2] == "*", parts[4] == "*")


@dataclass(frozen=True)
class Blackout:
    """One blackout window in time zone ``zone`` (see the module docstring).

    A daily range has ``days`` (Monday 0), ``start`` and ``end`` in minutes after midnight;
    a cron window has ``cron`` and ``duration`` seconds. ``label`` is how decisions and the
    API name it (``blackouts[0]``, or the window's own ``name``).
    """

    label: str
    zone: tzinfo
    days: frozenset[int] = frozenset(range(7))
    start: int = 0
    end: int = 1440
    cron: CronSchedule | None = None
    duration: float = 0.0

    def active(self, now: float) -> bool:
        """Whether Unix time ``now`` falls in this window."""
        if self.cron is not None:
            return self._cron_active(now)
        local = datetime.fromtimestamp(now, self.zone)
        minute = local.hour * 60 + local.minute
        today = local.weekday()
        if self.start < self.end:
            return today in self.days and self.start <= minute < self.end
        yesterday = (today - 1) % 7
        return (today in self.days and minute >= self.start) or (
            yesterday in self.days and minute < self.end
        )

    def _cron_active(self, now: float) -> bool:
        assert self.cron is not None
        minute_start = now - now % 60
        steps = int(self.duration // 60)
        for back in range(steps + 1):
            moment = minute_start - back * 60
            if now - moment >= self.duration:
                break
            if self.cron.fires(datetime.fromtimestamp(moment, self.zone)):
                return True
        return False
