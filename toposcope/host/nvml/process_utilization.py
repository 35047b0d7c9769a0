"""Each process's share of a GPU's time, from NVML's per-process utilization samples.

``nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp)`` returns the samples the
driver took after ``lastSeenTimeStamp`` (CPU time in microseconds): per sample a pid, its
``timeStamp`` and ``smUtil``, the percent of the sample period during which a kernel of that
process ran on the GPU (the per-process part of ``utilization.gpu``), with ``memUtil``,
``encUtil`` and ``decUtil`` (nvitop reads the same call; dcgm-exporter has no per-process
equivalent). :class:`ProcessUtilizationReader` asks each GPU for the samples since its
previous reading and gives each pid the mean ``smUtil`` of its samples, as a ratio (0..1).

A GPU is left out of a reading, so that nothing is said about how its time was split, when
NVML has no sample since the previous reading (``NOT_FOUND``), does not support per-process
samples (``NOT_SUPPORTED``: MIG mode, vGPU, older GPUs) or the GPU is unhealthy. On a GPU
that has samples, a process without one ran no kernel: the caller reads it as 0.
"""

from __future__ import annotations

import threading
from typing import Any

from toposcope.host.nvml.errors import DeviceUnhealthy, NvmlNotReady, NvmlUnavailable
from toposcope.host.nvml.library import NvmlLibrary
from toposcope.host.nvml.records import GpuDevice

#: the NVML function read, through the library's one call helper
PROCESS_UTILIZATION_CALL = "nvmlDeviceGetProcessUtilization"


class ProcessUtilizationReader:
    """Per GPU, each process's mean SM share since the previous reading (module docstring).

    Keeps each GPU's newest sample timestamp, with the NVML initialisation it came from (a
    re-initialised library starts again from 0). Thread-safe.
    """

    def __init__(self, library: NvmlLibrary) -> None:
        self._library = library
        self._lock = threading.Lock()
        self._seen: dict[int, tuple[int, int]] = {}

    def read(self) -> dict[int, dict[int, float]]:
        """``{gpu index: {pid: SM share 0..1}}`` of every GPU with new samples; empty when
        NVML is unavailable or re-initialising.
        """
        try:
            devices = self._library.ensure_ready()
        except (NvmlUnavailable, NvmlNotReady):
            return {}
        found: dict[int, dict[int, float]] = {}
        with self._lock:
            for device in devices:
                if device.handle is None:
                    continue
                try:
                    shares = self._read(device)
                except DeviceUnhealthy:
                    continue
                except NvmlNotReady:
                    return {}
                if shares is not None:
                    found[device.index] = shares
        return found

    def _read(self, device: GpuDevice) -> dict[int, float] | None:
        """One GPU's shares by pid, or ``None`` when it has no new sample."""
        generation, last = self._seen.get(device.index, (device.generation, 0))
        if generation != device.generation:
            last = 0
        samples: Any = self._library.call(
            PROCESS_UTILIZATION_CALL,
            device.handle,
            last,
            gpu=device.index,
            generation=device.generation,
        )
        by_pid: dict[int, list[float]] = {}
        newest = last
        for sample in samples or ():
            stamp = int(sample.timeStamp)
            if stamp <= last:
                continue
            newest = max(newest, stamp)
            percent = min(max(float(sample.smUtil), 0.0), 100.0)
            by_pid.setdefault(int(sample.pid), []).append(percent / 100.0)
        self._seen[device.index] = (device.generation, newest)
        if not by_pid:
            return None
        return {pid: sum(values) / len(values) for pid, values in by_pid.items()}
