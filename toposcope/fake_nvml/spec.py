"""What a fake NVML description says: the machine's GPUs, their faults and XID events.

These are the validated values :func:`~toposcope.fake_nvml.parse.parse_spec`
builds from a description file and the fake library serves. Units are NVML's own (mW, mJ,
MHz, KB/s, percent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pynvml

from toposcope.fake_nvml.values import Value
from toposcope.host.nvml.records import CLOCK_EVENT_REASONS

#: Clock event reason names (as the exporter publishes them) -> NVML bit.
CLOCK_EVENT_BITS: dict[str, int] = dict(CLOCK_EVENT_REASONS)

#: ``NVML_ERROR_*`` short name (``GPU_IS_LOST``) -> code, read from the bindings.
ERROR_CODES: dict[str, int] = {
    name.removeprefix("NVML_ERROR_"): value
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}

#: what NVML answers for no GPU or compute instance (a full GPU)
NO_INSTANCE = 0xFFFFFFFF
#: MIG devices one GPU can hold (an A100's seven slices)
MAX_MIG_DEVICES = 7


@dataclass(frozen=True)
class FakeProcess:
    """A process holding GPU memory; ``used_bytes`` ``None`` is what NVML gives under WDDM.

    ``sm_util`` is the percent of the GPU's time its kernels run, what
    ``nvmlDeviceGetProcessUtilization`` samples give it; ``None``: it has no samples.
    """

    pid: int
    used_bytes: int | None
    kind: str = "compute"
    sm_util: Value | None = None


@dataclass(frozen=True)
class FakeMigInstance:
    """A MIG GPU instance: its id, profile name (``3g.40gb``), UUID and memory."""

    gi_id: int
    profile: str
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: Value = 0.0


@dataclass(frozen=True)
class FakeNvLink:
    """One NVLink: the PCI id at its far end (normalised) and whether it is up."""

    remote: str
    active: bool = True


@dataclass(frozen=True)
class FakeGpu:
    """One GPU of the description; ``None`` readings make NVML answer NOT_SUPPORTED.

    Health signals: ``remapped_rows`` by ``correctable``/``uncorrectable`` with the
    ``row_remap_pending``/``row_remap_failed`` flags (row remapping, Ampere and later),
    ``retired_pages`` by ``single_bit``/``double_bit`` with ``retired_pages_pending`` (page
    retirement, before Ampere), ``nvlink_errors`` by ``replay``/``recovery``/``crc_flit``/
    ``crc_data`` on every link (``nvlink_errors_by_link`` overrides single links) and the
    ``pcie_replays`` counter.

    Throughput and activity: ``gpm`` (``None``: the GPU has no GPM, as before Hopper) by
    metric (``sm_util``, ``sm_occupancy``, ``any_tensor_util``, ``dram_bw_util`` in percent;
    ``pcie_tx_per_sec``, ``pcie_rx_per_sec`` and, per link, ``nvlink_tx_per_sec``,
    ``nvlink_rx_per_sec`` in MiB/s; ``gpm_by_link`` overrides single links; ``gpm_per_link``
    false answers the NVLink totals only, as drivers without per-link GPM metrics), the NVLink
    throughput field values ``nvlink_throughput`` (``data_tx_kib``, ``data_rx_kib`` counters
    per link; ``nvlink_throughput_by_link`` overrides) and the PCIe byte counter field values
    ``pcie_counters`` (``tx_bytes``, ``rx_bytes``; ``pcie_counter_bits`` their width, 32 as
    the driver answers them or 64). A metric or counter left out answers NOT_SUPPORTED.
    """

    index: int
    name: str
    uuid: str
    pci_bus_id: str
    pci_device_id: int = 0x20B210DE
    numa_node: int | None = None
    cpu_affinity: tuple[int, ...] = ()
    pcie_switch: str | None = None
    host_bridge: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: Value = 0.0
    utilization_gpu: Value | None = None
    utilization_memory: Value = 0.0
    power_mw: Value | None = None
    power_limit_mw: Value | None = None
    energy_mj: Value | None = None
    temperature_c: Value | None = None
    clock_sm_mhz: Value | None = None
    clock_mem_mhz: Value | None = None
    clock_event_reasons: int | None = None
    ecc: Mapping[tuple[str, str], Value] | None = None
    pcie_tx_kbps: Value | None = None
    pcie_rx_kbps: Value | None = None
    nvlinks: tuple[FakeNvLink, ...] | None = None
    mig_mode: str | None = None
    mig_instances: tuple[FakeMigInstance, ...] = ()
    processes: tuple[FakeProcess, ...] = ()
    xid_events: bool = True
    remapped_rows: Mapping[str, Value] | None = None
    row_remap_pending: bool = False
    row_remap_failed: bool = False
    retired_pages: Mapping[str, Value] | None = None
    retired_pages_pending: bool = False
    nvlink_errors: Mapping[str, Value] | None = None
    nvlink_errors_by_link: Mapping[int, Mapping[str, Value]] = field(default_factory=dict)
    pcie_replays: Value | None = None
    gpm: Mapping[str, Value] | None = None
    gpm_by_link: Mapping[int, Mapping[str, Value]] = field(default_factory=dict)
    gpm_per_link: bool = True
    nvlink_throughput: Mapping[str, Value] | None = None
    nvlink_throughput_by_link: Mapping[int, Mapping[str, Value]] = field(default_factory=dict)
    pcie_counters: Mapping[str, Value] | None = None
    pcie_counter_bits: int = 32


@dataclass(frozen=True)
class Fault:
    """An injected failure or slowness of one NVML call.

    ``call`` is a function name or ``"*"`` (every call that takes this GPU's handle);
    ``gpu`` limits it to one GPU (``None``: all); ``error`` is an ``NVML_ERROR_*`` code
    (``None``: only ``delay``); the first ``after`` matching calls pass; it then fires
    ``times`` times (``None``: for ever) while the fake time is in ``[at, until)``.
    """

    call: str
    gpu: int | None = None
    error: int | None = None
    after: int = 0
    times: int | None = None
    at: float | None = None
    until: float | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class XidEvent:
    """An XID critical error the fake delivers to event sets once fake time reaches ``at``."""

    at: float
    gpu: int
    xid: int


@dataclass(frozen=True)
class FakeSpec:
    """A whole fake machine as read from a description file."""

    source: str
    gpus: tuple[FakeGpu, ...]
    driver_version: str = "535.129.03"
    cuda_driver_version: int = 12020
    nvswitches: tuple[str, ...] = ()
    matrix: tuple[tuple[int, ...], ...] | None = None
    faults: tuple[Fault, ...] = ()
    events: tuple[XidEvent, ...] = ()
    library_present: bool = True
