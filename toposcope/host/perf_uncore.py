"""Inter-socket link traffic from uncore performance counters opened with Linux perf.

:class:`UncoreLinkCounters` opens the link events of :mod:`toposcope.host.
uncore_pmus` itself with the ``perf_event_open(2)`` syscall (through ``ctypes``; no ``perf``
binary), one counter per PMU and event on a CPU of its package. Transmitted data is counted
on each package, so every figure is *sent by* ``package`` *to* ``peer_package``.

Reading the counters needs ``CAP_PERFMON`` (or ``CAP_SYS_ADMIN``) or
``kernel.perf_event_paranoid`` <= 0, because uncore events are system-wide. When that is
not granted, :meth:`UncoreLinkCounters.open` raises :class:`SourceError` saying so and
the cross-socket collector falls back to the next source (Intel PCM,
:mod:`toposcope.host.pcm`, or the numastat estimate).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import platform
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from toposcope.errors import SourceError
from toposcope.host.uncore_pmus import (
    CpuModel,
    UncorePmu,
    encode_config,
    link_events,
    link_peer,
)
from toposcope.topology.sysfs_files import read_int

LOG = logging.getLogger(__name__)

# --------------------------------------------------------------------------- kernel interface


@dataclass(frozen=True)
class CounterEvent:
    """What one ``perf_event_open`` call opens: a PMU type, its config words, pid and CPU.

    ``pid=-1`` with a CPU counts everything on that CPU's package (uncore events).
    """

    pmu_type: int
    config: int
    cpu: int
    config1: int = 0
    config2: int = 0
    pid: int = -1


class CounterBackend(Protocol):
    """The kernel boundary: opens, reads and closes counters. Tests pass a fake of this."""

    def open(self, event: CounterEvent) -> int:
        """Open a counting event and return a handle; raise ``OSError`` as the syscall does."""
        ...

    def read(self, handle: int) -> int:
        """The counter's current 64-bit value."""
        ...

    def close(self, handle: int) -> None:
        """Release the counter."""
        ...


class _PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to ``config2`` (``PERF_ATTR_SIZE_VER1``, 72 bytes)."""

    _fields_ = (
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
        ("config2", ctypes.c_uint64),
    )


#: ``__NR_perf_event_open`` per architecture (asm/unistd*.h).
PERF_EVENT_OPEN_SYSCALL: Mapping[str, int] = {
    "x86_64": 298,
    "amd64": 298,
    "i386": 336,
    "i686": 336,
    "aarch64": 241,
    "riscv64": 241,
}
_PERF_FLAG_FD_CLOEXEC = 8


class PerfEventOpen:
    """The real backend: ``perf_event_open(2)`` via ``libc.syscall``, then ``read``/``close``."""

    def __init__(self, machine: str | None = None) -> None:
        self.machine = machine or platform.machine()
        self._number = PERF_EVENT_OPEN_SYSCALL.get(self.machine)
        libc = ctypes.CDLL(None, use_errno=True)
        self._syscall = libc.syscall
        self._syscall.restype = ctypes.c_long

    def open(self, event: CounterEvent) -> int:
        """Open ``event`` counting from now; ``OSError`` carries the syscall's errno."""
        if self._number is None:
            raise OSError(errno.ENOSYS, f"perf_event_open syscall number unknown on {self.machine}")
        attr = _PerfEventAttr()
        attr.type = event.pmu_type
        attr.size = ctypes.sizeof(_PerfEventAttr)
        attr.config = event.config
        attr.config1 = event.config1
        attr.config2 = event.config2
        fd = self._syscall(
            ctypes.c_long(self._number),
            ctypes.byref(attr),
            ctypes.c_int(event.pid),
            ctypes.c_int(event.cpu),
            ctypes.c_int(-1),
            ctypes.c_ulong(_PERF_FLAG_FD_CLOEXEC),
        )
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return int(fd)

    def read(self, handle: int) -> int:
        """The counter value (``read_format`` 0: one native-endian u64)."""
        data = os.read(handle, 8)
        if len(data) != 8:
            raise OSError(errno.EIO, f"short read of {len(data)} bytes from a perf counter")
        value: int = struct.unpack("=Q", data)[0]
        return value

    def close(self, handle: int) -> None:
        """Close the counter's file descriptor."""
        os.close(handle)


def perf_event_paranoid(procfs: Path | str) -> int | None:
    """``kernel.perf_event_paranoid`` (``None`` when the file is absent)."""
    return read_int(Path(procfs) / "sys" / "kernel" / "perf_event_paranoid")


# --------------------------------------------------------------------------- perf source


@dataclass(frozen=True)
class _PlannedCounter:
    pmu: str
    event_name: str
    package: int
    peer: int
    bytes_per_count: float
    event: CounterEvent


class UncoreLinkCounters:
    """Bytes sent between packages over their links, from uncore counters opened here.

    Built from the detected PMUs and the CPU -> package map; :meth:`open` opens every
    counter (all or nothing) and :meth:`read` returns ``{(package, peer_package): bytes}``
    counted since :meth:`open`, a monotonic counter for the exporter's lifetime.
    """

    name = "uncore"
    measured = True

    def __init__(
        self,
        pmus: Sequence[UncorePmu],
        cpu_package: Mapping[int, int],
        backend: CounterBackend,
        cpu_model: CpuModel | None = None,
        paranoid: int | None = None,
    ) -> None:
        self._backend = backend
        self._paranoid = paranoid
        self._handles: list[tuple[_PlannedCounter, int]] = []
        packages = sorted(set(cpu_package.values()))
        plan: list[_PlannedCounter] = []
        reasons: list[str] = []
        for pmu in pmus:
            events = link_events(pmu.kind, cpu_model)
            if not events:
                reasons.append(f"{pmu.name}: no known link-traffic event for this CPU model")
                continue
            for cpu in pmu.cpus:
                package = cpu_package.get(cpu)
                if package is None:
                    reasons.append(f"{pmu.name}: CPU {cpu} of its cpumask has no package")
                    continue
                peer = link_peer(pmu.kind, pmu.upi_links, package, packages)
                if peer is None:
                    reasons.append(f"{pmu.name}: no peer package known for package {package}")
                    continue
                for event in events:
                    try:
                        words = encode_config(pmu.formats, event.fields)
                    except ValueError as exc:
                        reasons.append(f"{pmu.name}: {exc}")
                        continue
                    plan.append(
                        _PlannedCounter(
                            pmu.name,
                            event.name,
                            package,
                            peer,
                            event.bytes_per_count,
                            CounterEvent(
                                pmu_type=pmu.type,
                                config=words["config"],
                                config1=words["config1"],
                                config2=words["config2"],
                                cpu=cpu,
                            ),
                        )
                    )
        for reason in reasons:
            LOG.debug("uncore: %s", reason)
        if not plan:
            detail = "; ".join(reasons) if reasons else "no uncore link PMU"
            raise SourceError(f"no usable uncore link counter ({detail})")
        self._plan = tuple(plan)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The ``(package, peer_package)`` pairs this source measures."""
        return sorted({(c.package, c.peer) for c in self._plan})

    def open(self) -> None:
        """Open every planned counter; on a failure close those opened, raise ``SourceError``."""
        if self._handles:
            return
        opened: list[tuple[_PlannedCounter, int]] = []
        for counter in self._plan:
            try:
                handle = self._backend.open(counter.event)
            except OSError as exc:
                for _, done in opened:
                    self._backend.close(done)
                hint = ""
                if exc.errno in (errno.EACCES, errno.EPERM):
                    hint = (
                        f" (kernel.perf_event_paranoid={self._paranoid}; uncore counters need "
                        "CAP_PERFMON or CAP_SYS_ADMIN, or perf_event_paranoid <= 0)"
                    )
                raise SourceError(
                    f"perf_event_open of {counter.event_name} on {counter.pmu} CPU "
                    f"{counter.event.cpu} failed: {exc.strerror or exc}{hint}"
                ) from exc
            opened.append((counter, handle))
        self._handles = opened

    def read(self) -> dict[tuple[int, int], float]:
        """Bytes sent from ``package`` to ``peer_package`` since the counters were opened."""
        if not self._handles:
            self.open()
        totals: dict[tuple[int, int], float] = {}
        for counter, handle in self._handles:
            try:
                count = self._backend.read(handle)
            except OSError as exc:
                raise SourceError(
                    f"reading {counter.event_name} on {counter.pmu} CPU {counter.event.cpu}"
                ) from exc
            key = (counter.package, counter.peer)
            totals[key] = totals.get(key, 0.0) + count * counter.bytes_per_count
        return totals

    def close(self) -> None:
        """Close every open counter."""
        for _, handle in self._handles:
            self._backend.close(handle)
        self._handles = []
