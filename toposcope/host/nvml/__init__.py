"""NVML access for the exporter: one error-mapping helper, per-scrape GPU snapshots, threads.

Every NVML call goes through :meth:`~.library.NvmlLibrary.call` (in the spirit of nvitop's
``nvmlQuery``), which maps the bindings' error classes to what the exporter does about them:

* ``NotSupported``, ``NoPermission``, ``FunctionNotFound`` (bindings newer than the driver):
  the value is absent (``None``), logged once per GPU and field; ``NotSupported`` and
  ``FunctionNotFound`` are remembered, so the call is not repeated every scrape.
* ``GpuIsLost``, ``Unknown``, ``Timeout``, ``ResetRequired`` on a device: that GPU is unhealthy
  for this scrape, its snapshot says ``up=False`` and carries no reading (never a stale one).
* ``Uninitialized``, ``DriverNotLoaded``, ``LibRmVersionMismatch``: NVML is marked for
  re-initialisation, retried on later scrapes with exponential back-off (1 s doubling to
  60 s by default, on an injectable monotonic clock).
* ``LibraryNotFound`` at ``nvmlInit``: :class:`NvmlUnavailable` (a ``NoDataError``: a host
  without the NVIDIA driver is not an error).

:class:`NvmlDevices` is the layer the ``gpu`` collector, the workloads collector's GPU
process source, the ``toposcope topology`` command and the two background threads share:
:class:`PcieSampler` (``nvmlDeviceGetPcieThroughput`` blocks about 20 ms per direction and
GPU, so it never runs in a scrape) and :class:`XidWatcher` (``nvmlEventSetWait_v2`` on XID
critical errors). :mod:`.health` reads row remapping, retired pages, NVLink and PCIe replay
error counters; :mod:`.activity` (:class:`ActivityReader`) reads PCIe and NVLink bytes and
SM, tensor and DRAM activity from GPM, field values or the PCIe sampler. Readings come back
in base units: W, J, Hz, bytes, ratios, Celsius.
Equivalent commands: ``nvidia-smi --query-gpu=...``, ``nvidia-smi topo -m``,
``nvidia-smi nvlink -s``, ``nvidia-smi -q -d ECC``.

Where each piece lives: :mod:`.errors` (the exceptions raised), :mod:`.error_classes` (how
the bindings' errors are classed), :mod:`.records` (devices, snapshots and conversions),
:mod:`.library` (the call helper, initialisation, discovery), :mod:`.snapshots` (per-scrape
readings), :mod:`.health` (error and repair signals), :mod:`.devices` (:class:`NvmlDevices`,
with GPU processes and topology) and :mod:`.threads` (the background threads).

This package exports the names its users need. Those that need the bindings
(:class:`NvmlDevices`, the threads, ``Backend``) load on first use, so that naming the
records or the exceptions, as every exporter does at start, never loads ``pynvml`` (2.9 MB
resident with the layer) on a host that does not talk to NVML.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from toposcope.host.nvml.errors import NvmlNotReady, NvmlUnavailable
from toposcope.host.nvml.records import (
    ACTIVITY_QUANTITIES,
    CLOCK_EVENT_REASONS,
    GpuActivity,
    GpuActivitySource,
    GpuDevice,
    GpuHealth,
    GpuSnapshot,
    MigInstance,
    mig_profile,
    nvml_bus_id,
    words_to_ids,
)

if TYPE_CHECKING:
    from toposcope.host.nvml.activity import ActivityReader
    from toposcope.host.nvml.devices import NvmlDevices
    from toposcope.host.nvml.library import Backend
    from toposcope.host.nvml.threads import PcieSample, PcieSampler, XidWatcher

#: the names that need the bindings, with the submodule each lives in
_NEEDS_BINDINGS = {
    "ActivityReader": "activity",
    "NvmlDevices": "devices",
    "Backend": "library",
    "PcieSample": "threads",
    "PcieSampler": "threads",
    "XidWatcher": "threads",
}

__all__ = [
    "ACTIVITY_QUANTITIES",
    "CLOCK_EVENT_REASONS",
    "ActivityReader",
    "Backend",
    "GpuActivity",
    "GpuActivitySource",
    "GpuDevice",
    "GpuHealth",
    "GpuSnapshot",
    "MigInstance",
    "NvmlDevices",
    "NvmlNotReady",
    "NvmlUnavailable",
    "PcieSample",
    "PcieSampler",
    "XidWatcher",
    "mig_profile",
    "nvml_bus_id",
    "words_to_ids",
]


def __getattr__(name: str) -> object:
    """Load a name that needs the bindings from its submodule on first use (PEP 562)."""
    home = _NEEDS_BINDINGS.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
