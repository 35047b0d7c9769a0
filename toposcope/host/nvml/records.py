"""What the NVML device layer hands out: devices found, MIG instances, per-scrape snapshots.

Also the small conversions from the bindings' shapes: text from ``bytes``, the PCI bus id
of an ``nvmlPciInfo_t`` in sysfs form (and back in NVML's form), CPU or node numbers from
64-bit mask words, the MIG profile from a MIG device's name, and the clock event (throttle)
reasons with their bits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from toposcope.cpulist import bits_to_cpus
from toposcope.topology.nvml import normalise_pci_bus_id

LOG = logging.getLogger("toposcope.exporter.nvml")

#: Clock event (throttle) reasons as published in ``reason``, with their NVML bits. The bit
#: values are NVML's ABI, copied from ``nvml.h`` (``nvmlClocksEventReason*``, formerly
#: ``nvmlClocksThrottleReason*``) so that this module does not load the bindings (2.9 MB
#: resident with the rest of the NVML layer) on hosts that never talk to NVML; a test checks
#: every value against the installed bindings' constants.
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal", 0x20),
    ("hw_thermal", 0x40),
    ("hw_power_brake", 0x80),
    ("display_clocks_setting", 0x100),
)


def text_of(value: object) -> str | None:
    """Text of a bindings answer (``bytes`` decoded, trailing NULs dropped)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


def bus_id_of(pci_info: object) -> str | None:
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


def nvml_bus_id(bus_id: str | None) -> str | None:
    """A sysfs-form PCI bus id (``0000:07:00.0``) in NVML's form (``00000000:07:00.0``).

    NVML, ``nvidia-smi`` and dcgm-exporter's ``pci_bus_id`` label write an 8-digit upper-case
    domain and upper-case hex; toposcope's GPU series use that form so that they join
    dcgm-exporter's series on ``pci_bus_id``.
    """
    if bus_id is None:
        return None
    domain, bus, rest = normalise_pci_bus_id(bus_id).split(":")
    device, _, function = rest.partition(".")
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{int(function, 16):X}"


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
class GpuHealth:
    """The memory and link error signals of one GPU; ``None`` or empty means not supported.

    ``remapped_rows`` is ``(error_type, rows)`` for ``correctable`` and ``uncorrectable``
    (Ampere and later), ``retired_pages`` ``(cause, pages)`` for ``single_bit`` and
    ``double_bit`` (before Ampere), ``nvlink_errors`` ``(link, error_type, count)`` for
    ``replay``, ``recovery``, ``crc_flit`` and ``crc_data``; the flags say whether a reset is
    needed to apply a remap or a retirement, and whether a row remap failed.
    """

    remapped_rows: tuple[tuple[str, int], ...] = ()
    row_remap_pending: bool | None = None
    row_remap_failed: bool | None = None
    retired_pages: tuple[tuple[str, int], ...] = ()
    retired_pages_pending: bool | None = None
    nvlink_errors: tuple[tuple[int, str, int], ...] = ()
    pcie_replays: int | None = None


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
    health: GpuHealth = field(default_factory=GpuHealth)


#: The activity quantities of :class:`GpuActivity`, as published in ``quantity``.
ACTIVITY_QUANTITIES: tuple[str, ...] = (
    "pcie_bytes",
    "nvlink_bytes",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
)
#: The activity quantities that are ratios (0..1) rather than byte counters.
ACTIVITY_RATIOS: tuple[str, ...] = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")


@dataclass(frozen=True)
class GpuActivity:
    """One GPU's throughput counters and activity ratios, each from the best source it has.

    ``sources`` gives, for every quantity of :data:`ACTIVITY_QUANTITIES` that is decided,
    the source its values come from (``gpm``, ``field_values``, ``pcie_throughput``) or
    ``none`` when the GPU supports no source for it; a quantity left out is not decided yet
    (GPM needs two samples, so its quantities appear from the second reading on).
    ``pcie_bytes`` is ``(direction, bytes)``, ``nvlink_bytes`` ``(link, direction, bytes)``
    with ``link`` ``None`` where the source gives only the total over the GPU's links, and
    ``ratios`` ``(quantity, 0..1)``. Byte counts are counters: the driver's own where NVML
    keeps one (field values), else integrated by the exporter from rates (see
    :mod:`toposcope.host.nvml.activity`).
    """

    index: int
    sources: tuple[tuple[str, str], ...] = ()
    pcie_bytes: tuple[tuple[str, float], ...] = ()
    nvlink_bytes: tuple[tuple[int | None, str, float], ...] = ()
    ratios: tuple[tuple[str, float], ...] = ()

    def source(self, quantity: str) -> str | None:
        """The source of ``quantity``, ``none`` when unsupported, ``None`` when undecided."""
        return dict(self.sources).get(quantity)


class GpuActivitySource(Protocol):
    """Hands out the latest :class:`GpuActivity` of each GPU (the workloads collector reads it)."""

    def gpu_activity(self) -> dict[int, GpuActivity]:
        """The latest reading of every GPU by index; empty when there is none."""
        ...


@dataclass(frozen=True)
class GpuProcess:
    """A process holding GPU memory, as the GPU driver (NVML) reports it."""

    pid: int
    gpu: int
    used_bytes: int | None


class GpuProcessSource(Protocol):
    """Lists processes using GPUs: the NVML source provides it, the workloads collector reads it."""

    def gpu_processes(self) -> list[GpuProcess]:
        """Processes on every healthy GPU; empty when there is no GPU."""
        ...


class GpuProcessUtilizationSource(Protocol):
    """Hands out each process's share of each GPU's time (the workloads collector reads it)."""

    def gpu_process_utilization(self) -> dict[int, dict[int, float]]:
        """``{gpu index: {pid: SM share 0..1}}`` since the previous call, for the GPUs whose
        per-process samples NVML gave (:mod:`~toposcope.host.nvml.process_utilization`).
        """
        ...
