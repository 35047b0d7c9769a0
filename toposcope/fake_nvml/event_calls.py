"""The fake NVML's event calls: XID critical errors delivered to event sets.

Events come from the description's ``events`` (once the fake time reaches them) or from
:meth:`~.base.FakeNvmlBase.emit_xid`; waiting blocks in real time, as the library does.
"""

from __future__ import annotations

import time

import pynvml

from toposcope.fake_nvml.base import FakeNvmlBase, nvml_call, raise_nvml
from toposcope.fake_nvml.structs import FakeEventData, FakeEventSet, FakeHandle


class EventCalls(FakeNvmlBase):
    """``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents``, ``nvmlEventSetWait``, ``Free``."""

    # -- events ------------------------------------------------------------------------------------

    @nvml_call("system")
    def nvmlEventSetCreate(self) -> FakeEventSet:
        """A new, empty event set."""
        event_set = FakeEventSet()
        with self._lock:
            self._event_sets.append(event_set)
        return event_set

    @nvml_call("device")
    def nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, event_types: int, event_set: FakeEventSet
    ) -> None:
        """Register a device's events in a set (NOT_SUPPORTED where XIDs are not reported)."""
        gpu = self._full_gpu(handle)
        if event_types & pynvml.nvmlEventTypeXidCriticalError and not gpu.xid_events:
            raise_nvml(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            event_set.registered[gpu.index] = event_set.registered.get(gpu.index, 0) | event_types

    @nvml_call("system")
    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeoutms: int) -> FakeEventData:
        """Wait up to ``timeoutms`` (real time) for an event; TIMEOUT when none came."""
        deadline = time.monotonic() + timeoutms / 1000.0
        with self._events_ready:
            while True:
                if event_set.freed:
                    raise_nvml(pynvml.NVML_ERROR_INVALID_ARGUMENT)
                t = self.now()
                while self._pending_events and self._pending_events[0].at <= t:
                    due = self._pending_events.pop(0)
                    self._deliver(due.gpu, due.xid)
                if event_set.queue:
                    return event_set.queue.pop(0)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise_nvml(pynvml.NVML_ERROR_TIMEOUT)
                self._events_ready.wait(remaining)

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeoutms: int) -> FakeEventData:
        """The unversioned name the bindings also offer."""
        return self.nvmlEventSetWait_v2(event_set, timeoutms)

    @nvml_call("system")
    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        """Free an event set; a thread waiting on it wakes up."""
        with self._events_ready:
            event_set.freed = True
            if event_set in self._event_sets:
                self._event_sets.remove(event_set)
            self._events_ready.notify_all()
