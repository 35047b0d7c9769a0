"""How NVML errors are classed: absent, empty, unhealthy device, re-initialise.

The bindings raise one ``NVMLError`` subclass per ``NVML_ERROR_*`` code; these tables say
what the exporter does about each (see the package docstring). They need the bindings, so
only :mod:`.library` (loaded when the exporter talks to NVML) reads them.
"""

from __future__ import annotations

import pynvml

#: Absent, and not worth asking again until NVML is re-initialised.
ABSENT_CACHED: tuple[type[Exception], ...] = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
)
#: Absent for now (permissions can change).
ABSENT: tuple[type[Exception], ...] = (pynvml.NVMLError_NoPermission,)
#: Nothing there, which is normal (an empty MIG slot, no sample yet).
EMPTY: tuple[type[Exception], ...] = (pynvml.NVMLError_NotFound, pynvml.NVMLError_NoData)
#: The device stopped answering properly: unhealthy for this scrape.
UNHEALTHY: tuple[type[Exception], ...] = (
    pynvml.NVMLError_GpuIsLost,
    pynvml.NVMLError_Unknown,
    pynvml.NVMLError_Timeout,
    pynvml.NVMLError_ResetRequired,
)
#: The library lost its driver connection: shut down and initialise again, with back-off.
REINIT: tuple[type[Exception], ...] = (
    pynvml.NVMLError_Uninitialized,
    pynvml.NVMLError_DriverNotLoaded,
    pynvml.NVMLError_LibRmVersionMismatch,
)
#: Raised by the bindings' unversioned wrappers when the driver lacks the versioned symbol.
VERSION_MISMATCH: tuple[type[Exception], ...] = tuple(
    c for c in (getattr(pynvml, "NVMLLibraryMismatchError", None),) if isinstance(c, type)
)
