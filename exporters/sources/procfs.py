"""Per-scrape readers of procfs: per-CPU times from ``/proc/stat``.

``/proc/stat`` counts CPU time in USER_HZ ticks (``sysconf(_SC_CLK_TCK)``, 100 on every
mainstream Linux); they become seconds here, once. Only the per-CPU ``cpuN`` lines are
read: the aggregate ``cpu`` line would double count, and ``guest``/``guest_nice`` are
already included in ``user``/``nice`` by the kernel (``account_guest_time``), so they are
not published separately.

Lines are parsed strictly and in linear time: a CPU number at or above
:data:`~toposcope.cpulist.CPU_LIMIT`, or a tick count that is not a whole number of at most
20 digits (negative, ``inf``, ``1e9``), makes the line malformed, never an exception.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toposcope.cpulist import CPU_LIMIT
from toposcope.topology.sysfs_files import read_text

LOG = logging.getLogger(__name__)

#: The ``mode`` label values, in ``/proc/stat`` column order (proc(5)).
CPU_MODES: tuple[str, ...] = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
)

_CPU_LINE_RE = re.compile(r"^cpu([0-9]+)(?:\s|$)")


def user_hz() -> int:
    """Ticks per second of ``/proc/stat`` (``getconf CLK_TCK``); 100 when unknown."""
    try:
        value = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100
    return value if value > 0 else 100


@dataclass(frozen=True)
class CpuTimes:
    """Seconds one CPU spent in each mode since boot (one ``cpuN`` line of ``/proc/stat``).

    A mode is ``None`` when the kernel's line is too short to have it (``steal`` appeared
    in 2.6.11); such modes are skipped, never published as zero.
    """

    cpu: int
    user: float | None = None
    nice: float | None = None
    system: float | None = None
    idle: float | None = None
    iowait: float | None = None
    irq: float | None = None
    softirq: float | None = None
    steal: float | None = None

    def modes(self) -> Iterator[tuple[str, float]]:
        """``(mode, seconds)`` for every mode the line had, in ``CPU_MODES`` order."""
        for mode in CPU_MODES:
            value: float | None = getattr(self, mode)
            if value is not None:
                yield mode, value


def parse_proc_stat_cpus(text: str, hz: int) -> tuple[dict[int, CpuTimes], list[str]]:
    """Parse the ``cpuN`` lines of ``/proc/stat`` into seconds per mode.

    Returns the times keyed by CPU number and the ``cpuN`` lines that could not be parsed
    (for the caller to log). Other lines (``cpu``, ``intr``, ``ctxt``...) are ignored.
    """
    times: dict[int, CpuTimes] = {}
    bad: list[str] = []
    for raw in text.splitlines():
        if not raw.startswith("cpu") or raw[3:4] in ("", " ", "\t"):
            continue
        match = _CPU_LINE_RE.match(raw)
        if match is None:
            continue
        fields = raw.split()[1 : 1 + len(CPU_MODES)]
        digits = match.group(1)
        if (
            not fields
            or not all(_is_ticks(f) for f in fields)
            or len(digits) > len(str(CPU_LIMIT))
            or int(digits) >= CPU_LIMIT
        ):
            bad.append(raw.strip())
            continue
        cpu = int(digits)
        times[cpu] = CpuTimes(cpu, *[int(f) / hz for f in fields])
    return times, bad


def _is_ticks(field: str) -> bool:
    """A whole number of at most 20 ASCII digits (a 64-bit tick counter)."""
    return len(field) <= 20 and field.isascii() and field.isdigit()


class Procfs:
    """Reads per-scrape figures under a procfs root (``--path.procfs``)."""

    def __init__(self, procfs: Path | str, hz: int | None = None) -> None:
        self.procfs = Path(procfs)
        self.hz = hz if hz is not None else user_hz()
        self._warned: set[str] = set()

    def cpu_times(self) -> dict[int, CpuTimes] | None:
        """Per-CPU times in seconds (online CPUs only, as the kernel lists them).

        ``None`` when ``stat`` is missing (snapshot trees without ``proc/``). Malformed
        ``cpuN`` lines are skipped with a warning logged once per line.
        """
        path = self.procfs / "stat"
        text = read_text(path)
        if text is None:
            return None
        times, bad = parse_proc_stat_cpus(text, self.hz)
        for line in bad:
            if line not in self._warned:
                self._warned.add(line)
                LOG.warning("skipping malformed line in %s: %r", path, line)
        return times
