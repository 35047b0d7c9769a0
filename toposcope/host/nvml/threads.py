"""The NVML background threads: PCIe throughput sampling and XID event watching.

``nvmlDeviceGetPcieThroughput`` blocks about 20 ms per direction and GPU, so it never runs in
a scrape: :class:`PcieSampler` samples it in the background. :class:`XidWatcher` waits on
XID critical error events (``nvmlEventSetWait_v2``) and counts them per GPU.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from toposcope.background import BackgroundLoop
from toposcope.errors import SourceError
from toposcope.host.nvml.devices import NvmlDevices
from toposcope.host.nvml.errors import DeviceUnhealthy
from toposcope.host.nvml.records import GpuDevice

LOG = logging.getLogger("toposcope.exporter.nvml")


@dataclass(frozen=True)
class PcieSample:
    """One background PCIe throughput reading of a GPU (bytes per second) and when it ended.

    ``tx_bytes_total`` and ``rx_bytes_total`` are the sampler's byte counters for the GPU
    (see :class:`PcieSampler`), ``None`` for a direction NVML gives no rate for.
    """

    tx_bytes_per_second: float | None
    rx_bytes_per_second: float | None
    taken_at: float
    tx_bytes_total: float | None = None
    rx_bytes_total: float | None = None


class _Worker(BackgroundLoop):
    """A daemon thread that loops until :meth:`stop`, backing off after failures."""

    name = "nvml-worker"

    def __init__(self) -> None:
        super().__init__()
        self._last_error = ""

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

    NVML gives a rate only, so the sampler also keeps a byte counter per GPU and direction
    from the exporter's start: each sample adds its rate times the time since the previous
    sample (the 20 ms window stands for the whole period, an estimate). After a gap longer
    than ``max_age`` or a GPU that stopped answering, counting starts again from the next
    sample without adding the gap (traffic not seen is not guessed); the counter never
    goes down.
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
        self._totals: dict[tuple[int, str], float] = {}
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
            except DeviceUnhealthy:
                with self._lock:
                    self._samples.pop(device.index, None)
                continue
            tx, rx = (int(r) * 1024.0 if r is not None else None for r in rates)
            now = self.devices.clock()
            with self._lock:
                if rates[0] is None and rates[1] is None:
                    self._samples.pop(device.index, None)
                    continue
                previous = self._samples.get(device.index)
                elapsed = now - previous.taken_at if previous is not None else 0.0
                counted = 0.0 < elapsed <= self.max_age
                tx_total, rx_total = (
                    self._count(device.index, direction, rate, elapsed if counted else 0.0)
                    for direction, rate in (("tx", tx), ("rx", rx))
                )
                self._samples[device.index] = PcieSample(tx, rx, now, tx_total, rx_total)
        with self._round_done:
            self._rounds += 1
            self._round_done.notify_all()

    def _count(self, gpu: int, direction: str, rate: float | None, elapsed: float) -> float | None:
        """Add ``rate`` x ``elapsed`` to a byte counter and return it (caller holds the lock)."""
        if rate is None:
            return None
        total = self._totals.get((gpu, direction), 0.0) + rate * elapsed
        self._totals[(gpu, direction)] = total
        return total

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
                except DeviceUnhealthy:
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
