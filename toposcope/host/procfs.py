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

import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toposcope.cpulist import CPU_LIMIT
from toposcope.host.processes import read_all

LOG = logging.getLogger(__name__)

#: errors that mean "no such file here", not worth a log line
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EISDIR)

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


def read_or_none(path: str) -> bytes | None:
    """A whole procfs or sysfs file as bytes (``os.open``/``os.read``, no ``pathlib`` on the
    scrape path); ``None`` when it is missing or cannot be read.
    """
    try:
        return read_all(path)
    except OSError as exc:
        if exc.errno not in _ABSENT:
            LOG.debug("cannot read %s: %s", path, exc)
        return None


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


@dataclass
class CpuTicks:
    """One reading of the ``cpuN`` lines of ``/proc/stat``.

    ``columns`` holds the usual case in the shape the per-node sums want: when every line is
    well formed, with the same number of modes and a CPU number of its own, one list per mode
    (in :data:`CPU_MODES` order) of every CPU's ticks, in ``cpus`` order; ``None`` otherwise.
    ``bad`` are the ``cpuN`` lines that could not be parsed (for the caller to log).
    """

    cpus: list[int]
    columns: list[list[int]] | None
    bad: list[str]
    _by_cpu: dict[int, tuple[int, ...]] | None = None

    def by_cpu(self) -> dict[int, tuple[int, ...]]:
        """Ticks per mode keyed by CPU number (:func:`parse_proc_stat_ticks`'s)."""
        if self._by_cpu is None:
            columns = self.columns or []
            self._by_cpu = dict(zip(self.cpus, zip(*columns, strict=True), strict=True))
        return self._by_cpu


def parse_proc_stat(data: bytes) -> CpuTicks:
    """Parse the ``cpuN`` lines of ``/proc/stat`` (bytes, as read) into a :class:`CpuTicks`.

    Other lines (``cpu``, ``intr``, ``ctxt``...) are ignored. A regular file (the usual
    case) is parsed column by column, a few string operations over all its lines at once:
    the exporter parses this file on every scrape; anything else line by line.
    """
    regular = _regular_columns(data)
    if regular is not None:
        return CpuTicks(regular[0], regular[1], [])
    ticks, bad = _parse_lines(data)
    return CpuTicks(list(ticks), None, bad, ticks)


def parse_proc_stat_ticks(data: bytes) -> tuple[dict[int, tuple[int, ...]], list[str]]:
    """Parse the ``cpuN`` lines of ``/proc/stat`` (bytes, as read) into ticks per mode.

    Returns, keyed by CPU number, the tick counts in :data:`CPU_MODES` order (as many as the
    line has, at most eight), and the ``cpuN`` lines that could not be parsed (for the caller
    to log). Other lines (``cpu``, ``intr``, ``ctxt``...) are ignored.
    """
    reading = parse_proc_stat(data)
    return reading.by_cpu(), reading.bad


def _cpu_lines(data: bytes) -> list[bytes]:
    """The lines that start with ``cpu`` and a digit: the only ones that can be ``cpuN``."""
    return [raw for raw in data.splitlines() if raw[:3] == b"cpu" and raw[3:4].isdigit()]


def _regular_columns(data: bytes) -> tuple[list[int], list[list[int]]] | None:
    """The ``cpuN`` lines as ``(cpus, columns)`` when every one of them is well formed, has
    as many fields as the others and names a CPU no other line names; ``None`` otherwise
    (:func:`_parse_lines` then tells the good lines from the bad).
    """
    lines = _cpu_lines(data)
    block = b"\n".join(lines)
    tokens = block.split()
    count = len(lines)
    if not count or len(tokens) % count or block.count(b"cpu") != count:
        return None
    width = len(tokens) // count
    # ``cpu`` occurs once a line, at its start: if every width-th token starts with it, those
    # are the lines' first tokens and every line has ``width`` tokens
    names = [name[3:] for name in tokens[::width] if name[:3] == b"cpu"]
    modes = min(width - 1, len(CPU_MODES))
    if (
        len(names) != count
        or not modes
        or not all(map(bytes.isdigit, names))
        or max(map(len, names)) > len(str(CPU_LIMIT))
    ):
        return None
    fields = [tokens[1 + mode :: width] for mode in range(modes)]
    if not all(b"".join(column).isdigit() and max(map(len, column)) <= 20 for column in fields):
        return None
    cpus = list(map(int, names))
    if max(cpus) >= CPU_LIMIT or len(set(cpus)) != count:
        return None
    return cpus, [list(map(int, column)) for column in fields]


def _parse_lines(data: bytes) -> tuple[dict[int, tuple[int, ...]], list[str]]:
    """:func:`parse_proc_stat_ticks` line by line: a malformed ``cpuN`` line (a field that is
    not a whole number of at most 20 digits, no field, a CPU number too large) is returned.
    """
    ticks: dict[int, tuple[int, ...]] = {}
    bad: list[str] = []
    width = len(CPU_MODES)
    limit_digits = len(str(CPU_LIMIT))
    for raw in _cpu_lines(data):
        parts = raw.split()
        digits = parts[0][3:]
        if not digits.isdigit():
            continue
        fields = parts[1 : 1 + width]
        if (
            not fields
            or not b"".join(fields).isdigit()
            or max(map(len, fields)) > 20
            or len(digits) > limit_digits
            or int(digits) >= CPU_LIMIT
        ):
            bad.append(raw.strip().decode("utf-8", "replace"))
            continue
        ticks[int(digits)] = tuple(map(int, fields))
    return ticks, bad


def parse_proc_stat_cpus(text: str, hz: int) -> tuple[dict[int, CpuTimes], list[str]]:
    """Parse the ``cpuN`` lines of ``/proc/stat`` into seconds per mode.

    Returns the times keyed by CPU number and the ``cpuN`` lines that could not be parsed
    (for the caller to log); :func:`parse_proc_stat_ticks` with the ticks made seconds.
    """
    ticks, bad = parse_proc_stat_ticks(text.encode("utf-8", "surrogateescape"))
    return {cpu: _seconds(cpu, values, hz) for cpu, values in ticks.items()}, bad


def _seconds(cpu: int, ticks: tuple[int, ...], hz: int) -> CpuTimes:
    return CpuTimes(cpu, *[value / hz for value in ticks])


class Procfs:
    """Reads per-scrape figures under a procfs root (``--path.procfs``)."""

    def __init__(self, procfs: Path | str, hz: int | None = None) -> None:
        self.procfs = Path(procfs)
        self.hz = hz if hz is not None else user_hz()
        self._warned: set[str] = set()
        self._stat_path = os.path.join(self.procfs, "stat")

    def cpu_ticks(self) -> dict[int, tuple[int, ...]] | None:
        """Per-CPU ticks per mode (:func:`parse_proc_stat_ticks`), online CPUs only.

        ``None`` when ``stat`` is missing (snapshot trees without ``proc/``). Malformed
        ``cpuN`` lines are skipped with a warning logged once per line.
        """
        reading = self.cpu_reading()
        return reading.by_cpu() if reading is not None else None

    def cpu_reading(self) -> CpuTicks | None:
        """This moment's ``cpuN`` lines (:func:`parse_proc_stat`), online CPUs only; ``None``
        and the malformed lines as :meth:`cpu_ticks` says.
        """
        data = read_or_none(self._stat_path)
        if data is None:
            return None
        reading = parse_proc_stat(data)
        for line in reading.bad:
            if line not in self._warned:
                self._warned.add(line)
                LOG.warning("skipping malformed line in %s: %r", self._stat_path, line)
        return reading

    def cpu_times(self) -> dict[int, CpuTimes] | None:
        """Per-CPU times in seconds (:meth:`cpu_ticks` made seconds)."""
        ticks = self.cpu_ticks()
        if ticks is None:
            return None
        return {cpu: _seconds(cpu, values, self.hz) for cpu, values in ticks.items()}
