"""Simulated jobs: what a workload asks for and how it behaves, and trace loading.

Four kinds (:class:`JobKind`):

* ``cpu-train``: CPU training (TensorFlow/PyTorch on CPUs): many busy threads and a large
  working set, sensitive to where its threads and memory sit (the CRI-RM case).
* ``gpu-train``: single- or multi-GPU training: GPUs, a communication fraction (the share
  of a step spent exchanging gradients on one PCIe switch) and an input pipeline (data
  loader threads and pinned host memory) that prefers the GPUs' NUMA node.
* ``inference``: a long-running service on one GPU, moderately busy.
* ``notebook``: an interactive notebook holding GPUs while it mostly idles.

Each job draws its own NUMA sensitivity, communication fraction, input weight and
GPU-sharing overhead from its class's ranges in the simulator's truth (:func:`draws`,
:mod:`toposcope.sim.truth_params`). A :class:`JobSpec` is immutable; the cluster keeps the
mutable state. Jobs come from a
scenario's ``jobs`` list or from a trace CSV (:func:`load_trace`) with the columns of the
public Philly / Helios traces (``submit_time``, ``gpus``/``gpu_num``, ``duration``, and
optional ``job_type``, ``name``, ``cpus``/``cpu_num``, ``memory_gb``); docs/sim-model.md
lists them.
"""

from __future__ import annotations

import csv
import hashlib
import math
import random
import reprlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.names import OBJECT_NAME_RULE, check_object_name, is_object_name
from toposcope.sim.truth_params import CLASS_PARAMETERS, truth

GIB = 1024**3

#: Limits of a scenario's jobs, the same for scenario files and trace rows (documented in
#: docs/sim-model.md): jobs in all, threads, GPUs, host memory and per-GPU memory of one
#: job, and simulated seconds (``submit``, ``duration``, a trace's ``offset``).
MAX_JOBS = 100_000
MAX_JOB_THREADS = 4_096
MAX_JOB_GPUS = 1_024
MAX_MEMORY_GB = 65_536.0
MAX_GPU_MEMORY_GB = 1_024.0
MAX_SECONDS = 1e9
MAX_THROUGHPUT = 1e12

_SHORT = reprlib.Repr()
_SHORT.maxstring = 80
_SHORT.maxother = 80
_SHORT.maxlevel = 3


class JobKind(StrEnum):
    """What a job does (the ``kind`` of its :class:`~toposcope.resources.WorkloadView`)."""

    CPU_TRAIN = "cpu-train"
    GPU_TRAIN = "gpu-train"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"


@dataclass(frozen=True)
class KindDefaults:
    """Per-kind defaults: threads, busy share of each thread, GPU demand, memory and
    throughput (the performance parameters are the truth's, drawn per job: :func:`draws`).
    """

    threads: int
    cpu_busy: float
    gpu_demand: float
    memory_gb: float
    gpu_memory_share: float
    base_throughput: float
    unit: str


#: Defaults per kind. ``gpu_demand`` is the share of a GPU the job keeps busy alone at the
#: best placement; ``gpu_memory_share`` the share of each GPU's memory it holds.
KIND_DEFAULTS: dict[JobKind, KindDefaults] = {
    JobKind.CPU_TRAIN: KindDefaults(28, 1.0, 0.0, 64.0, 0.0, 100.0, "samples/s"),
    JobKind.GPU_TRAIN: KindDefaults(8, 0.6, 0.95, 64.0, 0.7, 1000.0, "samples/s"),
    JobKind.INFERENCE: KindDefaults(4, 0.3, 0.35, 16.0, 0.3, 500.0, "requests/s"),
    JobKind.NOTEBOOK: KindDefaults(2, 0.02, 0.01, 8.0, 0.2, 0.0, "cells/s"),
}


def draws(name: str, kind: JobKind, seed: int = 0) -> dict[str, float]:
    """A job's own performance parameters: each of its class's truth parameters
    (:mod:`toposcope.sim.truth_params`) drawn uniformly from the class's range, seeded by
    the job's name and ``seed``, so the same job draws the same values on every run and no
    two jobs draw alike.
    """
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    params = truth().classes[kind.value]
    return {p: rng.uniform(params[p].low, params[p].high) for p in CLASS_PARAMETERS}


def job_kind(text: str) -> JobKind:
    """Parse a kind, also the trace spellings ``train``/``cpu``/``gpu``/``interactive``."""
    aliases = {
        "train": JobKind.GPU_TRAIN,
        "training": JobKind.GPU_TRAIN,
        "gpu": JobKind.GPU_TRAIN,
        "cpu": JobKind.CPU_TRAIN,
        "interactive": JobKind.NOTEBOOK,
        "debug": JobKind.NOTEBOOK,
        "serving": JobKind.INFERENCE,
    }
    key = text.strip().lower()
    if key in aliases:
        return aliases[key]
    try:
        return JobKind(key)
    except ValueError:
        known = ", ".join(k.value for k in JobKind)
        raise ValueError(f"unknown job type {text!r} (known: {known})") from None


def unit_name(name: str) -> str:
    """The workload name of a job: its systemd unit (``<name>.service``).

    Simulated workloads live in ``/system.slice/<unit>`` cgroups, which the exporter's
    workloads collector names by the unit, so this name is both the resource manager's
    workload name and the ``workload`` label on the node's metrics. ``name`` must be an
    object name (:func:`toposcope.names.check_object_name`), else ``InvalidNameError``:
    it becomes a directory name.
    """
    check_object_name(name, "job name")
    return name if name.endswith((".service", ".scope")) else f"{name}.service"


def is_unit_name(name: object) -> bool:
    """Whether ``name`` is what :func:`unit_name` can return (safe as one path component)."""
    if not isinstance(name, str):
        return False
    return is_object_name(name) or (
        name.endswith(".service") and is_object_name(name.removesuffix(".service"))
    )


def short_repr(value: object) -> str:
    """``repr(value)`` cut to a readable length (for error messages about bad input)."""
    return _SHORT.repr(value)


@dataclass(frozen=True)
class JobSpec:
    """One job's demands and behaviour.

    ``duration`` is the run time at the best placement, in simulated seconds (``None``:
    runs until stopped); a slowed-down job takes proportionally longer. ``gpu_memory_bytes``
    is per GPU. ``submit_time`` is when it arrives (seconds after the scenario starts).
    """

    name: str
    kind: JobKind
    gpus: int = 0
    threads: int = 1
    cpu_busy: float = 1.0
    memory_bytes: int = 0
    gpu_memory_bytes: int = 0
    gpu_demand: float = 0.0
    numa_sensitivity: float = 0.0
    comm_intensity: float = 0.0
    input_intensity: float = 0.0
    base_throughput: float = 0.0
    submit_time: float = 0.0
    duration: float | None = None
    sharing_overhead: float | None = None

    @property
    def unit(self) -> str:
        """The throughput unit of this kind (``samples/s``, ``requests/s``...)."""
        return KIND_DEFAULTS[self.kind].unit

    def shape(self) -> tuple[object, ...]:
        """Everything but name and timing: jobs of one shape perform alike (cache key)."""
        return (
            self.kind,
            self.gpus,
            self.threads,
            self.cpu_busy,
            self.memory_bytes,
            self.gpu_demand,
            self.numa_sensitivity,
            self.comm_intensity,
            self.input_intensity,
            self.base_throughput,
            self.sharing_overhead,
        )


def make_job(
    name: str,
    kind: JobKind,
    *,
    gpus: int | None = None,
    threads: int | None = None,
    memory_gb: float | None = None,
    gpu_memory_gb: float | None = None,
    gpu_total_bytes: int = 40 * GIB,
    numa_sensitivity: float | None = None,
    comm_intensity: float | None = None,
    input_intensity: float | None = None,
    base_throughput: float | None = None,
    submit_time: float = 0.0,
    duration: float | None = None,
) -> JobSpec:
    """A :class:`JobSpec` with the kind's defaults for every value not given, and the job's
    own draws (:func:`draws`) for the performance parameters not given.

    ``gpu_total_bytes`` (the GPU model's memory) sizes the default per-GPU memory. The
    name becomes a unit name (:func:`unit_name`).
    """
    d = KIND_DEFAULTS[kind]
    own = draws(unit_name(name), kind)
    gpu_count = gpus if gpus is not None else (0 if kind is JobKind.CPU_TRAIN else 1)
    gpu_memory = (
        int(gpu_memory_gb * GIB)
        if gpu_memory_gb is not None
        else int(gpu_total_bytes * d.gpu_memory_share)
    )
    return JobSpec(
        name=unit_name(name),
        kind=kind,
        gpus=gpu_count,
        threads=threads if threads is not None else d.threads,
        cpu_busy=d.cpu_busy,
        memory_bytes=int((memory_gb if memory_gb is not None else d.memory_gb) * GIB),
        gpu_memory_bytes=gpu_memory if gpu_count else 0,
        gpu_demand=d.gpu_demand if gpu_count else 0.0,
        numa_sensitivity=(
            numa_sensitivity if numa_sensitivity is not None else own["numa_sensitivity"]
        ),
        comm_intensity=comm_intensity if comm_intensity is not None else own["comm_fraction"],
        input_intensity=input_intensity if input_intensity is not None else own["input_weight"],
        sharing_overhead=own["sharing_overhead"],
        base_throughput=(
            base_throughput
            if base_throughput is not None
            else d.base_throughput * max(gpu_count, 1)
        ),
        submit_time=submit_time,
        duration=duration,
    )


# -- traces -------------------------------------------------------------------------------------

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
