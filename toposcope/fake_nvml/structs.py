"""The structures the fake library returns, shaped like the bindings' (same attribute names).

The real bindings return ctypes structures (``nvmlMemory_t``, ``nvmlPciInfo_t`` ...) or small
objects built from them; these frozen dataclasses carry the same attribute names and types,
``busId`` included as ``bytes``, so code under test reads them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FakeHandle:
    """An opaque device handle, as ``nvmlDeviceGetHandleByIndex`` returns; ``mig`` for MIG."""

    index: int
    mig: int | None = None


@dataclass(frozen=True)
class FakeMemory:
    """``nvmlMemory_t``: bytes."""

    total: int
    free: int
    used: int


@dataclass(frozen=True)
class FakeUtilization:
    """``nvmlUtilization_t``: percent."""

    gpu: int
    memory: int


@dataclass(frozen=True)
class FakePciInfo:
    """``nvmlPciInfo_t``; ``busId`` is bytes, as the real structure gives it."""

    busId: bytes
    busIdLegacy: bytes
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int


@dataclass(frozen=True)
class FakeProcessInfo:
    """The friendly object the real bindings build from ``nvmlProcessInfo_t``."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int
    computeInstanceId: int


@dataclass(frozen=True)
class FakeProcessUtilizationSample:
    """``nvmlProcessUtilizationSample_t``: a process's utilization over one sample period,
    in percent, stamped in microseconds of CPU time.
    """

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


@dataclass(frozen=True)
class FakeEventData:
    """``nvmlEventData_t``."""

    device: FakeHandle
    eventType: int
    eventData: int
    gpuInstanceId: int
    computeInstanceId: int


@dataclass
class FakeEventSet:
    """An event set: which devices registered for which events, and what is waiting."""

    registered: dict[int, int] = field(default_factory=dict)
    queue: list[FakeEventData] = field(default_factory=list)
    freed: bool = False


def pci_info(bus_id: str, device_id: int) -> FakePciInfo:
    """The ``nvmlPciInfo_t`` of a device at ``bus_id`` (sysfs form) with ``device_id``."""
    domain_text, bus_text, rest = bus_id.split(":")
    device_text = rest.split(".")[0]
    domain, bus, device = int(domain_text, 16), int(bus_text, 16), int(device_text, 16)
    return FakePciInfo(
        busId=f"{domain:08X}:{bus:02X}:{device:02X}.0".encode(),
        busIdLegacy=f"{domain:04X}:{bus:02X}:{device:02X}.0".encode(),
        domain=domain,
        bus=bus,
        device=device,
        pciDeviceId=device_id,
        pciSubSystemId=0x145F10DE,
    )
