"""The exceptions the NVML device layer raises to its callers.

They do not need the bindings, so the exporter's collectors can name them without loading
``pynvml`` on a host that never talks to NVML; how the bindings' own errors are classed is
in :mod:`.error_classes`.
"""

from __future__ import annotations

from toposcope.errors import NoDataError, SourceError


class NvmlUnavailable(NoDataError):
    """The NVML library cannot be loaded (no NVIDIA driver on this host)."""


class NvmlNotReady(SourceError):
    """NVML must be (re-)initialised and the back-off delay has not passed yet."""


class DeviceUnhealthy(Exception):
    """A device call failed in a way that makes the GPU unhealthy for this scrape."""

    def __init__(self, gpu: int, call: str, error: Exception) -> None:
        super().__init__(f"gpu={gpu} {call}: {type(error).__name__}: {error}")
        self.gpu = gpu
        self.error = error
