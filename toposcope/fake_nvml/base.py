"""The fake NVML's state and what every fake function does before it answers.

:class:`FakeNvmlBase` holds the GPUs of a :class:`~.spec.FakeSpec` (changeable by tests),
the fake clock, the library's reference count, the event sets and the
:class:`~.faults.FaultInjector`. :func:`nvml_call` marks a fake NVML function: it checks the
library is there and initialised, counts the call and applies gates and faults before the
function body runs. The functions themselves live in the ``*_calls`` modules, one family of
NVML calls each, and :class:`~.library.FakeNvml` puts them together.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

import pynvml

from toposcope.fake_nvml.activity_structs import FakeGpmSample
from toposcope.fake_nvml.faults import FaultInjector, Gate
from toposcope.fake_nvml.spec import (
    ERROR_CODES,
    NO_INSTANCE,
    FakeGpu,
    FakeMigInstance,
    FakeProcess,
    FakeSpec,
    Fault,
)
from toposcope.fake_nvml.structs import FakeEventData, FakeEventSet, FakeHandle
from toposcope.fake_nvml.values import Value, evaluate

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="FakeNvmlBase")


def raise_nvml(code: int) -> NoReturn:
    """Raise the bindings' own error class for an ``NVML_ERROR_*`` code."""
    raise pynvml.NVMLError(code)


class FakeNvmlBase:
    """State shared by every family of fake NVML calls, and the fake's test helpers.

    ``clock`` is the fake time readings and timed faults follow (default: seconds since the
    fake was made); ``sleep`` implements fault delays. Thread-safe like the library.
    """

    def __init__(
        self,
        spec: FakeSpec,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.spec = spec
        self._gpus = list(spec.gpus)
        self._clock = clock if clock is not None else time.monotonic
        self._start = self._clock()
        self._sleep = sleep if sleep is not None else time.sleep
        self._lock = threading.RLock()
        self._events_ready = threading.Condition(self._lock)
        self._refcount = 0
        self._injector = FaultInjector(spec.faults)
        self._pending_events = list(spec.events)
        self._event_sets: list[FakeEventSet] = []
        self._gpm_samples: list[FakeGpmSample] = []

    def __getattr__(self, name: str) -> Any:
        """Constants and error classes the fake does not define come from the bindings."""
        if name.startswith(("NVML_", "NVMLError", "nvmlClocks", "nvmlEventType")):
            return getattr(pynvml, name)
        raise AttributeError(f"fake NVML has no attribute {name!r}")

    # -- test helpers ---------------------------------------------------------------------

    def now(self) -> float:
        """Fake time in seconds since the fake started."""
        return self._clock() - self._start

    def call_count(self, call: str, gpu: int | None = None) -> int:
        """How many times ``call`` was made (on ``gpu``, or in all)."""
        return self._injector.call_count(call, gpu)

    def add_fault(
        self,
        call: str,
        error: str | int | None = None,
        *,
        gpu: int | None = None,
        after: int = 0,
        times: int | None = None,
        at: float | None = None,
        until: float | None = None,
        delay: float = 0.0,
    ) -> Fault:
        """Inject a fault (``error`` by ``NVML_ERROR_*`` name or code) and return it."""
        code = (
            ERROR_CODES[error.upper().removeprefix("NVML_ERROR_")]
            if isinstance(error, str)
            else error
        )
        fault = Fault(call, gpu, code, after, times, at, until, delay)
        self._injector.add(fault)
        return fault

    def clear_faults(self) -> None:
        """Remove every fault, including the description's."""
        self._injector.clear()

    def lose_gpu(self, gpu: int) -> Fault:
        """From now on every call on ``gpu`` raises ``NVML_ERROR_GPU_IS_LOST``."""
        return self.add_fault("*", "GPU_IS_LOST", gpu=gpu)

    def hold(self, call: str, gpu: int | None = None) -> Gate:
        """Block ``call`` (on ``gpu``) inside the fake until the returned gate is released."""
        return self._injector.hold(call, gpu)

    def release_all(self) -> None:
        """Release every gate (test teardown, so that no thread stays blocked in the fake)."""
        self._injector.release_all()

    def set_value(self, gpu: int, name: str, value: Value | Mapping[Any, Any] | None) -> None:
        """Change one reading or health signal of a GPU (a :class:`FakeGpu` field name).

        Health mappings take the description's shape (``remapped_rows``:
        ``{"correctable": 3.0}``, ``nvlink_errors_by_link``: ``{3: {"crc_flit": 7.0}}``), and
        so do the activity sources (``gpm``: ``{"sm_util": 50.0}``, ``None`` for no GPM).
        """
        if name not in FakeGpu.__dataclass_fields__ or name in ("index", "pci_bus_id"):
            raise ValueError(f"not a changeable fake GPU field: {name!r}")
        changes: dict[str, Any] = {name: value}
        with self._lock:
            self._gpus[gpu] = replace(self._gpus[gpu], **changes)

    def set_processes(self, gpu: int, processes: Sequence[FakeProcess]) -> None:
        """Replace the processes running on a GPU."""
        with self._lock:
            self._gpus[gpu] = replace(self._gpus[gpu], processes=tuple(processes))

    def gpm_samples_held(self) -> int:
        """GPM samples allocated and not freed yet (a caller that leaks them shows here)."""
        with self._lock:
            return sum(1 for sample in self._gpm_samples if not sample.freed)

    def emit_xid(self, gpu: int, xid: int) -> None:
        """Deliver an XID critical error event for ``gpu`` to every event set registered."""
        with self._lock:
            self._deliver(gpu, xid)

    # -- internals --------------------------------------------------------------------------

    def _deliver(self, gpu: int, xid: int) -> None:
        """Queue an XID event on every set registered for it (the caller holds the lock)."""
        for event_set in self._event_sets:
            mask = event_set.registered.get(gpu, 0)
            if not event_set.freed and mask & pynvml.nvmlEventTypeXidCriticalError:
                event_set.queue.append(
                    FakeEventData(
                        FakeHandle(gpu),
                        pynvml.nvmlEventTypeXidCriticalError,
                        xid,
                        NO_INSTANCE,
                        NO_INSTANCE,
                    )
                )
        self._events_ready.notify_all()

    def _enter(self, name: str, gpu: int | None, kind: str) -> None:
        """What every fake function does first: library and init state, gates, faults."""
        if not self.spec.library_present:
            raise_nvml(
                pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
                if kind == "init"
                else pynvml.NVML_ERROR_UNINITIALIZED
            )
        delay, error = self._injector.enter(name, gpu, kind, self.now)
        if error is None and kind != "init":
            with self._lock:
                if self._refcount == 0:
                    error = pynvml.NVML_ERROR_UNINITIALIZED
        if delay > 0:
            self._sleep(delay)
        if error is not None:
            raise_nvml(error)

    def _gpu(self, handle: object) -> FakeGpu:
        """The GPU of a handle (INVALID_ARGUMENT for anything else)."""
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self._gpus):
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[handle.index]

    def _mig(self, handle: FakeHandle) -> FakeMigInstance | None:
        """The MIG instance of a MIG handle, ``None`` for a full GPU's handle."""
        gpu = self._gpu(handle)
        if handle.mig is None:
            return None
        if handle.mig >= len(gpu.mig_instances):
            raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.mig_instances[handle.mig]

    def _read(self, value: Value | None) -> int:
        """A reading now, as NVML's integer (NOT_SUPPORTED when the description has none)."""
        if value is None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(evaluate(value, self.now()))

    def _full_gpu(self, handle: object) -> FakeGpu:
        """The GPU of a full-GPU handle; MIG handles do not answer whole-GPU queries."""
        gpu = self._gpu(handle)
        if isinstance(handle, FakeHandle) and self._mig(handle) is not None:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu


def nvml_call(
    kind: str,
) -> Callable[[Callable[Concatenate[S, P], R]], Callable[Concatenate[S, P], R]]:
    """Mark a fake NVML function: check init state, count, apply gates and faults first.

    ``kind`` is ``system`` (no handle), ``device`` (first argument is a device handle),
    ``index`` (first argument is a GPU index, which faults on that GPU also hit) or ``init``
    (``nvmlInit``, which may run before initialisation).
    """

    def decorate(func: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
        name = func.__name__

        @functools.wraps(func)
        def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            first = args[0] if args else None
            if kind == "index":
                gpu = first if isinstance(first, int) else None
            else:
                gpu = first.index if kind == "device" and isinstance(first, FakeHandle) else None
            self._enter(name, gpu, "device" if kind == "index" else kind)
            return func(self, *args, **kwargs)

        return wrapper

    return decorate
