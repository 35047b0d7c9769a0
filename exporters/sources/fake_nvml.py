"""A fake NVML backend that behaves like the ``pynvml`` module, driven by a YAML/JSON file.

The exporter's NVML source takes the bindings as a backend object; :class:`FakeNvml` stands in
for the ``pynvml`` module with the same function names, argument order and return shapes
(structures become small objects with the same attribute names, ``busId`` stays ``bytes``),
and it raises the *real* ``pynvml.NVMLError`` subclasses, so code under test cannot tell it
from the library. Constants and error classes the fake does not define itself are taken
from ``pynvml`` (``fake.NVML_CLOCK_SM``, ``fake.NVMLError_GpuIsLost``).

A description file (see ``fake_nvml_specs/*.yaml``) gives the machine: GPUs with model,
UUID, PCI id, NUMA node and CPU affinity, the PCIe path between every pair, NVLinks (to peers
or NVSwitches), MIG instances, processes, and readings as constants, step series over a fake
clock (``{series: [[t, v], ...], period: p}``) or counters (``{start: s, rate: r}``).
``faults`` inject any NVML error by its ``NVML_ERROR_*`` name into a call, per GPU, after N
good calls, for a number of times or a window of fake time, with an optional delay; ``call:
"*"`` hits every call on that GPU (a GPU lost mid-run). A malformed file raises
:class:`~toposcope.errors.ConfigError` naming the file, the field and the problem.

Units are NVML's own (mW, mJ, MHz, KB/s, percent): converting them is the source's job.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

import pynvml
import yaml

from toposcope.cpulist import parse_cpulist
from toposcope.errors import ConfigError
from toposcope.topology.nvml import normalise_pci_bus_id

SPEC_DIR = Path(__file__).resolve().parent / "fake_nvml_specs"
DEFAULT_SPEC = "dgx-a100"

P = ParamSpec("P")
R = TypeVar("R")

#: ``nvidia-smi topo -m`` labels accepted in a spec's ``topology.matrix`` -> NVML level.
_MATRIX_LEVELS: dict[str, int] = {
    "X": pynvml.NVML_TOPOLOGY_INTERNAL,
    "PIX": pynvml.NVML_TOPOLOGY_SINGLE,
    "PXB": pynvml.NVML_TOPOLOGY_MULTIPLE,
    "PHB": pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": pynvml.NVML_TOPOLOGY_NODE,
    "SYS": pynvml.NVML_TOPOLOGY_SYSTEM,
}

#: Clock event reason names (as the exporter publishes them) -> NVML bit.
CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,
    "applications_clocks_setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
    "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
    "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
    "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
    "sw_thermal": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
    "hw_power_brake": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
    "display_clocks_setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
}

#: ``NVML_ERROR_*`` short name (``GPU_IS_LOST``) -> code, read from the bindings.
ERROR_CODES: dict[str, int] = {
    name.removeprefix("NVML_ERROR_"): value
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}

_NO_INSTANCE = 0xFFFFFFFF
_MAX_MIG_DEVICES = 7


# --------------------------------------------------------------------------------------
# values over a fake clock


@dataclass(frozen=True)
class Series:
    """A step function of fake time: the value of the last point at or before ``t``.

    With ``period`` the series repeats; before the first point the first value holds.
    """

    points: tuple[tuple[float, float], ...]
    period: float | None = None

    def at(self, t: float) -> float:
        """The value at fake time ``t`` (seconds since the fake started)."""
        if self.period:
            t = t % self.period
        value = self.points[0][1]
        for when, point in self.points:
            if when <= t:
                value = point
            else:
                break
        return value


@dataclass(frozen=True)
class Ramp:
    """A counter: ``start + rate * t`` (energy in mJ, ECC error counts)."""

    start: float
    rate: float

    def at(self, t: float) -> float:
        """The counter's value at fake time ``t``."""
        return self.start + self.rate * max(t, 0.0)


Value = float | Series | Ramp


def evaluate(value: Value, t: float) -> float:
    """The number a spec value stands for at fake time ``t``."""
    if isinstance(value, Series | Ramp):
        return value.at(t)
    return value


class ManualClock:
    """A monotonic clock that only moves when told to; tests share it with the NVML source."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        """The current fake time in seconds."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward and return the new time."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go back")
        with self._lock:
            self._now += seconds
            return self._now


# --------------------------------------------------------------------------------------
# the description


@dataclass(frozen=True)
class FakeProcess:
    """A process holding GPU memory; ``used_bytes`` ``None`` is what NVML gives under WDDM."""

    pid: int
    used_bytes: int | None
    kind: str = "compute"


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
    """One GPU of the description; ``None`` readings make NVML answer NOT_SUPPORTED."""

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


class _Fields:
    """Reads one mapping of a description, collecting the path of each field for errors."""

    def __init__(self, source: str, path: str, data: object, allowed: Iterable[str]) -> None:
        self.source = source
        self.path = path
        if not isinstance(data, Mapping):
            raise self.error(path, f"expected a mapping, got {type(data).__name__}")
        self.data: Mapping[str, Any] = data
        unknown = sorted(str(k) for k in data if k not in set(allowed))
        if unknown:
            raise self.error(
                self._at(unknown[0]), f"unknown field (known: {', '.join(sorted(allowed))})"
            )

    def error(self, path: str, problem: str) -> ConfigError:
        return ConfigError(f"fake NVML description {self.source}: {path or '(top)'}: {problem}")

    def _at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def raw(self, key: str) -> Any:
        return self.data.get(key)

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise self.error(self._at(key), f"expected text, got {type(value).__name__}")
        return str(value)

    def integer(
        self, key: str, default: int | None = None, minimum: int | None = None
    ) -> int | None:
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(self._at(key), f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(self._at(key), f"must be at least {minimum}, got {value}")
        return value

    def number(
        self, key: str, default: float | None = None, minimum: float | None = None
    ) -> float | None:
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(self._at(key), f"expected a number, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(self._at(key), f"must be at least {minimum}, got {value}")
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(self._at(key), f"expected true or false, got {value!r}")
        return value

    def value(self, key: str, maximum: float | None = None) -> Value | None:
        raw = self.data.get(key)
        if raw is None:
            return None
        return _parse_value(self, self._at(key), raw, maximum)

    def listing(self, key: str) -> list[Any]:
        raw = self.data.get(key)
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.error(self._at(key), f"expected a list, got {type(raw).__name__}")
        return raw

    def child(self, key: str, allowed: Iterable[str]) -> _Fields | None:
        raw = self.data.get(key)
        if raw is None:
            return None
        return _Fields(self.source, self._at(key), raw, allowed)


def _number(fields: _Fields, path: str, raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise fields.error(path, f"expected a number, got {raw!r}")
    return float(raw)


def _parse_value(fields: _Fields, path: str, raw: object, maximum: float | None) -> Value:
    """A constant, ``{series: [[t, v], ...], period: p}`` or ``{start: s, rate: r}``."""
    if isinstance(raw, Mapping):
        if "series" in raw:
            sub = _Fields(fields.source, path, raw, ("series", "period"))
            points_raw = sub.listing("series")
            if not points_raw:
                raise fields.error(f"{path}.series", "needs at least one [time, value] point")
            points: list[tuple[float, float]] = []
            for i, point in enumerate(points_raw):
                where = f"{path}.series[{i}]"
                if not isinstance(point, list | tuple) or len(point) != 2:
                    raise fields.error(where, f"expected [time, value], got {point!r}")
                when = _number(fields, where, point[0])
                number = _number(fields, where, point[1])
                if points and when <= points[-1][0]:
                    raise fields.error(where, "times must increase")
                _check_range(fields, where, number, maximum)
                points.append((when, number))
            period = sub.number("period", minimum=0.0)
            if period is not None and period <= points[-1][0]:
                raise fields.error(f"{path}.period", "must be longer than the last point's time")
            return Series(tuple(points), period)
        sub = _Fields(fields.source, path, raw, ("start", "rate"))
        start = sub.number("start", 0.0, minimum=0.0)
        rate = sub.number("rate", 0.0, minimum=0.0)
        assert start is not None and rate is not None
        return Ramp(start, rate)
    number = _number(fields, path, raw)
    _check_range(fields, path, number, maximum)
    return number


def _check_range(fields: _Fields, path: str, number: float, maximum: float | None) -> None:
    if number < 0:
        raise fields.error(path, f"must not be negative, got {number:g}")
    if maximum is not None and number > maximum:
        raise fields.error(path, f"must be at most {maximum:g}, got {number:g}")


_GPU_FIELDS = (
    "name",
    "uuid",
    "pci_bus_id",
    "pci_device_id",
    "numa_node",
    "cpu_affinity",
    "pcie_switch",
    "host_bridge",
    "memory_total_bytes",
    "memory_used_bytes",
    "utilization_gpu",
    "utilization_memory",
    "power_mw",
    "power_limit_mw",
    "energy_mj",
    "temperature_c",
    "clock_sm_mhz",
    "clock_mem_mhz",
    "clock_event_reasons",
    "ecc",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "nvlinks",
    "mig",
    "processes",
    "xid_events",
)

_TOP_FIELDS = (
    "driver_version",
    "cuda_driver_version",
    "numa_nodes",
    "nvswitches",
    "defaults",
    "gpus",
    "topology",
    "faults",
    "events",
    "library",
)


def _bus_id(fields: _Fields, key: str, raw: object) -> str:
    path = fields._at(key)
    if not isinstance(raw, str):
        raise fields.error(path, f"expected a PCI bus id such as 00000000:07:00.0, got {raw!r}")
    try:
        return normalise_pci_bus_id(raw)
    except ValueError:
        raise fields.error(
            path, f"expected a PCI bus id such as 00000000:07:00.0, got {raw!r}"
        ) from None


def _parse_gpu(fields: _Fields, index: int, numa_cpus: Mapping[int, tuple[int, ...]]) -> FakeGpu:
    name = fields.string("name")
    if name is None:
        raise fields.error(fields._at("name"), "is required (here or in defaults)")
    if not fields.has("pci_bus_id"):
        raise fields.error(fields._at("pci_bus_id"), "is required")
    bus_id = _bus_id(fields, "pci_bus_id", fields.raw("pci_bus_id"))
    uuid = fields.string("uuid") or f"GPU-{index:08x}-fake-4000-8000-{bus_id.replace(':', '')}"
    if not uuid.startswith("GPU-"):
        raise fields.error(fields._at("uuid"), f"a GPU UUID starts with 'GPU-', got {uuid!r}")
    numa_node = fields.integer("numa_node", minimum=0)
    affinity_text = fields.string("cpu_affinity")
    if affinity_text is not None:
        try:
            affinity = parse_cpulist(affinity_text)
        except ValueError as exc:
            raise fields.error(fields._at("cpu_affinity"), str(exc)) from None
    else:
        affinity = numa_cpus.get(numa_node, ()) if numa_node is not None else ()
    reasons: int | None = None
    if fields.has("clock_event_reasons"):
        raw_reasons = fields.listing("clock_event_reasons")
        reasons = 0
        for i, reason in enumerate(raw_reasons):
            if reason not in CLOCK_EVENT_BITS:
                raise fields.error(
                    f"{fields._at('clock_event_reasons')}[{i}]",
                    f"unknown reason {reason!r} (known: {', '.join(CLOCK_EVENT_BITS)})",
                )
            reasons |= CLOCK_EVENT_BITS[reason]
    ecc: dict[tuple[str, str], Value] | None = None
    ecc_fields = fields.child("ecc", ("volatile", "aggregate"))
    if ecc_fields is not None:
        ecc = {}
        for counter in ("volatile", "aggregate"):
            sub = ecc_fields.child(counter, ("corrected", "uncorrected"))
            for error_type in ("corrected", "uncorrected"):
                value = sub.value(error_type) if sub is not None else None
                ecc[(error_type, counter)] = value if value is not None else 0.0
    nvlinks: tuple[FakeNvLink, ...] | None = None
    if fields.has("nvlinks"):
        links: list[FakeNvLink] = []
        for i, raw_link in enumerate(fields.listing("nvlinks")):
            where = f"nvlinks[{i}]"
            if isinstance(raw_link, str):
                links.append(FakeNvLink(_bus_id(fields, where, raw_link)))
                continue
            sub = _Fields(fields.source, fields._at(where), raw_link, ("remote", "active"))
            if not sub.has("remote"):
                raise sub.error(sub._at("remote"), "is required")
            links.append(
                FakeNvLink(_bus_id(sub, "remote", sub.raw("remote")), sub.boolean("active", True))
            )
        nvlinks = tuple(links)
    mig_mode: str | None = None
    instances: list[FakeMigInstance] = []
    mig = fields.child("mig", ("mode", "instances"))
    if mig is not None:
        mig_mode = mig.string("mode", "disabled")
        if mig_mode not in ("enabled", "disabled"):
            raise mig.error(mig._at("mode"), f"must be enabled or disabled, got {mig_mode!r}")
        seen_ids: set[int] = set()
        for i, raw_instance in enumerate(mig.listing("instances")):
            sub = _Fields(
                fields.source,
                mig._at(f"instances[{i}]"),
                raw_instance,
                ("id", "profile", "uuid", "memory_total_bytes", "memory_used_bytes"),
            )
            gi_id = sub.integer("id", minimum=0)
            profile = sub.string("profile")
            total = sub.integer("memory_total_bytes", minimum=0)
            if gi_id is None or profile is None or total is None:
                raise sub.error(sub.path, "needs id, profile and memory_total_bytes")
            if gi_id in seen_ids:
                raise sub.error(sub._at("id"), f"GPU instance id {gi_id} appears twice")
            seen_ids.add(gi_id)
            used = sub.value("memory_used_bytes", maximum=float(total))
            instances.append(
                FakeMigInstance(
                    gi_id,
                    profile,
                    sub.string("uuid") or f"MIG-{index:08x}-{gi_id:04x}-fake",
                    total,
                    used if used is not None else 0.0,
                )
            )
        if instances and mig_mode != "enabled":
            raise mig.error(mig._at("instances"), "MIG instances need mode: enabled")
        if len(instances) > _MAX_MIG_DEVICES:
            raise mig.error(mig._at("instances"), f"at most {_MAX_MIG_DEVICES} instances")
    processes: list[FakeProcess] = []
    for i, raw_process in enumerate(fields.listing("processes")):
        sub = _Fields(
            fields.source, fields._at(f"processes[{i}]"), raw_process, ("pid", "used_bytes", "type")
        )
        pid = sub.integer("pid", minimum=1)
        if pid is None:
            raise sub.error(sub._at("pid"), "is required")
        kind = sub.string("type", "compute")
        if kind not in ("compute", "graphics"):
            raise sub.error(sub._at("type"), f"must be compute or graphics, got {kind!r}")
        processes.append(FakeProcess(pid, sub.integer("used_bytes", minimum=0), kind))
    total_memory = fields.integer("memory_total_bytes", minimum=0)
    used_memory = fields.value(
        "memory_used_bytes", maximum=float(total_memory) if total_memory is not None else None
    )
    return FakeGpu(
        index=index,
        name=name,
        uuid=uuid,
        pci_bus_id=bus_id,
        pci_device_id=fields.integer("pci_device_id", 0x20B210DE, minimum=0) or 0,
        numa_node=numa_node,
        cpu_affinity=affinity,
        pcie_switch=fields.string("pcie_switch"),
        host_bridge=fields.string("host_bridge"),
        memory_total_bytes=total_memory,
        memory_used_bytes=used_memory if used_memory is not None else 0.0,
        utilization_gpu=fields.value("utilization_gpu", maximum=100.0),
        utilization_memory=fields.value("utilization_memory", maximum=100.0) or 0.0,
        power_mw=fields.value("power_mw"),
        power_limit_mw=fields.value("power_limit_mw"),
        energy_mj=fields.value("energy_mj"),
        temperature_c=fields.value("temperature_c"),
        clock_sm_mhz=fields.value("clock_sm_mhz"),
        clock_mem_mhz=fields.value("clock_mem_mhz"),
        clock_event_reasons=reasons,
        ecc=ecc,
        pcie_tx_kbps=fields.value("pcie_tx_kbps"),
        pcie_rx_kbps=fields.value("pcie_rx_kbps"),
        nvlinks=nvlinks,
        mig_mode=mig_mode,
        mig_instances=tuple(instances),
        processes=tuple(processes),
        xid_events=fields.boolean("xid_events", True),
    )


def _error_code(fields: _Fields, key: str) -> int | None:
    text = fields.string(key)
    if text is None:
        return None
    name = text.upper().removeprefix("NVML_ERROR_")
    if name not in ERROR_CODES:
        raise fields.error(
            fields._at(key), f"unknown NVML error {text!r} (known: {', '.join(ERROR_CODES)})"
        )
    return ERROR_CODES[name]


def parse_spec(data: object, source: str) -> FakeSpec:
    """Validate a loaded description and turn it into a :class:`FakeSpec`.

    Raises :class:`ConfigError` naming ``source``, the field and the problem.
    """
    top = _Fields(source, "", data, _TOP_FIELDS)
    numa_cpus: dict[int, tuple[int, ...]] = {}
    numa = top.raw("numa_nodes")
    if numa is not None:
        if not isinstance(numa, Mapping):
            raise top.error("numa_nodes", "expected a mapping of node id to cpulist")
        for key, text in numa.items():
            try:
                node = int(key)
                numa_cpus[node] = parse_cpulist(str(text))
            except ValueError as exc:
                raise top.error(f"numa_nodes.{key}", str(exc)) from None
    defaults = top.raw("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise top.error("defaults", "expected a mapping of GPU fields")
    _Fields(source, "defaults", defaults, _GPU_FIELDS)
    raw_gpus = top.listing("gpus")
    if not raw_gpus:
        raise top.error("gpus", "needs at least one GPU")
    gpus: list[FakeGpu] = []
    for i, raw_gpu in enumerate(raw_gpus):
        if not isinstance(raw_gpu, Mapping):
            raise top.error(f"gpus[{i}]", f"expected a mapping, got {type(raw_gpu).__name__}")
        merged = {**defaults, **raw_gpu}
        gpus.append(_parse_gpu(_Fields(source, f"gpus[{i}]", merged, _GPU_FIELDS), i, numa_cpus))
    for field_name in ("pci_bus_id", "uuid"):
        values = [getattr(g, field_name) for g in gpus]
        for i, value in enumerate(values):
            if value in values[:i]:
                raise top.error(f"gpus[{i}].{field_name}", f"{value} is used by another GPU")
    switches = tuple(
        _bus_id(top, f"nvswitches[{i}]", raw) for i, raw in enumerate(top.listing("nvswitches"))
    )
    matrix: tuple[tuple[int, ...], ...] | None = None
    topo = top.child("topology", ("matrix",))
    if topo is not None:
        rows = topo.listing("matrix")
        if len(rows) != len(gpus):
            raise topo.error("topology.matrix", f"needs {len(gpus)} rows, one per GPU")
        parsed: list[tuple[int, ...]] = []
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != len(gpus):
                raise topo.error(f"topology.matrix[{i}]", f"needs {len(gpus)} labels")
            levels: list[int] = []
            for j, label in enumerate(row):
                text = str(label).upper()
                if text not in _MATRIX_LEVELS or (text == "X") != (i == j):
                    raise topo.error(
                        f"topology.matrix[{i}][{j}]",
                        f"expected {'X' if i == j else 'PIX, PXB, PHB, NODE or SYS'}, "
                        f"got {label!r}",
                    )
                levels.append(_MATRIX_LEVELS[text])
            parsed.append(tuple(levels))
        for i in range(len(gpus)):
            for j in range(len(gpus)):
                if parsed[i][j] != parsed[j][i]:
                    raise topo.error(f"topology.matrix[{i}][{j}]", "the matrix must be symmetric")
        matrix = tuple(parsed)
    faults: list[Fault] = []
    for i, raw_fault in enumerate(top.listing("faults")):
        sub = _Fields(
            source,
            f"faults[{i}]",
            raw_fault,
            ("call", "gpu", "error", "after", "times", "at", "until", "delay"),
        )
        faults.append(_parse_fault(sub, len(gpus)))
    events: list[XidEvent] = []
    for i, raw_event in enumerate(top.listing("events")):
        sub = _Fields(source, f"events[{i}]", raw_event, ("at", "gpu", "xid"))
        gpu = sub.integer("gpu", minimum=0)
        xid = sub.integer("xid", minimum=1)
        if gpu is None or xid is None:
            raise sub.error(sub.path, "needs gpu and xid")
        if gpu >= len(gpus):
            raise sub.error(sub._at("gpu"), f"there are only {len(gpus)} GPUs")
        events.append(XidEvent(sub.number("at", 0.0, minimum=0.0) or 0.0, gpu, xid))
    library = top.string("library", "present")
    if library not in ("present", "missing"):
        raise top.error("library", f"must be present or missing, got {library!r}")
    return FakeSpec(
        source=source,
        gpus=tuple(gpus),
        driver_version=top.string("driver_version", "535.129.03") or "",
        cuda_driver_version=top.integer("cuda_driver_version", 12020, minimum=0) or 0,
        nvswitches=switches,
        matrix=matrix,
        faults=tuple(faults),
        events=tuple(sorted(events, key=lambda e: e.at)),
        library_present=library == "present",
    )


def _parse_fault(sub: _Fields, gpu_count: int) -> Fault:
    call = sub.string("call")
    if call is None:
        raise sub.error(sub._at("call"), "is required (an NVML function name or '*')")
    if call != "*" and not (call.startswith("nvml") and callable(getattr(FakeNvml, call, None))):
        raise sub.error(sub._at("call"), f"the fake NVML has no function {call!r}")
    gpu = sub.integer("gpu", minimum=0)
    if gpu is not None and gpu >= gpu_count:
        raise sub.error(sub._at("gpu"), f"there are only {gpu_count} GPUs")
    error = _error_code(sub, "error")
    delay = sub.number("delay", 0.0, minimum=0.0) or 0.0
    if error is None and delay == 0.0:
        raise sub.error(sub.path, "needs an error, a delay or both")
    return Fault(
        call=call,
        gpu=gpu,
        error=error,
        after=sub.integer("after", 0, minimum=0) or 0,
        times=sub.integer("times", minimum=1),
        at=sub.number("at", minimum=0.0),
        until=sub.number("until", minimum=0.0),
        delay=delay,
    )


def load_spec(path: Path) -> FakeSpec:
    """Read and validate a description file (YAML, or JSON by its ``.json`` suffix)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"fake NVML description {path}: cannot read: {exc.strerror or exc}"
        ) from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"fake NVML description {path}: not valid YAML/JSON: {exc}") from exc
    return parse_spec(data, str(path))


def shipped_specs() -> list[str]:
    """Names of the descriptions shipped with toposcope (``dgx-a100``, ``mig``, ...)."""
    return sorted(p.stem for p in SPEC_DIR.glob("*.yaml"))


def resolve_spec(mode: str) -> Path:
    """The description file an ``--nvml`` value names.

    ``fake`` is the shipped ``dgx-a100``; ``fake:NAME`` a shipped description when no file
    of that name exists; ``fake:FILE`` any file. Raises :class:`ConfigError` otherwise.
    """
    if mode == "fake":
        return SPEC_DIR / f"{DEFAULT_SPEC}.yaml"
    if not mode.startswith("fake:") or not mode[5:]:
        raise ConfigError(f"not a fake NVML setting: {mode!r} (fake, fake:NAME or fake:FILE)")
    target = mode[5:]
    path = Path(target)
    if path.is_file():
        return path
    shipped = SPEC_DIR / f"{target.removesuffix('.yaml')}.yaml"
    if "/" not in target and shipped.is_file():
        return shipped
    raise ConfigError(
        f"fake NVML description {target}: no such file and not a shipped description "
        f"(shipped: {', '.join(shipped_specs())})"
    )


def load_fake_nvml(
    mode: str,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> FakeNvml:
    """A :class:`FakeNvml` for an ``--nvml fake[:NAME|:FILE]`` setting."""
    return FakeNvml(load_spec(resolve_spec(mode)), clock=clock, sleep=sleep)


# --------------------------------------------------------------------------------------
# the fake library


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


class Gate:
    """Blocks matching calls until released, so a test controls when a slow call returns."""

    def __init__(self, call: str, gpu: int | None) -> None:
        self.call = call
        self.gpu = gpu
        self.entered = threading.Event()
        self._open = threading.Event()

    def release(self) -> None:
        """Let blocked and later calls through."""
        self._open.set()

    @property
    def released(self) -> bool:
        """Whether calls pass the gate now."""
        return self._open.is_set()

    def matches(self, call: str, gpu: int | None) -> bool:
        """Whether a call on ``gpu`` is one this gate holds."""
        return call == self.call and (self.gpu is None or self.gpu == gpu)

    def pass_through(self) -> None:
        """Signal that a call arrived, then wait until the gate is released."""
        self.entered.set()
        self._open.wait()


@dataclass
class _FaultState:
    fault: Fault
    seen: int = 0
    fired: int = 0


def _nvml_call(
    kind: str,
) -> Callable[[Callable[Concatenate[FakeNvml, P], R]], Callable[Concatenate[FakeNvml, P], R]]:
    """Mark a fake NVML function: check init state, count, apply gates and faults first.

    ``kind`` is ``system`` (no handle), ``device`` (first argument is a device handle),
    ``index`` (first argument is a GPU index, which faults on that GPU also hit) or ``init``
    (``nvmlInit``, which may run before initialisation).
    """

    def decorate(
        func: Callable[Concatenate[FakeNvml, P], R],
    ) -> Callable[Concatenate[FakeNvml, P], R]:
        name = func.__name__

        @functools.wraps(func)
        def wrapper(self: FakeNvml, /, *args: P.args, **kwargs: P.kwargs) -> R:
            first = args[0] if args else None
            if kind == "index":
                gpu = first if isinstance(first, int) else None
            else:
                gpu = first.index if kind == "device" and isinstance(first, FakeHandle) else None
            self._enter(name, gpu, "device" if kind == "index" else kind)
            return func(self, *args, **kwargs)

        return wrapper

    return decorate


def _raise(code: int) -> NoReturn:
    raise pynvml.NVMLError(code)


class FakeNvml:
    """A stand-in for the ``pynvml`` module over a :class:`FakeSpec`.

    ``clock`` is the fake time readings and timed faults follow (default: seconds since the
    fake was made); ``sleep`` implements fault delays. Thread-safe like the library. Test
    helpers: :meth:`add_fault`, :meth:`lose_gpu`, :meth:`hold`, :meth:`emit_xid`,
    :meth:`set_value`, :meth:`set_processes`, :meth:`call_count`.
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
        self._faults = [_FaultState(f) for f in spec.faults]
        self._gates: list[Gate] = []
        self._pending_events = list(spec.events)
        self._event_sets: list[FakeEventSet] = []
        self.calls: Counter[tuple[str, int | None]] = Counter()

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
        with self._lock:
            if gpu is not None:
                return self.calls[(call, gpu)]
            return sum(n for (name, _), n in self.calls.items() if name == call)

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
        with self._lock:
            self._faults.append(_FaultState(fault))
        return fault

    def clear_faults(self) -> None:
        """Remove every fault, including the description's."""
        with self._lock:
            self._faults.clear()

    def lose_gpu(self, gpu: int) -> Fault:
        """From now on every call on ``gpu`` raises ``NVML_ERROR_GPU_IS_LOST``."""
        return self.add_fault("*", "GPU_IS_LOST", gpu=gpu)

    def hold(self, call: str, gpu: int | None = None) -> Gate:
        """Block ``call`` (on ``gpu``) inside the fake until the returned gate is released."""
        gate = Gate(call, gpu)
        with self._lock:
            self._gates.append(gate)
        return gate

    def release_all(self) -> None:
        """Release every gate (test teardown, so that no thread stays blocked in the fake)."""
        with self._lock:
            gates = list(self._gates)
        for gate in gates:
            gate.release()

    def set_value(self, gpu: int, name: str, value: Value | None) -> None:
        """Change one reading of a GPU (a :class:`FakeGpu` field name)."""
        if name not in FakeGpu.__dataclass_fields__ or name in ("index", "pci_bus_id"):
            raise ValueError(f"not a changeable fake GPU field: {name!r}")
        changes: dict[str, Any] = {name: value}
        with self._lock:
            self._gpus[gpu] = replace(self._gpus[gpu], **changes)

    def set_processes(self, gpu: int, processes: Sequence[FakeProcess]) -> None:
        """Replace the processes running on a GPU."""
        with self._lock:
            self._gpus[gpu] = replace(self._gpus[gpu], processes=tuple(processes))

    def emit_xid(self, gpu: int, xid: int) -> None:
        """Deliver an XID critical error event for ``gpu`` to every event set registered."""
        with self._lock:
            self._deliver(gpu, xid)

    # -- internals --------------------------------------------------------------------------

    def _deliver(self, gpu: int, xid: int) -> None:
        for event_set in self._event_sets:
            mask = event_set.registered.get(gpu, 0)
            if not event_set.freed and mask & pynvml.nvmlEventTypeXidCriticalError:
                event_set.queue.append(
                    FakeEventData(
                        FakeHandle(gpu),
                        pynvml.nvmlEventTypeXidCriticalError,
                        xid,
                        _NO_INSTANCE,
                        _NO_INSTANCE,
                    )
                )
        self._events_ready.notify_all()

    def _enter(self, name: str, gpu: int | None, kind: str) -> None:
        if not self.spec.library_present:
            _raise(
                pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
                if kind == "init"
                else pynvml.NVML_ERROR_UNINITIALIZED
            )
        with self._lock:
            self.calls[(name, gpu)] += 1
            gates = [g for g in self._gates if g.matches(name, gpu)]
        for gate in gates:
            gate.pass_through()
        delay = 0.0
        error: int | None = None
        with self._lock:
            t = self.now()
            for state in self._faults:
                fault = state.fault
                if fault.call != name and not (fault.call == "*" and kind == "device"):
                    continue
                if fault.gpu is not None and fault.gpu != gpu:
                    continue
                if (fault.at is not None and t < fault.at) or (
                    fault.until is not None and t >= fault.until
                ):
                    continue
                if state.seen < fault.after:
                    state.seen += 1
                    continue
                if fault.times is not None and state.fired >= fault.times:
                    continue
                state.fired += 1
                delay += fault.delay
                if error is None and fault.error is not None:
                    error = fault.error
            if error is None and kind != "init" and self._refcount == 0:
                error = pynvml.NVML_ERROR_UNINITIALIZED
        if delay > 0:
            self._sleep(delay)
        if error is not None:
            _raise(error)

    def _gpu(self, handle: object) -> FakeGpu:
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self._gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[handle.index]

    def _mig(self, handle: FakeHandle) -> FakeMigInstance | None:
        gpu = self._gpu(handle)
        if handle.mig is None:
            return None
        if handle.mig >= len(gpu.mig_instances):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.mig_instances[handle.mig]

    def _read(self, value: Value | None) -> int:
        if value is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return round(evaluate(value, self.now()))

    def _full_gpu(self, handle: object) -> FakeGpu:
        """The GPU of a full-GPU handle; MIG handles do not answer whole-GPU queries."""
        gpu = self._gpu(handle)
        if isinstance(handle, FakeHandle) and self._mig(handle) is not None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _pci_info(self, bus_id: str, device_id: int) -> FakePciInfo:
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

    # -- library lifecycle and system queries ------------------------------------------------

    @_nvml_call("init")
    def nvmlInit(self) -> None:
        """Initialise the library (reference-counted like the real one)."""
        with self._lock:
            self._refcount += 1

    @_nvml_call("init")
    def nvmlInitWithFlags(self, flags: int) -> None:
        """Initialise with flags (ignored)."""
        with self._lock:
            self._refcount += 1

    @_nvml_call("system")
    def nvmlShutdown(self) -> None:
        """Drop one reference; at zero every call raises UNINITIALIZED again."""
        with self._lock:
            self._refcount -= 1

    def nvmlErrorString(self, result: int) -> str:
        """The library's text for an error code."""
        return str(pynvml.NVMLError(result))

    @_nvml_call("system")
    def nvmlSystemGetDriverVersion(self) -> str:
        """The driver version string (``535.129.03``)."""
        return self.spec.driver_version

    @_nvml_call("system")
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """The CUDA driver API version (``12020`` = 12.2)."""
        return self.spec.cuda_driver_version

    @_nvml_call("system")
    def nvmlDeviceGetCount(self) -> int:
        """Number of GPUs."""
        return len(self._gpus)

    @_nvml_call("index")
    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        """The handle of GPU ``index`` (PCI bus order)."""
        if not 0 <= index < len(self._gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    @_nvml_call("system")
    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> FakeHandle:
        """The handle of the GPU at a PCI address (any notation)."""
        try:
            wanted = normalise_pci_bus_id(bus_id)
        except ValueError:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for gpu in self._gpus:
            if gpu.pci_bus_id == wanted:
                return FakeHandle(gpu.index)
        _raise(pynvml.NVML_ERROR_NOT_FOUND)

    # -- device identity ------------------------------------------------------------------------

    @_nvml_call("device")
    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        """The NVML index of a device."""
        return self._gpu(handle).index

    @_nvml_call("device")
    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        """Product name; MIG devices append ``MIG <profile>`` as the driver does."""
        gpu = self._gpu(handle)
        mig = self._mig(handle)
        return f"{gpu.name} MIG {mig.profile}" if mig is not None else gpu.name

    @_nvml_call("device")
    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        """``GPU-...`` (or ``MIG-...`` for a MIG device)."""
        gpu = self._gpu(handle)
        mig = self._mig(handle)
        return mig.uuid if mig is not None else gpu.uuid

    @_nvml_call("device")
    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        """PCI identity; ``busId`` like ``b'00000000:07:00.0'``."""
        gpu = self._gpu(handle)
        return self._pci_info(gpu.pci_bus_id, gpu.pci_device_id)

    @_nvml_call("device")
    def nvmlDeviceGetPciInfo_v3(self, handle: FakeHandle) -> FakePciInfo:
        """Same as :meth:`nvmlDeviceGetPciInfo` (what the bindings call underneath)."""
        gpu = self._gpu(handle)
        return self._pci_info(gpu.pci_bus_id, gpu.pci_device_id)

    # -- readings -------------------------------------------------------------------------------

    @_nvml_call("device")
    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> FakeMemory:
        """Framebuffer total/used/free in bytes (of the MIG instance for a MIG handle)."""
        gpu = self._gpu(handle)
        mig = self._mig(handle)
        if mig is not None:
            total, used = mig.memory_total_bytes, self._read(mig.memory_used_bytes)
        else:
            total = self._read(float(gpu.memory_total_bytes) if gpu.memory_total_bytes else None)
            used = self._read(gpu.memory_used_bytes)
        used = min(used, total)
        return FakeMemory(total=total, free=total - used, used=used)

    @_nvml_call("device")
    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:
        """GPU and memory-controller busy percent over the last sample period."""
        gpu = self._full_gpu(handle)
        return FakeUtilization(
            gpu=self._read(gpu.utilization_gpu), memory=self._read(gpu.utilization_memory)
        )

    @_nvml_call("device")
    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        """Power draw in milliwatts."""
        return self._read(self._full_gpu(handle).power_mw)

    @_nvml_call("device")
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        """Enforced power limit in milliwatts."""
        return self._read(self._full_gpu(handle).power_limit_mw)

    @_nvml_call("device")
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        """Energy since the driver loaded, in millijoules."""
        return self._read(self._full_gpu(handle).energy_mj)

    @_nvml_call("device")
    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        """Core temperature in degrees Celsius (``NVML_TEMPERATURE_GPU``)."""
        gpu = self._full_gpu(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._read(gpu.temperature_c)

    @_nvml_call("device")
    def nvmlDeviceGetTemperatureV(self, handle: FakeHandle, sensor: int) -> int:
        """The versioned temperature call (``nvmlTemperature_v1``), in degrees Celsius."""
        gpu = self._full_gpu(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._read(gpu.temperature_c)

    @_nvml_call("device")
    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        """Current clock in MHz (graphics and SM share the SM value)."""
        gpu = self._full_gpu(handle)
        if clock_type in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            return self._read(gpu.clock_sm_mhz)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return self._read(gpu.clock_mem_mhz)
        _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)

    @_nvml_call("device")
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        """Bit mask of active clock event reasons (``nvmlClocksEventReason*``)."""
        reasons = self._full_gpu(handle).clock_event_reasons
        return self._read(float(reasons) if reasons is not None else None)

    @_nvml_call("device")
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        """The older name of :meth:`nvmlDeviceGetCurrentClocksEventReasons`."""
        reasons = self._full_gpu(handle).clock_event_reasons
        return self._read(float(reasons) if reasons is not None else None)

    @_nvml_call("device")
    def nvmlDeviceGetTotalEccErrors(
        self, handle: FakeHandle, error_type: int, counter_type: int
    ) -> int:
        """ECC error count by type (corrected/uncorrected) and counter (volatile/aggregate)."""
        gpu = self._full_gpu(handle)
        if gpu.ecc is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        kind = {
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected",
        }.get(error_type)
        counter = {
            pynvml.NVML_VOLATILE_ECC: "volatile",
            pynvml.NVML_AGGREGATE_ECC: "aggregate",
        }.get(counter_type)
        if kind is None or counter is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._read(gpu.ecc[(str(kind), str(counter))])

    @_nvml_call("device")
    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        """PCIe throughput in KB/s over the last 20 ms (``NVML_PCIE_UTIL_TX/RX_BYTES``)."""
        gpu = self._full_gpu(handle)
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return self._read(gpu.pcie_tx_kbps)
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return self._read(gpu.pcie_rx_kbps)
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    # -- NVLink ----------------------------------------------------------------------------------

    def _link(self, handle: FakeHandle, link: int) -> FakeNvLink:
        gpu = self._full_gpu(handle)
        if gpu.nvlinks is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.nvlinks):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlinks[link]

    @_nvml_call("device")
    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        """``NVML_FEATURE_ENABLED`` (1) when the link is active."""
        active = self._link(handle, link).active
        return int(pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED)

    @_nvml_call("device")
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> FakePciInfo:
        """PCI identity of the device at the far end of a link (a GPU or an NVSwitch)."""
        remote = self._link(handle, link).remote
        peer = next((g for g in self._gpus if g.pci_bus_id == remote), None)
        return self._pci_info(remote, peer.pci_device_id if peer else 0x1AF110DE)

    @_nvml_call("device")
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:
        """``NVML_NVLINK_DEVICE_TYPE_GPU``, ``_SWITCH`` or ``_UNKNOWN``."""
        remote = self._link(handle, link).remote
        if any(g.pci_bus_id == remote for g in self._gpus):
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)
        if remote in self.spec.nvswitches:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)

    # -- processes --------------------------------------------------------------------------------

    def _processes(self, handle: FakeHandle, kind: str) -> list[FakeProcessInfo]:
        gpu = self._gpu(handle)
        return [
            FakeProcessInfo(p.pid, p.used_bytes, _NO_INSTANCE, _NO_INSTANCE)
            for p in gpu.processes
            if p.kind == kind
        ]

    @_nvml_call("device")
    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Compute processes; ``usedGpuMemory`` may be ``None``."""
        return self._processes(handle, "compute")

    @_nvml_call("device")
    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Versioned name of :meth:`nvmlDeviceGetComputeRunningProcesses`."""
        return self._processes(handle, "compute")

    @_nvml_call("device")
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Graphics processes; ``usedGpuMemory`` may be ``None``."""
        return self._processes(handle, "graphics")

    @_nvml_call("device")
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Versioned name of :meth:`nvmlDeviceGetGraphicsRunningProcesses`."""
        return self._processes(handle, "graphics")

    # -- MIG ---------------------------------------------------------------------------------------

    @_nvml_call("device")
    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        """``[current, pending]`` MIG mode (``NVML_DEVICE_MIG_ENABLE`` = 1)."""
        gpu = self._full_gpu(handle)
        if gpu.mig_mode is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = 1 if gpu.mig_mode == "enabled" else 0
        return [mode, mode]

    @_nvml_call("device")
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        """How many MIG devices the GPU can hold (7 on an A100)."""
        gpu = self._full_gpu(handle)
        if gpu.mig_mode is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _MAX_MIG_DEVICES

    @_nvml_call("device")
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        """The handle of the ``index``-th MIG device; NOT_FOUND for an empty slot."""
        gpu = self._full_gpu(handle)
        if gpu.mig_mode != "enabled":
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < _MAX_MIG_DEVICES:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.mig_instances):
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeHandle(gpu.index, index)

    @_nvml_call("device")
    def nvmlDeviceIsMigDeviceHandle(self, handle: FakeHandle) -> int:
        """1 for a MIG device handle."""
        return 1 if self._mig(handle) is not None else 0

    @_nvml_call("device")
    def nvmlDeviceGetGpuInstanceId(self, handle: FakeHandle) -> int:
        """The GPU instance id of a MIG device (INVALID_ARGUMENT on a full GPU)."""
        mig = self._mig(handle)
        if mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gi_id

    @_nvml_call("device")
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: FakeHandle) -> FakeHandle:
        """The parent GPU of a MIG device."""
        if self._mig(handle) is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(handle.index)

    # -- locality and topology ----------------------------------------------------------------

    @_nvml_call("device")
    def nvmlDeviceGetCpuAffinity(self, handle: FakeHandle, cpu_set_size: int) -> list[int]:
        """Ideal CPUs as ``cpu_set_size`` 64-bit words (bit ``i`` of word ``w`` = CPU 64w+i)."""
        gpu = self._full_gpu(handle)
        if not gpu.cpu_affinity:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        words = [0] * cpu_set_size
        for cpu in gpu.cpu_affinity:
            if cpu // 64 < cpu_set_size:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    @_nvml_call("device")
    def nvmlDeviceGetMemoryAffinity(
        self, handle: FakeHandle, node_set_size: int, scope: int
    ) -> list[int]:
        """Closest NUMA node(s) as ``node_set_size`` 64-bit words."""
        gpu = self._full_gpu(handle)
        if gpu.numa_node is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        words = [0] * node_set_size
        if gpu.numa_node // 64 < node_set_size:
            words[gpu.numa_node // 64] = 1 << (gpu.numa_node % 64)
        return words

    @_nvml_call("device")
    def nvmlDeviceGetNumaNodeId(self, handle: FakeHandle) -> int:
        """The GPU's NUMA node."""
        node = self._full_gpu(handle).numa_node
        return self._read(float(node) if node is not None else None)

    @_nvml_call("device")
    def nvmlDeviceGetTopologyCommonAncestor(self, handle: FakeHandle, other: FakeHandle) -> int:
        """The closest common PCIe ancestor of two GPUs (``NVML_TOPOLOGY_*``)."""
        a = self._full_gpu(handle)
        b = self._gpu(other)
        if self._mig(other) is not None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if self.spec.matrix is not None:
            return self.spec.matrix[a.index][b.index]
        if a.index == b.index:
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)
        if a.pcie_switch is not None and a.pcie_switch == b.pcie_switch:
            return int(pynvml.NVML_TOPOLOGY_SINGLE)
        if a.host_bridge is not None and a.host_bridge == b.host_bridge:
            return int(pynvml.NVML_TOPOLOGY_HOSTBRIDGE)
        if a.numa_node is not None and a.numa_node == b.numa_node:
            return int(pynvml.NVML_TOPOLOGY_NODE)
        return int(pynvml.NVML_TOPOLOGY_SYSTEM)

    # -- events ------------------------------------------------------------------------------------

    @_nvml_call("system")
    def nvmlEventSetCreate(self) -> FakeEventSet:
        """A new, empty event set."""
        event_set = FakeEventSet()
        with self._lock:
            self._event_sets.append(event_set)
        return event_set

    @_nvml_call("device")
    def nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, event_types: int, event_set: FakeEventSet
    ) -> None:
        """Register a device's events in a set (NOT_SUPPORTED where XIDs are not reported)."""
        gpu = self._full_gpu(handle)
        if event_types & pynvml.nvmlEventTypeXidCriticalError and not gpu.xid_events:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._lock:
            event_set.registered[gpu.index] = event_set.registered.get(gpu.index, 0) | event_types

    @_nvml_call("system")
    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeoutms: int) -> FakeEventData:
        """Wait up to ``timeoutms`` (real time) for an event; TIMEOUT when none came."""
        deadline = time.monotonic() + timeoutms / 1000.0
        with self._events_ready:
            while True:
                if event_set.freed:
                    _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
                t = self.now()
                while self._pending_events and self._pending_events[0].at <= t:
                    due = self._pending_events.pop(0)
                    self._deliver(due.gpu, due.xid)
                if event_set.queue:
                    return event_set.queue.pop(0)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    _raise(pynvml.NVML_ERROR_TIMEOUT)
                self._events_ready.wait(remaining)

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeoutms: int) -> FakeEventData:
        """The unversioned name the bindings also offer."""
        return self.nvmlEventSetWait_v2(event_set, timeoutms)

    @_nvml_call("system")
    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        """Free an event set; a thread waiting on it wakes up."""
        with self._events_ready:
            event_set.freed = True
            if event_set in self._event_sets:
                self._event_sets.remove(event_set)
            self._events_ready.notify_all()
