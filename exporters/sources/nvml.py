"""NVML access for the exporter: one error-mapping helper, per-scrape GPU snapshots, threads.

Every NVML call goes through :meth:`NvmlDevices.call` (in the spirit of nvitop's
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
critical errors). Readings come back in base units: W, J, Hz, bytes, ratios, Celsius.
Equivalent commands: ``nvidia-smi --query-gpu=...``, ``nvidia-smi topo -m``,
``nvidia-smi nvlink -s``, ``nvidia-smi -q -d ECC``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from toposcope.cpulist import bits_to_cpus
from toposcope.errors import NoDataError, SourceError
from toposcope.exporters.context import GpuProcess
from toposcope.topology.model import Gpu, GpuLink, Topology
from toposcope.topology.nvml import (
    NvLinkRemote,
    NvmlGpuRecord,
    build_gpu_topology,
    normalise_pci_bus_id,
)

LOG = logging.getLogger("toposcope.exporter.nvml")

#: The bindings module (``pynvml``) or a stand-in with the same call surface (the fake).
Backend = Any

#: Absent, and not worth asking again until NVML is re-initialised.
_ABSENT_CACHED: tuple[type[Exception], ...] = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
)
#: Absent for now (permissions can change).
_ABSENT: tuple[type[Exception], ...] = (pynvml.NVMLError_NoPermission,)
#: Nothing there, which is normal (an empty MIG slot, no sample yet).
_EMPTY: tuple[type[Exception], ...] = (pynvml.NVMLError_NotFound, pynvml.NVMLError_NoData)
#: The device stopped answering properly: unhealthy for this scrape.
_UNHEALTHY: tuple[type[Exception], ...] = (
    pynvml.NVMLError_GpuIsLost,
    pynvml.NVMLError_Unknown,
    pynvml.NVMLError_Timeout,
    pynvml.NVMLError_ResetRequired,
)
#: The library lost its driver connection: shut down and initialise again, with back-off.
_REINIT: tuple[type[Exception], ...] = (
    pynvml.NVMLError_Uninitialized,
    pynvml.NVMLError_DriverNotLoaded,
    pynvml.NVMLError_LibRmVersionMismatch,
)
#: Raised by the bindings' unversioned wrappers when the driver lacks the versioned symbol.
_VERSION_MISMATCH: tuple[type[Exception], ...] = tuple(
    c for c in (getattr(pynvml, "NVMLLibraryMismatchError", None),) if isinstance(c, type)
)

#: Clock event (throttle) reasons as published in ``reason``, with their NVML bits.
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", pynvml.nvmlClocksEventReasonGpuIdle),
    ("applications_clocks_setting", pynvml.nvmlClocksEventReasonApplicationsClocksSetting),
    ("sw_power_cap", pynvml.nvmlClocksEventReasonSwPowerCap),
    ("hw_slowdown", pynvml.nvmlClocksEventReasonHwSlowdown),
    ("sync_boost", pynvml.nvmlClocksEventReasonSyncBoost),
    ("sw_thermal", pynvml.nvmlClocksEventReasonSwThermalSlowdown),
    ("hw_thermal", pynvml.nvmlClocksEventReasonHwThermalSlowdown),
    ("hw_power_brake", pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown),
    ("display_clocks_setting", pynvml.nvmlClocksEventReasonDisplayClockSetting),
)

_CLOCK_EVENT_CALLS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
#: The versioned call first; the plain one is deprecated (to go with CUDA 14) but is all
#: that older drivers have.
_TEMPERATURE_CALLS = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")
_COMPUTE_PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)
_GRAPHICS_PROCESS_CALLS = (
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
)
_ECC_KINDS = (
    ("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
    ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
)
_ECC_COUNTERS = (("volatile", pynvml.NVML_VOLATILE_ECC), ("aggregate", pynvml.NVML_AGGREGATE_ECC))

#: 64-bit words passed to the affinity calls: room for 1024 CPUs and 256 NUMA nodes.
_CPU_SET_WORDS = 16
_NODE_SET_WORDS = 4


class NvmlUnavailable(NoDataError):
    """The NVML library cannot be loaded (no NVIDIA driver on this host)."""


class NvmlNotReady(SourceError):
    """NVML must be (re-)initialised and the back-off delay has not passed yet."""


class _DeviceUnhealthy(Exception):
    """A device call failed in a way that makes the GPU unhealthy for this scrape."""

    def __init__(self, gpu: int, call: str, error: Exception) -> None:
        super().__init__(f"gpu={gpu} {call}: {type(error).__name__}: {error}")
        self.gpu = gpu
        self.error = error


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


def _bus_id(pci_info: object) -> str | None:
    """The normalised bus id of an ``nvmlPciInfo_t`` (``busId`` is bytes in the bindings)."""
    if pci_info is None:
        return None
    raw = getattr(pci_info, "busId", None)
    if raw is None:
        return None
    try:
        return normalise_pci_bus_id(raw)
    except ValueError:
        LOG.warning("NVML gave an unreadable PCI bus id %r", raw)
        return None


def words_to_ids(words: Iterable[int]) -> tuple[int, ...]:
    """CPU (or NUMA node) numbers from NVML's array of 64-bit mask words, lowest word first."""
    value = 0
    for position, word in enumerate(words):
        value |= (int(word) & 0xFFFFFFFFFFFFFFFF) << (64 * position)
    return bits_to_cpus(value)


def mig_profile(name: str | None) -> str:
    """The MIG profile (``3g.40gb``) from a MIG device name (``NVIDIA A100... MIG 3g.40gb``)."""
    if not name:
        return ""
    _, marker, profile = name.rpartition("MIG ")
    return profile.strip() if marker else ""


@dataclass(frozen=True)
class GpuDevice:
    """A GPU found at initialisation: index, handle (``None`` while lost) and identity.

    ``generation`` counts NVML initialisations, so that an error seen through a handle from
    before a re-initialisation does not trigger another one. ``nvlinks`` are the link
    numbers that answered at discovery.
    """

    index: int
    handle: Any
    generation: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    nvlinks: tuple[int, ...] = ()


@dataclass(frozen=True)
class MigInstance:
    """A MIG GPU instance: ``GPU_I_ID`` and ``GPU_I_PROFILE`` as dcgm-exporter names them."""

    gpu_instance_id: int
    profile: str
    uuid: str | None = None


@dataclass(frozen=True)
class GpuSnapshot:
    """One scrape's readings of one GPU, in base units; ``None`` means NVML had no value.

    ``up`` is ``False`` when the GPU was lost, timed out or failed unknown-ly during this
    scrape: then only identity is filled in. Locality (``numa_node``, ``cpu_affinity``) is
    sysfs's when sysfs knows the GPU, NVML's otherwise; ``locality_mismatch`` says they
    disagreed on this reading.
    """

    index: int
    up: bool
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    cpu_affinity: tuple[int, ...] = ()
    locality_mismatch: bool = False
    mig_mode: str | None = None
    mig_instances: tuple[MigInstance, ...] = ()
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    clock_events: tuple[tuple[str, bool], ...] | None = None
    ecc_errors: tuple[tuple[str, str, int], ...] = ()
    nvlink_up: tuple[tuple[int, bool], ...] = ()


class NvmlDevices:
    """The shared NVML device layer: initialisation with back-off, the helper, snapshots.

    ``backend`` is the ``pynvml`` module or the fake; ``topology`` returns the sysfs
    topology used to cross-check locality (``CollectorContext.topology.get``); ``clock`` is a
    monotonic clock for back-off and sample ages. NVML is initialised lazily on the first
    :meth:`ensure_ready`. Thread-safe: the scrape, the workloads collector and the
    background threads share one instance.
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
        except _VERSION_MISMATCH as exc:
            self._function_missing(name, str(exc))
            return None
        except pynvml.NVMLError as exc:
            return self._failed(exc, name, gpu=gpu, key=key, generation=generation, quiet=quiet)

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
        if isinstance(exc, _ABSENT_CACHED):
            self._unsupported.add((gpu, key))
            if not quiet:
                self._log_once(logging.INFO, gpu, key, kind, "not available")
            return None
        if isinstance(exc, _ABSENT):
            if not quiet:
                self._log_once(logging.INFO, gpu, key, kind, "not available")
            return None
        if isinstance(exc, _EMPTY):
            return None
        if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
            with self._lock:
                self._state = "missing"
                self._missing_reason = f"NVML library not found ({exc})"
            raise NvmlUnavailable(self._missing_reason) from exc
        if isinstance(exc, _REINIT):
            self._mark_reinit(kind, generation)
            raise NvmlNotReady(f"NVML needs re-initialisation after {kind}") from exc
        if isinstance(exc, _UNHEALTHY):
            if gpu is not None:
                raise _DeviceUnhealthy(gpu, name, exc) from exc
            raise SourceError(f"NVML {name} failed: {kind}: {exc}") from exc
        if not quiet:
            self._log_once(logging.WARNING, gpu, key, kind, "failed")
        return None

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
        self.driver_version = _text(self.call("nvmlSystemGetDriverVersion"))
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

            uuid = _text(ask("nvmlDeviceGetUUID"))
            name = _text(ask("nvmlDeviceGetName"))
            bus_id = _bus_id(ask("nvmlDeviceGetPciInfo"))
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
        except _DeviceUnhealthy as exc:
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

    # -- snapshots ---------------------------------------------------------------------------

    def sysfs_gpus(self) -> dict[str, Gpu]:
        """sysfs's GPUs by PCI bus id (empty when no topology is configured or it fails)."""
        if self._topology is None:
            return {}
        try:
            topology = self._topology()
        except SourceError as exc:
            self._log_once(logging.WARNING, None, "sysfs topology", str(exc), "unreadable")
            return {}
        return {g.pci_bus_id: g for g in topology.gpus if g.pci_bus_id is not None}

    def read_snapshots(self, devices: Sequence[GpuDevice]) -> list[GpuSnapshot]:
        """One snapshot per device, sharing one read of the sysfs topology."""
        sysfs = self.sysfs_gpus()
        return [self.read_snapshot(device, sysfs) for device in devices]

    def read_snapshot(self, device: GpuDevice, sysfs: dict[str, Gpu] | None = None) -> GpuSnapshot:
        """Read every quantity of one GPU once; a GPU that fails unhealthy comes back down.

        Raises :class:`NvmlNotReady` when NVML itself needs re-initialisation.
        """
        if sysfs is None:
            sysfs = self.sysfs_gpus()
        if device.handle is None:
            device = self._rediscover(device)
            if device.handle is None:
                return self._lost(device, sysfs)
        try:
            snapshot = self._read(device, sysfs)
        except _DeviceUnhealthy as exc:
            self._note_down(device.index, exc)
            return self._lost(device, sysfs)
        self._note_up(device.index)
        return snapshot

    def _lost(self, device: GpuDevice, sysfs: dict[str, Gpu]) -> GpuSnapshot:
        known = self._known(device)
        local = sysfs.get(known.pci_bus_id) if known.pci_bus_id else None
        return GpuSnapshot(
            index=device.index,
            up=False,
            uuid=known.uuid,
            name=known.name,
            pci_bus_id=known.pci_bus_id,
            numa_node=local.numa_node if local else None,
            cpu_affinity=local.local_cpus if local else (),
        )

    def _known(self, device: GpuDevice) -> GpuDevice:
        """The best identity known for a device (a lost one keeps what discovery found)."""
        if device.uuid is not None:
            return device
        with self._lock:
            for known in self._devices:
                if known.index == device.index and known.uuid is not None:
                    return known
        return device

    def _read(self, device: GpuDevice, sysfs: dict[str, Gpu]) -> GpuSnapshot:
        index, handle, generation = device.index, device.handle, device.generation

        def ask(name: str, *args: Any, field: str | None = None) -> Any:
            return self.call(name, handle, *args, gpu=index, field=field, generation=generation)

        utilization = ask("nvmlDeviceGetUtilizationRates")
        memory = ask("nvmlDeviceGetMemoryInfo")
        power = ask("nvmlDeviceGetPowerUsage")
        limit = ask("nvmlDeviceGetEnforcedPowerLimit")
        energy = ask("nvmlDeviceGetTotalEnergyConsumption")
        temperature = self._first(
            _TEMPERATURE_CALLS,
            handle,
            pynvml.NVML_TEMPERATURE_GPU,
            gpu=index,
            generation=generation,
        )
        sm_clock = ask("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_SM, field="clock_sm")
        mem_clock = ask("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_MEM, field="clock_memory")
        reasons = self._first(_CLOCK_EVENT_CALLS, handle, gpu=index, generation=generation)
        ecc: list[tuple[str, str, int]] = []
        for kind_name, kind in _ECC_KINDS:
            for counter_name, counter in _ECC_COUNTERS:
                count = ask(
                    "nvmlDeviceGetTotalEccErrors",
                    kind,
                    counter,
                    field=f"ecc_{kind_name}_{counter_name}",
                )
                if count is not None:
                    ecc.append((kind_name, counter_name, int(count)))
        links: list[tuple[int, bool]] = []
        for link in device.nvlinks:
            state = ask("nvmlDeviceGetNvLinkState", link, field=f"nvlink{link}")
            if state is not None:
                links.append((link, int(state) == int(pynvml.NVML_FEATURE_ENABLED)))
        mig_mode, instances = self._mig(device)
        numa_node, cpus, mismatch = self._locality(device, sysfs, count=True)
        return GpuSnapshot(
            index=index,
            up=True,
            uuid=device.uuid,
            name=device.name,
            pci_bus_id=device.pci_bus_id,
            numa_node=numa_node,
            cpu_affinity=cpus,
            locality_mismatch=mismatch,
            mig_mode=mig_mode,
            mig_instances=instances,
            utilization_ratio=int(utilization.gpu) / 100.0 if utilization is not None else None,
            memory_utilization_ratio=(
                int(utilization.memory) / 100.0 if utilization is not None else None
            ),
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            power_watts=int(power) / 1000.0 if power is not None else None,
            power_limit_watts=int(limit) / 1000.0 if limit is not None else None,
            energy_joules=int(energy) / 1000.0 if energy is not None else None,
            temperature_celsius=float(temperature) if temperature is not None else None,
            sm_clock_hertz=int(sm_clock) * 1e6 if sm_clock is not None else None,
            memory_clock_hertz=int(mem_clock) * 1e6 if mem_clock is not None else None,
            clock_events=(
                tuple((name, bool(int(reasons) & bit)) for name, bit in CLOCK_EVENT_REASONS)
                if reasons is not None
                else None
            ),
            ecc_errors=tuple(ecc),
            nvlink_up=tuple(links),
        )

    def _mig(self, device: GpuDevice) -> tuple[str | None, tuple[MigInstance, ...]]:
        index, handle, generation = device.index, device.handle, device.generation
        modes = self.call("nvmlDeviceGetMigMode", handle, gpu=index, generation=generation)
        if modes is None:
            return None, ()
        if int(modes[0]) != int(pynvml.NVML_DEVICE_MIG_ENABLE):
            return "disabled", ()
        slots = self.call(
            "nvmlDeviceGetMaxMigDeviceCount", handle, gpu=index, generation=generation
        )
        instances: list[MigInstance] = []
        for slot in range(int(slots or 0)):
            mig = self.call(
                "nvmlDeviceGetMigDeviceHandleByIndex",
                handle,
                slot,
                gpu=index,
                field="mig_device",
                generation=generation,
            )
            if mig is None:
                continue

            def ask(name: str, field: str, mig: Any = mig) -> Any:
                return self.call(name, mig, gpu=index, field=field, generation=generation)

            instance_id = ask("nvmlDeviceGetGpuInstanceId", "mig_gpu_instance_id")
            if instance_id is None:
                continue
            name = _text(ask("nvmlDeviceGetName", "mig_name"))
            uuid = _text(ask("nvmlDeviceGetUUID", "mig_uuid"))
            instances.append(MigInstance(int(instance_id), mig_profile(name), uuid))
        instances.sort(key=lambda m: m.gpu_instance_id)
        return "enabled", tuple(instances)

    def _locality(
        self, device: GpuDevice, sysfs: dict[str, Gpu], *, count: bool
    ) -> tuple[int | None, tuple[int, ...], bool]:
        """NUMA node and CPUs of a GPU: NVML's, overruled by sysfs where they disagree."""
        index, handle, generation = device.index, device.handle, device.generation

        def ask(name: str, *args: Any) -> Any:
            return self.call(name, handle, *args, gpu=index, generation=generation)

        words = ask("nvmlDeviceGetCpuAffinity", _CPU_SET_WORDS)
        nvml_cpus = words_to_ids(words) if words is not None else ()
        node_words = ask(
            "nvmlDeviceGetMemoryAffinity", _NODE_SET_WORDS, pynvml.NVML_AFFINITY_SCOPE_NODE
        )
        nodes = words_to_ids(node_words) if node_words is not None else ()
        nvml_node: int | None = nodes[0] if len(nodes) == 1 else None
        if nvml_node is None:
            value = ask("nvmlDeviceGetNumaNodeId")
            nvml_node = int(value) if value is not None and int(value) >= 0 else None
        local = sysfs.get(device.pci_bus_id) if device.pci_bus_id else None
        if local is None:
            return nvml_node, nvml_cpus, False
        mismatch = bool(
            (nvml_node is not None and local.numa_node is not None and nvml_node != local.numa_node)
            or (nvml_cpus and local.local_cpus and set(nvml_cpus) != set(local.local_cpus))
        )
        if mismatch and count:
            with self._lock:
                self._mismatches[index] = self._mismatches.get(index, 0) + 1
            self._log_once(
                logging.WARNING,
                index,
                "locality",
                f"NVML says node {nvml_node}, sysfs node {local.numa_node}",
                "disagrees with sysfs (sysfs wins)",
            )
        node = local.numa_node if local.numa_node is not None else nvml_node
        return node, local.local_cpus or nvml_cpus, mismatch

    # -- processes (the workloads collector's GPU source) ----------------------------------

    def gpu_processes(self) -> list[GpuProcess]:
        """Processes holding memory on every healthy GPU (compute and graphics merged).

        Empty when NVML is unavailable or re-initialising: GPU attribution is then missing
        from the workloads collector's output, which otherwise goes on.
        """
        try:
            devices = self.ensure_ready()
        except (NvmlUnavailable, NvmlNotReady):
            return []
        processes: list[GpuProcess] = []
        for device in devices:
            if device.handle is None:
                continue
            try:
                processes.extend(self._processes(device))
            except _DeviceUnhealthy as exc:
                self._note_down(device.index, exc)
            except NvmlNotReady:
                return []
        return processes

    def _processes(self, device: GpuDevice) -> list[GpuProcess]:
        used_by_pid: dict[int, int | None] = {}
        for calls in (_COMPUTE_PROCESS_CALLS, _GRAPHICS_PROCESS_CALLS):
            found = self._first(
                calls, device.handle, gpu=device.index, generation=device.generation
            )
            for process in found or ():
                pid = int(process.pid)
                raw = getattr(process, "usedGpuMemory", None)
                used = int(raw) if raw is not None else None
                if pid not in used_by_pid:
                    used_by_pid[pid] = used
                elif used is not None:
                    previous = used_by_pid[pid]
                    used_by_pid[pid] = used if previous is None else max(previous, used)
        return [GpuProcess(pid, device.index, used) for pid, used in used_by_pid.items()]

    # -- GPU topology ----------------------------------------------------------------------------

    def gpu_records(self) -> tuple[list[NvmlGpuRecord], dict[tuple[int, int], int]]:
        """What NVML says about each GPU's locality and links, for the topology builder."""
        devices = [d for d in self.ensure_ready() if d.handle is not None]
        sysfs = self.sysfs_gpus()
        records: list[NvmlGpuRecord] = []
        usable: list[GpuDevice] = []
        for device in devices:
            try:
                records.append(self._record(device, sysfs))
                usable.append(device)
            except _DeviceUnhealthy as exc:
                self._note_down(device.index, exc)
        ancestors: dict[tuple[int, int], int] = {}
        for a in usable:
            for b in usable:
                if b.index <= a.index:
                    continue
                try:
                    level = self.call(
                        "nvmlDeviceGetTopologyCommonAncestor",
                        a.handle,
                        b.handle,
                        gpu=a.index,
                        generation=a.generation,
                    )
                except _DeviceUnhealthy as exc:
                    self._note_down(exc.gpu, exc)
                    continue
                if level is not None:
                    ancestors[(a.index, b.index)] = int(level)
                    ancestors[(b.index, a.index)] = int(level)
        return records, ancestors

    def _record(self, device: GpuDevice, sysfs: dict[str, Gpu]) -> NvmlGpuRecord:
        index, handle, generation = device.index, device.handle, device.generation

        def ask(name: str, link: int, field: str) -> Any:
            return self.call(
                name, handle, link, gpu=index, field=f"{field}{link}", generation=generation
            )

        numa_node, cpus, _ = self._locality(device, sysfs, count=False)
        remotes: list[NvLinkRemote] = []
        for link in device.nvlinks:
            state = ask("nvmlDeviceGetNvLinkState", link, "nvlink")
            if state is None or int(state) != int(pynvml.NVML_FEATURE_ENABLED):
                continue
            remote = _bus_id(ask("nvmlDeviceGetNvLinkRemotePciInfo", link, "nvlink_remote"))
            if remote is None:
                continue
            kind = ask("nvmlDeviceGetNvLinkRemoteDeviceType", link, "nvlink_remote_type")
            switch = (
                None if kind is None else int(kind) == int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
            )
            remotes.append(NvLinkRemote(link, remote, switch))
        return NvmlGpuRecord(
            index=index,
            pci_bus_id=device.pci_bus_id,
            uuid=device.uuid,
            model=device.name,
            numa_node=numa_node,
            local_cpus=cpus,
            nvlinks=tuple(remotes),
        )

    def gpu_topology(self) -> tuple[tuple[Gpu, ...], tuple[GpuLink, ...]]:
        """Model GPUs and the ``nvidia-smi topo -m`` link matrix as NVML sees them."""
        records, ancestors = self.gpu_records()
        return build_gpu_topology(records, ancestors)

    def gpu_links(self) -> tuple[GpuLink, ...]:
        """The link matrix, computed once per NVML initialisation (it does not change)."""
        with self._lock:
            cached = self._links
            generation = self._generation
        if cached is not None and cached[0] == generation:
            return cached[1]
        _, links = self.gpu_topology()
        with self._lock:
            if self._generation == generation:
                self._links = (generation, links)
        return links


# ------------------------------------------------------------------------------------------
# background threads


@dataclass(frozen=True)
class PcieSample:
    """One background PCIe throughput reading of a GPU (bytes per second) and when it ended."""

    tx_bytes_per_second: float | None
    rx_bytes_per_second: float | None
    taken_at: float


class _Worker:
    """A daemon thread that loops until :meth:`stop`, backing off after failures."""

    name = "nvml-worker"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error = ""

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Ask the thread to stop and wait for it; ``False`` if it is still stuck in a call."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _log_failure(self, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if message != self._last_error:
            self._last_error = message
            LOG.warning("%s: %s; backing off", self.name, message)

    def _log_recovery(self) -> None:
        if self._last_error:
            self._last_error = ""
            LOG.info("%s: recovered", self.name)

    def _run(self) -> None:
        raise NotImplementedError


class PcieSampler(_Worker):
    """Samples ``nvmlDeviceGetPcieThroughput`` (TX and RX, KB/s) for every GPU in the background.

    The call blocks about 20 ms per direction and GPU, so a scrape never makes it: it reads
    :meth:`latest` and publishes the sample's age; a sample older than ``max_age`` (three
    periods by default) is not served as a rate.
    """

    name = "nvml-pcie-sampler"

    def __init__(
        self, devices: NvmlDevices, period: float = 1.0, max_age: float | None = None
    ) -> None:
        super().__init__()
        self.devices = devices
        self.period = period
        self.max_age = max_age if max_age is not None else 3 * period
        self._samples: dict[int, PcieSample] = {}
        self._lock = threading.Lock()
        self._round_done = threading.Condition(self._lock)
        self._rounds = 0

    def latest(self, gpu: int) -> PcieSample | None:
        """The last sample of ``gpu``, however old."""
        with self._lock:
            return self._samples.get(gpu)

    @property
    def rounds(self) -> int:
        """Completed sampling rounds."""
        with self._lock:
            return self._rounds

    def wait_for_rounds(self, rounds: int, timeout: float) -> bool:
        """Block until ``rounds`` rounds are complete (tests); ``False`` on timeout."""
        with self._round_done:
            return self._round_done.wait_for(lambda: self._rounds >= rounds, timeout)

    def sample_once(self) -> None:
        """One round over the GPUs NVML has ready."""
        for device in self.devices.devices_if_ready():
            if self._stop.is_set():
                break
            if device.handle is None:
                continue
            try:
                rates = [
                    self.devices.call(
                        "nvmlDeviceGetPcieThroughput",
                        device.handle,
                        counter,
                        gpu=device.index,
                        field=f"pcie_{direction}",
                        generation=device.generation,
                    )
                    for direction, counter in (
                        ("tx", pynvml.NVML_PCIE_UTIL_TX_BYTES),
                        ("rx", pynvml.NVML_PCIE_UTIL_RX_BYTES),
                    )
                ]
            except _DeviceUnhealthy:
                with self._lock:
                    self._samples.pop(device.index, None)
                continue
            tx, rx = (int(r) * 1024.0 if r is not None else None for r in rates)
            sample = PcieSample(tx, rx, taken_at=self.devices.clock())
            with self._lock:
                if rates[0] is None and rates[1] is None:
                    self._samples.pop(device.index, None)
                else:
                    self._samples[device.index] = sample
        with self._round_done:
            self._rounds += 1
            self._round_done.notify_all()

    def _run(self) -> None:
        delay = self.period
        while not self._stop.is_set():
            try:
                self.sample_once()
                self._log_recovery()
                delay = self.period
            except Exception as exc:
                self._log_failure(exc)
                delay = min(max(delay * 2, 1.0), 60.0)
            self._stop.wait(delay)


class XidWatcher(_Worker):
    """Counts XID critical errors per GPU from NVML events in the background.

    Registers ``nvmlEventTypeXidCriticalError`` for every GPU in one event set and waits
    with ``nvmlEventSetWait_v2`` (``wait_ms`` at a time, so that :meth:`stop` is noticed);
    after a re-initialisation the set is rebuilt. Counts start at exporter start.
    """

    name = "nvml-xid-watcher"

    def __init__(self, devices: NvmlDevices, wait_ms: int = 500, idle: float = 1.0) -> None:
        super().__init__()
        self.devices = devices
        self.wait_ms = wait_ms
        self.idle = idle
        self._counts: dict[tuple[int, int], int] = {}
        self._lock = threading.Lock()
        self._seen = threading.Condition(self._lock)
        self._events = 0
        self._watching = threading.Event()

    def counts(self) -> dict[tuple[int, int], int]:
        """``(gpu, xid) -> count`` since the exporter started."""
        with self._lock:
            return dict(self._counts)

    def wait_until_watching(self, timeout: float) -> bool:
        """Block until the event set is registered and being waited on (tests)."""
        return self._watching.wait(timeout)

    def wait_for_events(self, events: int, timeout: float) -> bool:
        """Block until ``events`` XID events have been counted (tests); ``False`` on timeout."""
        with self._seen:
            return self._seen.wait_for(lambda: self._events >= events, timeout)

    def _record(self, gpu: int, xid: int) -> None:
        with self._seen:
            self._counts[(gpu, xid)] = self._counts.get((gpu, xid), 0) + 1
            self._events += 1
            self._seen.notify_all()
        LOG.warning("gpu=%d XID %d", gpu, xid)

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                self._watch()
                self._log_recovery()
                delay = 1.0
            except Exception as exc:
                self._watching.clear()
                self._log_failure(exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 60.0)

    def _gpu_of(self, handle: Any, devices: Sequence[GpuDevice]) -> int | None:
        for device in devices:
            if device.handle is handle:
                return device.index
        index = self.devices.call("nvmlDeviceGetIndex", handle, field="event_device")
        return int(index) if index is not None else None

    def _watch(self) -> None:
        devices = [d for d in self.devices.devices_if_ready() if d.handle is not None]
        if not devices:
            self._stop.wait(self.idle)
            return
        generation = devices[0].generation
        event_set = self.devices.call("nvmlEventSetCreate")
        if event_set is None:
            self._stop.wait(60.0)
            return
        try:
            registered = 0
            for device in devices:
                try:
                    self.devices.call(
                        "nvmlDeviceRegisterEvents",
                        device.handle,
                        pynvml.nvmlEventTypeXidCriticalError,
                        event_set,
                        gpu=device.index,
                        field="xid_events",
                        generation=generation,
                    )
                except _DeviceUnhealthy:
                    continue
                if not self.devices.is_unsupported(device.index, "xid_events"):
                    registered += 1
            if registered == 0:
                self._stop.wait(60.0)
                return
            self._watching.set()
            while not self._stop.is_set() and self.devices.generation == generation:
                try:
                    data = self.devices.call(
                        "nvmlEventSetWait_v2",
                        event_set,
                        self.wait_ms,
                        expected=(pynvml.NVMLError_Timeout,),
                    )
                except pynvml.NVMLError_Timeout:
                    continue
                if data is None or not int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
                    continue
                gpu = self._gpu_of(data.device, devices)
                if gpu is not None:
                    self._record(gpu, int(data.eventData))
        finally:
            self._watching.clear()
            try:
                self.devices.call("nvmlEventSetFree", event_set, quiet=True)
            except SourceError as exc:
                LOG.debug("nvmlEventSetFree: %s", exc)
