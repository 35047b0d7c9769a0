"""The NVML library as the exporter uses it: one call helper, initialisation, discovery.

:meth:`NvmlLibrary.call` maps every NVML error as the package docstring says;
:meth:`NvmlLibrary.ensure_ready` initialises NVML lazily and again after the driver
connection is lost, with exponential back-off; discovery finds each GPU's handle, identity
and NVLinks once per initialisation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from toposcope.errors import SourceError
from toposcope.host.nvml.error_classes import (
    ABSENT,
    ABSENT_CACHED,
    EMPTY,
    REINIT,
    UNHEALTHY,
    VERSION_MISMATCH,
)
from toposcope.host.nvml.errors import DeviceUnhealthy, NvmlNotReady, NvmlUnavailable
from toposcope.host.nvml.records import GpuDevice, bus_id_of, text_of
from toposcope.topology.model import GpuLink, Topology

LOG = logging.getLogger("toposcope.exporter.nvml")

#: The bindings module (``pynvml``) or a stand-in with the same call surface (the fake).
Backend = Any


class NvmlLibrary:
    """NVML initialisation with back-off, the one call helper and device discovery.

    ``backend`` is the ``pynvml`` module or the fake; ``topology`` returns the sysfs
    topology used to cross-check locality (``CollectorContext.topology.get``); ``clock`` is a
    monotonic clock for back-off and sample ages. NVML is initialised lazily on the first
    :meth:`ensure_ready`. Thread-safe.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        topology: Callable[[], Topology] | None = None,
        clock: Callable[[], float] = time.monotonic,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
    ) -> None:
        self.backend = backend
        self.clock = clock
        self._topology = topology
        self._lock = threading.RLock()
        self._state = "new"
        self._initialised = False
        self._devices: list[GpuDevice] = []
        self._generation = 0
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._delay = backoff_initial
        self._retry_at = 0.0
        self._cause = ""
        self._missing_reason = ""
        self._links: tuple[int, tuple[GpuLink, ...]] | None = None
        self.driver_version: str | None = None
        self._unsupported: set[tuple[int | None, str]] = set()
        self._missing_functions: set[str] = set()
        self._logged: set[tuple[int | None, str, str]] = set()
        self._mismatches: dict[int, int] = {}
        self._down: set[int] = set()

    # -- the one helper ---------------------------------------------------------------------

    def call(
        self,
        name: str,
        *args: Any,
        gpu: int | None = None,
        field: str | None = None,
        generation: int | None = None,
        expected: tuple[type[BaseException], ...] = (),
        quiet: bool = False,
    ) -> Any:
        """Call ``backend.<name>(*args)`` and map NVML errors as the module docstring says.

        ``gpu`` names the device the call is about (for logs and health); ``field`` keys the
        "absent" memory and logs when one function reads several fields; ``generation`` is
        the handle's initialisation; ``expected`` error classes are re-raised to the caller
        untouched (a ``Timeout`` from ``nvmlEventSetWait_v2`` just means "no event").
        Returns ``None`` for an absent value.
        """
        key = field or name
        if name in self._missing_functions or (gpu, key) in self._unsupported:
            return None
        function = getattr(self.backend, name, None)
        if function is None:
            self._function_missing(name, "not in the NVML bindings")
            return None
        try:
            return function(*args)
        except expected:
            raise
        except VERSION_MISMATCH as exc:
            self._function_missing(name, str(exc))
            return None
        except pynvml.NVMLError as exc:
            return self._failed(exc, name, gpu=gpu, key=key, generation=generation, quiet=quiet)

    def answered(
        self,
        code: int,
        name: str,
        *,
        gpu: int | None = None,
        field: str | None = None,
        generation: int | None = None,
    ) -> bool:
        """Whether one entry of a batched answer succeeded, mapping its ``nvmlReturn`` code.

        ``nvmlDeviceGetFieldValues`` and ``nvmlGpmMetricsGet`` succeed as a whole and carry
        one return code per entry; this maps such a code exactly as :meth:`call` maps a
        raised error (``NotSupported`` absent and remembered under ``field``, ``GpuIsLost``
        unhealthy, ...). ``False`` means the entry has no value.
        """
        if int(code) == int(pynvml.NVML_SUCCESS):
            return True
        key = field or name
        if (gpu, key) in self._unsupported:
            return False
        self._failed(
            pynvml.NVMLError(int(code)),
            name,
            gpu=gpu,
            key=key,
            generation=generation,
            quiet=False,
        )
        return False

    def _failed(
        self,
        exc: Exception,
        name: str,
        *,
        gpu: int | None,
        key: str,
        generation: int | None,
        quiet: bool,
    ) -> None:
        kind = type(exc).__name__
        if isinstance(exc, pynvml.NVMLError_FunctionNotFound):
            self._function_missing(name, kind)
            return None
        if isinstance(exc, ABSENT_CACHED):
            self._unsupported.add((gpu, key))
            if not quiet:
                self._log_once(logging.INFO, gpu, key, kind, "not available")
            return None
        if isinstance(exc, ABSENT):
            if not quiet:
                self._log_once(logging.INFO, gpu, key, kind, "not available")
            return None
        if isinstance(exc, EMPTY):
            return None
        if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
            with self._lock:
                self._state = "missing"
                self._missing_reason = f"NVML library not found ({exc})"
            raise NvmlUnavailable(self._missing_reason) from exc
        if isinstance(exc, REINIT):
            self._mark_reinit(kind, generation)
            raise NvmlNotReady(f"NVML needs re-initialisation after {kind}") from exc
        if isinstance(exc, UNHEALTHY):
            if gpu is not None:
                raise DeviceUnhealthy(gpu, name, exc) from exc
            raise SourceError(f"NVML {name} failed: {kind}: {exc}") from exc
        if not quiet:
            self._log_once(logging.WARNING, gpu, key, kind, "failed")
        return None

    def set_unusable(self, gpu: int, key: str, why: str) -> None:
        """Treat ``key`` on ``gpu`` as unsupported until re-initialisation: the driver answers
        it, but not in a form the exporter can publish (``why`` is logged once).
        """
        self._unsupported.add((gpu, key))
        self._log_once(logging.INFO, gpu, key, why, "not used")

    def _log_once(self, level: int, gpu: int | None, key: str, kind: str, what: str) -> None:
        marker = (gpu, key, kind)
        if marker in self._logged:
            return
        self._logged.add(marker)
        where = "" if gpu is None else f"gpu={gpu} "
        LOG.log(level, "%sNVML %s %s: %s", where, key, what, kind)

    def _function_missing(self, name: str, why: str) -> None:
        if name not in self._missing_functions:
            self._missing_functions.add(name)
            LOG.info("NVML function %s unavailable (%s); driver older than the bindings", name, why)

    def is_unsupported(self, gpu: int | None, key: str) -> bool:
        """Whether ``key`` (a field or function name) was found unsupported on ``gpu``."""
        return (gpu, key) in self._unsupported or key in self._missing_functions

    def _first(self, names: Sequence[str], *args: Any, gpu: int, generation: int) -> Any:
        """The answer of the first function in ``names`` the driver has (versioned fallbacks)."""
        for name in names:
            if name in self._missing_functions:
                continue
            value = self.call(name, *args, gpu=gpu, generation=generation)
            if value is None and name in self._missing_functions:
                continue
            return value
        return None

    # -- initialisation ------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """How many times NVML was initialised (handles from older generations are stale)."""
        return self._generation

    def _mark_reinit(self, cause: str, generation: int | None) -> None:
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            if self._state == "backoff":
                return
            self._state = "backoff"
            self._cause = cause
            self._retry_at = self.clock() + self._delay
            LOG.warning(
                "NVML needs re-initialisation after %s; next attempt in %.0f s",
                cause,
                self._delay,
            )

    def ensure_ready(self) -> list[GpuDevice]:
        """The GPUs, initialising NVML first if needed and the back-off delay allows.

        Raises :class:`NvmlUnavailable` when the library is missing and
        :class:`NvmlNotReady` while waiting to re-initialise or when initialisation failed.
        """
        with self._lock:
            if self._state == "ready":
                return list(self._devices)
            if self._state == "missing":
                raise NvmlUnavailable(self._missing_reason)
            now = self.clock()
            if self._state == "backoff" and now < self._retry_at:
                raise NvmlNotReady(f"NVML is waiting to re-initialise after {self._cause}")
            retrying = self._state == "backoff"
            try:
                self._initialise()
            except NvmlUnavailable:
                raise
            except SourceError as exc:
                if retrying:
                    self._delay = min(self._delay * 2, self._backoff_max)
                self._state = "backoff"
                self._cause = self._cause or type(exc).__name__
                self._retry_at = now + self._delay
                LOG.warning(
                    "NVML initialisation failed (%s); next attempt in %.0f s", exc, self._delay
                )
                raise NvmlNotReady(
                    f"NVML initialisation failed after {self._cause}; retrying with back-off"
                ) from exc
            self._state = "ready"
            self._cause = ""
            self._delay = self._backoff_initial
            return list(self._devices)

    def _initialise(self) -> None:
        if self._initialised:
            self._initialised = False
            self._shutdown_quietly()
        self.call("nvmlInit")
        self._initialised = True
        self._generation += 1
        self._unsupported.clear()
        self._missing_functions.clear()
        self._links = None
        self.driver_version = text_of(self.call("nvmlSystemGetDriverVersion"))
        count = self.call("nvmlDeviceGetCount")
        if count is None:
            raise SourceError("NVML nvmlDeviceGetCount gave no answer")
        self._devices = [self._discover(index) for index in range(int(count))]
        LOG.info(
            "NVML initialised: driver %s, %d GPU(s)", self.driver_version or "?", len(self._devices)
        )

    def _shutdown_quietly(self) -> None:
        try:
            self.call("nvmlShutdown", quiet=True)
        except SourceError as exc:
            LOG.debug("nvmlShutdown before re-initialisation: %s", exc)

    def devices_if_ready(self) -> list[GpuDevice]:
        """The GPUs when NVML is initialised, else an empty list (never initialises)."""
        with self._lock:
            return list(self._devices) if self._state == "ready" else []

    def _discover(self, index: int) -> GpuDevice:
        generation = self._generation
        try:
            handle = self.call(
                "nvmlDeviceGetHandleByIndex", index, gpu=index, generation=generation
            )
            if handle is None:
                return GpuDevice(index, None, generation)

            def ask(name: str) -> Any:
                return self.call(name, handle, gpu=index, generation=generation)

            uuid = text_of(ask("nvmlDeviceGetUUID"))
            name = text_of(ask("nvmlDeviceGetName"))
            bus_id = bus_id_of(ask("nvmlDeviceGetPciInfo"))
            links: list[int] = []
            for link in range(int(pynvml.NVML_NVLINK_MAX_LINKS)):
                try:
                    state = self.call(
                        "nvmlDeviceGetNvLinkState",
                        handle,
                        link,
                        gpu=index,
                        field=f"nvlink{link}",
                        generation=generation,
                        expected=(pynvml.NVMLError_InvalidArgument,),
                        quiet=True,
                    )
                except pynvml.NVMLError_InvalidArgument:
                    break
                if state is not None:
                    links.append(link)
        except DeviceUnhealthy as exc:
            self._note_down(index, exc)
            return GpuDevice(index, None, generation)
        return GpuDevice(index, handle, generation, uuid, name, bus_id, tuple(links))

    def _rediscover(self, device: GpuDevice) -> GpuDevice:
        found = self._discover(device.index)
        with self._lock:
            if found.handle is not None and found.generation == self._generation:
                self._devices = [found if d.index == found.index else d for d in self._devices]
                self._links = None
        return found

    def close(self) -> None:
        """Shut NVML down (the background threads must be stopped first)."""
        with self._lock:
            if self._initialised:
                self._initialised = False
                self._shutdown_quietly()
            if self._state != "missing":
                self._state = "new"
            self._devices = []

    # -- health bookkeeping ----------------------------------------------------------------

    def _note_down(self, gpu: int, exc: Exception) -> None:
        with self._lock:
            if gpu in self._down:
                return
            self._down.add(gpu)
        LOG.warning("gpu=%d unhealthy: %s", gpu, exc)

    def _note_up(self, gpu: int) -> None:
        with self._lock:
            if gpu not in self._down:
                return
            self._down.discard(gpu)
        LOG.info("gpu=%d answers NVML again", gpu)

    def mismatch_counts(self) -> dict[int, int]:
        """Times each GPU's NVML locality disagreed with sysfs since the exporter started."""
        with self._lock:
            return dict(self._mismatches)
