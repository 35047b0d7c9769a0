"""Jobs from a trace CSV with the columns of the public Philly / Helios traces
(``submit_time``, ``gpus``/``gpu_num``, ``duration``, and optional ``job_type``, ``name``,
``cpus``/``cpu_num``, ``memory_gb``; docs/sim-model.md lists them): :func:`load_trace`.

A bad cell is a :class:`~toposcope.errors.ConfigError` naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.identity.names import OBJECT_NAME_RULE, is_object_name
from toposcope.sim.jobs import (
    GIB,
    KIND_DEFAULTS,
    MAX_JOB_GPUS,
    MAX_JOB_THREADS,
    MAX_JOBS,
    MAX_MEMORY_GB,
    MAX_SECONDS,
    JobKind,
    JobSpec,
    job_kind,
    make_job,
    short_repr,
)

#: Accepted column names -> canonical name (Philly and Helios spell them differently).
TRACE_COLUMNS: dict[str, str] = {
    "submit_time": "submit_time",
    "submitted_time": "submit_time",
    "gpus": "gpus",
    "gpu_num": "gpus",
    "num_gpus": "gpus",
    "duration": "duration",
    "job_type": "job_type",
    "type": "job_type",
    "name": "name",
    "job_id": "name",
    "jobname": "name",
    "cpus": "cpus",
    "cpu_num": "cpus",
    "memory_gb": "memory_gb",
}
_REQUIRED = ("submit_time", "gpus", "duration")


def _trace_number(where: str, column: str, text: str, *, integer: bool, maximum: float) -> float:
    """A cell as a finite number in ``[0, maximum]``, else a :class:`ConfigError` naming
    ``where`` (``FILE:LINE``) and the column.
    """
    try:
        value: float = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(
            f"{where}: column {column}: expected {kind}, got {short_repr(text)}"
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: column {column}: must be a finite number, got {value}")
    if value < 0:
        raise ConfigError(
            f"{where}: column {column}: must not be negative, got {short_repr(value)}"
        )
    if value > maximum:
        raise ConfigError(
            f"{where}: column {column}: must be at most {maximum:,.0f}, got {short_repr(value)}"
        )
    return float(value)


@dataclass(frozen=True)
class Capacity:
    """What the largest nodes of a cluster offer, to refuse jobs that can never be placed:
    the most GPUs of one node, and (``max_threads``, only when a first-fit scheduler must
    place CPU jobs) the most CPUs of one node.
    """

    max_gpus: int
    max_threads: int | None = None

    def gpu_problem(self, gpus: int) -> str | None:
        """Why a job asking for ``gpus`` GPUs can never be placed, or ``None``."""
        if gpus <= self.max_gpus:
            return None
        if self.max_gpus == 0:
            return f"asks for {gpus} GPU(s) but no node has a GPU"
        return f"asks for {gpus} GPUs but no node has more than {self.max_gpus}: it can never run"

    def thread_problem(self, gpus: int, threads: int) -> str | None:
        """Why a CPU job of ``threads`` threads can never be placed first-fit, or ``None``."""
        if gpus or self.max_threads is None or threads <= self.max_threads:
            return None
        return (
            f"asks for {threads} CPU threads but no node has more than {self.max_threads} "
            "CPUs: the first-fit scheduler can never place it"
        )


class _TraceRow:
    """One row of a trace, read cell by cell with errors naming file, line and column; a
    row too short to hold a required column is an error (an optional one reads as empty).
    """

    def __init__(self, path: Path, line: int, row: list[str], columns: dict[str, int]) -> None:
        self.where = f"{path}:{line}"
        self.row = row
        self.columns = columns
        for name in _REQUIRED:
            index = columns[name]
            if index >= len(row):
                raise ConfigError(
                    f"{self.where}: column {name}: missing (it is cell {index + 1}, "
                    f"the row has {len(row)})"
                )

    def cell(self, name: str) -> str:
        """The stripped text of a column (empty when the trace or the row lacks it)."""
        index = self.columns.get(name)
        return self.row[index].strip() if index is not None and index < len(self.row) else ""

    def number(self, name: str, *, integer: bool, maximum: float) -> float | None:
        """A numeric cell (``None`` when empty)."""
        text = self.cell(name)
        if not text:
            return None
        return _trace_number(self.where, name, text, integer=integer, maximum=maximum)

    def error(self, column: str, problem: str) -> ConfigError:
        """A :class:`ConfigError` for one cell of this row."""
        return ConfigError(f"{self.where}: column {column}: {problem}")


def _trace_job(
    row: _TraceRow,
    index: int,
    time_offset: float,
    gpu_total_bytes: int,
    capacity: Capacity | None,
) -> JobSpec:
    gpus = int(row.number("gpus", integer=True, maximum=MAX_JOB_GPUS) or 0)
    submit = row.number("submit_time", integer=False, maximum=MAX_SECONDS) or 0.0
    duration = row.number("duration", integer=False, maximum=MAX_SECONDS) or 0.0
    kind_text = row.cell("job_type")
    try:
        kind = job_kind(kind_text) if kind_text else (
            JobKind.GPU_TRAIN if gpus else JobKind.CPU_TRAIN
        )  # fmt: skip
    except ValueError as exc:
        raise row.error("job_type", str(exc)) from None
    if kind is not JobKind.CPU_TRAIN and gpus == 0 and kind is not JobKind.NOTEBOOK:
        gpus = 1
    if kind is JobKind.CPU_TRAIN:
        gpus = 0
    threads = row.number("cpus", integer=True, maximum=MAX_JOB_THREADS)
    memory_gb = row.number("memory_gb", integer=False, maximum=MAX_MEMORY_GB)
    name = row.cell("name") or f"trace-{index:05d}"
    if not is_object_name(name):
        raise row.error("name", f"job name {short_repr(name)} is not {OBJECT_NAME_RULE}")
    if capacity is not None:
        problem = capacity.gpu_problem(gpus)
        if problem is not None:
            raise row.error("gpus", problem)
        wanted = int(threads) if threads is not None else KIND_DEFAULTS[kind].threads
        problem = capacity.thread_problem(gpus, wanted)
        if problem is not None:
            raise row.error("cpus", problem)
    return make_job(
        name,
        kind,
        gpus=gpus,
        threads=int(threads) if threads is not None else None,
        memory_gb=memory_gb,
        gpu_total_bytes=gpu_total_bytes,
        submit_time=submit + time_offset,
        duration=duration or None,
    )


def load_trace(
    path: Path | str,
    *,
    time_offset: float = 0.0,
    gpu_total_bytes: int = 40 * GIB,
    limit: int | None = None,
    capacity: Capacity | None = None,
    max_jobs: int = MAX_JOBS,
) -> list[JobSpec]:
    """Jobs from a trace CSV (see the module docstring for the columns).

    ``submit_time`` is in seconds; the first row's time is not subtracted, so a trace that
    starts at 0 starts with the scenario (``time_offset`` shifts every job). Rows without
    ``job_type`` are ``gpu-train`` when they ask for GPUs and ``cpu-train`` otherwise; a
    ``duration`` of 0 or an empty cell means "runs until stopped". Every cell is checked
    like the same field of a scenario file (finite, not negative, within the limits of
    :data:`MAX_SECONDS` and the others; a name that is an object name; with ``capacity``,
    a job that some node can hold), and a trace of more than ``max_jobs`` rows (after
    ``limit``) is refused. Raises :class:`ConfigError` naming the file, line and column.
    """
    path = Path(path)
    try:
        handle = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise ConfigError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    jobs: list[JobSpec] = []
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
            columns: dict[str, int] = {}
            for i, raw in enumerate(header):
                canonical = TRACE_COLUMNS.get(raw.strip().lower())
                if canonical is not None and canonical not in columns:
                    columns[canonical] = i
            missing = [c for c in _REQUIRED if c not in columns]
            if missing:
                raise ConfigError(
                    f"{path}:1: missing column(s) {', '.join(missing)} "
                    f"(accepted: {', '.join(sorted(TRACE_COLUMNS))})"
                )
            for row in reader:
                if not row or all(not cell.strip() for cell in row):
                    continue
                if len(jobs) >= max_jobs:
                    raise ConfigError(
                        f"{path}:{reader.line_num}: more than {max_jobs:,} jobs "
                        f"(a scenario holds at most {MAX_JOBS:,}; use the trace's limit)"
                    )
                trace_row = _TraceRow(path, reader.line_num, row, columns)
                jobs.append(
                    _trace_job(trace_row, len(jobs), time_offset, gpu_total_bytes, capacity)
                )
                if limit is not None and len(jobs) >= limit:
                    break
        except StopIteration:
            raise ConfigError(f"{path}: empty trace (needs a header line)") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
        except csv.Error as exc:
            raise ConfigError(f"{path}:{reader.line_num}: not valid CSV: {exc}") from None
    return jobs
