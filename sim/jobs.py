"""Simulated jobs: what a workload asks for and how it behaves, and trace loading.

Four kinds (:class:`JobKind`):

* ``cpu-train``: CPU training (TensorFlow/PyTorch on CPUs): many busy threads and a large
  working set, sensitive to where its threads and memory sit (NUMA sensitivity 1.0 by
  default, the CRI-RM case).
* ``gpu-train``: single- or multi-GPU training: GPUs, a communication intensity (the share
  of a step spent exchanging gradients at the best placement) and an input pipeline (data
  loader threads and pinned host memory) that prefers the GPUs' NUMA node.
* ``inference``: a long-running service on one GPU, moderately busy.
* ``notebook``: an interactive notebook holding GPUs while it mostly idles.

A :class:`JobSpec` is immutable; the cluster keeps the mutable state. Jobs come from a
scenario's ``jobs`` list or from a trace CSV (:func:`load_trace`) with the columns of the
public Philly / Helios traces (``submit_time``, ``gpus``/``gpu_num``, ``duration``, and
optional ``job_type``, ``name``, ``cpus``/``cpu_num``, ``memory_gb``); docs/sim-model.md
lists them.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from toposcope.errors import ConfigError

GIB = 1024**3


class JobKind(StrEnum):
    """What a job does (the ``kind`` of its :class:`~toposcope.resources.WorkloadView`)."""

    CPU_TRAIN = "cpu-train"
    GPU_TRAIN = "gpu-train"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"


@dataclass(frozen=True)
class KindDefaults:
    """Per-kind defaults: threads, busy share of each thread, GPU demand and sensitivities."""

    threads: int
    cpu_busy: float
    gpu_demand: float
    numa_sensitivity: float
    comm_intensity: float
    input_intensity: float
    memory_gb: float
    gpu_memory_share: float
    base_throughput: float
    unit: str


#: Defaults per kind. ``gpu_demand`` is the share of a GPU the job keeps busy alone at the
#: best placement; ``gpu_memory_share`` the share of each GPU's memory it holds.
KIND_DEFAULTS: dict[JobKind, KindDefaults] = {
    JobKind.CPU_TRAIN: KindDefaults(28, 1.0, 0.0, 1.0, 0.0, 0.0, 64.0, 0.0, 100.0, "samples/s"),
    JobKind.GPU_TRAIN: KindDefaults(8, 0.6, 0.95, 0.3, 0.5, 0.5, 64.0, 0.7, 1000.0, "samples/s"),
    JobKind.INFERENCE: KindDefaults(4, 0.3, 0.35, 0.2, 0.0, 0.3, 16.0, 0.3, 500.0, "requests/s"),
    JobKind.NOTEBOOK: KindDefaults(2, 0.02, 0.01, 0.0, 0.0, 0.0, 8.0, 0.2, 0.0, "cells/s"),
}


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
    workload name and the ``workload`` label on the node's metrics.
    """
    return name if name.endswith((".service", ".scope")) else f"{name}.service"


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
    """A :class:`JobSpec` with the kind's defaults for every value not given.

    ``gpu_total_bytes`` (the GPU model's memory) sizes the default per-GPU memory. The
    name becomes a unit name (:func:`unit_name`).
    """
    d = KIND_DEFAULTS[kind]
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
        numa_sensitivity=numa_sensitivity if numa_sensitivity is not None else d.numa_sensitivity,
        comm_intensity=comm_intensity if comm_intensity is not None else d.comm_intensity,
        input_intensity=input_intensity if input_intensity is not None else d.input_intensity,
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


def _trace_number(path: Path, line: int, column: str, text: str, integer: bool) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ConfigError(
            f"{path}:{line}: column {column}: expected {kind}, got {text!r}"
        ) from None
    if value < 0:
        raise ConfigError(f"{path}:{line}: column {column}: must not be negative, got {text}")
    return float(value)


def load_trace(
    path: Path | str,
    *,
    time_offset: float = 0.0,
    gpu_total_bytes: int = 40 * GIB,
    limit: int | None = None,
) -> list[JobSpec]:
    """Jobs from a trace CSV (see the module docstring for the columns).

    ``submit_time`` is in seconds; the first row's time is not subtracted, so a trace that
    starts at 0 starts with the scenario (``time_offset`` shifts every job). Rows without
    ``job_type`` are ``gpu-train`` when they ask for GPUs and ``cpu-train`` otherwise; a
    ``duration`` of 0 or an empty cell means "runs until stopped". Raises
    :class:`ConfigError` naming the file, line and column of a bad cell.
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
        except StopIteration:
            raise ConfigError(f"{path}: empty trace (needs a header line)") from None
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
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue

            def cell(name: str, row: list[str] = row) -> str:
                index = columns.get(name)
                return row[index].strip() if index is not None and index < len(row) else ""

            gpus = int(_trace_number(path, line, "gpus", cell("gpus") or "0", True))
            submit = _trace_number(path, line, "submit_time", cell("submit_time") or "0", False)
            duration_text = cell("duration")
            duration = (
                _trace_number(path, line, "duration", duration_text, False)
                if duration_text
                else 0.0
            )
            kind_text = cell("job_type")
            try:
                kind = job_kind(kind_text) if kind_text else (
                    JobKind.GPU_TRAIN if gpus else JobKind.CPU_TRAIN
                )  # fmt: skip
            except ValueError as exc:
                raise ConfigError(f"{path}:{line}: column job_type: {exc}") from None
            if kind is not JobKind.CPU_TRAIN and gpus == 0 and kind is not JobKind.NOTEBOOK:
                gpus = 1
            cpus_text = cell("cpus")
            memory_text = cell("memory_gb")
            name = cell("name") or f"trace-{len(jobs):05d}"
            jobs.append(
                make_job(
                    name,
                    kind,
                    gpus=gpus if kind is not JobKind.CPU_TRAIN else 0,
                    threads=(
                        int(_trace_number(path, line, "cpus", cpus_text, True))
                        if cpus_text
                        else None
                    ),
                    memory_gb=(
                        _trace_number(path, line, "memory_gb", memory_text, False)
                        if memory_text
                        else None
                    ),
                    gpu_total_bytes=gpu_total_bytes,
                    submit_time=submit + time_offset,
                    duration=duration or None,
                )
            )
            if limit is not None and len(jobs) >= limit:
                break
    return jobs
