"""Simulated jobs: what a workload asks for and how it behaves.

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
mutable state. Jobs come from a scenario's ``jobs`` list or from a trace CSV
(:mod:`toposcope.sim.traces`).
"""

from __future__ import annotations

import hashlib
import random
import reprlib
from dataclasses import dataclass
from enum import StrEnum

from toposcope.identity.names import check_object_name, is_object_name
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
    """What a job does (the ``kind`` of its :class:`~toposcope.rm.WorkloadView`)."""

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
    object name (:func:`toposcope.identity.names.check_object_name`), else ``InvalidNameError``:
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
