"""Validating a loaded description into a :class:`~.spec.FakeSpec`.

Every GPU merges the description's ``defaults`` with its own fields; the PCIe path matrix,
faults and XID events are checked against the GPUs they name. A malformed description
raises :class:`~toposcope.errors.ConfigError` naming the source, the field and the problem.
"""

from __future__ import annotations

from collections.abc import Mapping

import pynvml

from toposcope.cpulist import parse_cpulist
from toposcope.fake_nvml.activity_fields import ACTIVITY_FIELDS, parse_activity
from toposcope.fake_nvml.fields import Fields, read_bus_id
from toposcope.fake_nvml.health_fields import HEALTH_FIELDS, parse_health
from toposcope.fake_nvml.library import FakeNvml
from toposcope.fake_nvml.spec import (
    CLOCK_EVENT_BITS,
    ERROR_CODES,
    MAX_MIG_DEVICES,
    FakeGpu,
    FakeMigInstance,
    FakeNvLink,
    FakeProcess,
    FakeSpec,
    Fault,
    XidEvent,
)
from toposcope.fake_nvml.values import Value

#: ``nvidia-smi topo -m`` labels accepted in a spec's ``topology.matrix`` -> NVML level.
_MATRIX_LEVELS: dict[str, int] = {
    "X": pynvml.NVML_TOPOLOGY_INTERNAL,
    "PIX": pynvml.NVML_TOPOLOGY_SINGLE,
    "PXB": pynvml.NVML_TOPOLOGY_MULTIPLE,
    "PHB": pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": pynvml.NVML_TOPOLOGY_NODE,
    "SYS": pynvml.NVML_TOPOLOGY_SYSTEM,
}

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
    *HEALTH_FIELDS,
    *ACTIVITY_FIELDS,
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


def _parse_gpu(fields: Fields, index: int, numa_cpus: Mapping[int, tuple[int, ...]]) -> FakeGpu:
    name = fields.string("name")
    if name is None:
        raise fields.error(fields.path_of("name"), "is required (here or in defaults)")
    if not fields.has("pci_bus_id"):
        raise fields.error(fields.path_of("pci_bus_id"), "is required")
    bus_id = read_bus_id(fields, "pci_bus_id", fields.raw("pci_bus_id"))
    uuid = fields.string("uuid") or f"GPU-{index:08x}-fake-4000-8000-{bus_id.replace(':', '')}"
    if not uuid.startswith("GPU-"):
        raise fields.error(fields.path_of("uuid"), f"a GPU UUID starts with 'GPU-', got {uuid!r}")
    numa_node = fields.integer("numa_node", minimum=0)
    affinity_text = fields.string("cpu_affinity")
    if affinity_text is not None:
        try:
            affinity = parse_cpulist(affinity_text)
        except ValueError as exc:
            raise fields.error(fields.path_of("cpu_affinity"), str(exc)) from None
    else:
        affinity = numa_cpus.get(numa_node, ()) if numa_node is not None else ()
    reasons: int | None = None
    if fields.has("clock_event_reasons"):
        raw_reasons = fields.listing("clock_event_reasons")
        reasons = 0
        for i, reason in enumerate(raw_reasons):
            if reason not in CLOCK_EVENT_BITS:
                raise fields.error(
                    f"{fields.path_of('clock_event_reasons')}[{i}]",
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
                links.append(FakeNvLink(read_bus_id(fields, where, raw_link)))
                continue
            sub = Fields(fields.source, fields.path_of(where), raw_link, ("remote", "active"))
            if not sub.has("remote"):
                raise sub.error(sub.path_of("remote"), "is required")
            links.append(
                FakeNvLink(
                    read_bus_id(sub, "remote", sub.raw("remote")), sub.boolean("active", True)
                )
            )
        nvlinks = tuple(links)
    mig_mode: str | None = None
    instances: list[FakeMigInstance] = []
    mig = fields.child("mig", ("mode", "instances"))
    if mig is not None:
        mig_mode = mig.string("mode", "disabled")
        if mig_mode not in ("enabled", "disabled"):
            raise mig.error(mig.path_of("mode"), f"must be enabled or disabled, got {mig_mode!r}")
        seen_ids: set[int] = set()
        for i, raw_instance in enumerate(mig.listing("instances")):
            sub = Fields(
                fields.source,
                mig.path_of(f"instances[{i}]"),
                raw_instance,
                ("id", "profile", "uuid", "memory_total_bytes", "memory_used_bytes"),
            )
            gi_id = sub.integer("id", minimum=0)
            profile = sub.string("profile")
            total = sub.integer("memory_total_bytes", minimum=0)
            if gi_id is None or profile is None or total is None:
                raise sub.error(sub.path, "needs id, profile and memory_total_bytes")
            if gi_id in seen_ids:
                raise sub.error(sub.path_of("id"), f"GPU instance id {gi_id} appears twice")
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
            raise mig.error(mig.path_of("instances"), "MIG instances need mode: enabled")
        if len(instances) > MAX_MIG_DEVICES:
            raise mig.error(mig.path_of("instances"), f"at most {MAX_MIG_DEVICES} instances")
    processes: list[FakeProcess] = []
    for i, raw_process in enumerate(fields.listing("processes")):
        sub = Fields(
            fields.source,
            fields.path_of(f"processes[{i}]"),
            raw_process,
            ("pid", "used_bytes", "type", "sm_util"),
        )
        pid = sub.integer("pid", minimum=1)
        if pid is None:
            raise sub.error(sub.path_of("pid"), "is required")
        kind = sub.string("type", "compute")
        if kind not in ("compute", "graphics"):
            raise sub.error(sub.path_of("type"), f"must be compute or graphics, got {kind!r}")
        processes.append(
            FakeProcess(
                pid,
                sub.integer("used_bytes", minimum=0),
                kind,
                sub.value("sm_util", maximum=100.0),
            )
        )
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
        **parse_health(fields),
        **parse_activity(fields),
    )


def _error_code(fields: Fields, key: str) -> int | None:
    text = fields.string(key)
    if text is None:
        return None
    name = text.upper().removeprefix("NVML_ERROR_")
    if name not in ERROR_CODES:
        raise fields.error(
            fields.path_of(key), f"unknown NVML error {text!r} (known: {', '.join(ERROR_CODES)})"
        )
    return ERROR_CODES[name]


def parse_spec(data: object, source: str) -> FakeSpec:
    """Validate a loaded description and turn it into a :class:`FakeSpec`.

    Raises :class:`ConfigError` naming ``source``, the field and the problem.
    """
    top = Fields(source, "", data, _TOP_FIELDS)
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
    Fields(source, "defaults", defaults, _GPU_FIELDS)
    raw_gpus = top.listing("gpus")
    if not raw_gpus:
        raise top.error("gpus", "needs at least one GPU")
    gpus: list[FakeGpu] = []
    for i, raw_gpu in enumerate(raw_gpus):
        if not isinstance(raw_gpu, Mapping):
            raise top.error(f"gpus[{i}]", f"expected a mapping, got {type(raw_gpu).__name__}")
        merged = {**defaults, **raw_gpu}
        gpus.append(_parse_gpu(Fields(source, f"gpus[{i}]", merged, _GPU_FIELDS), i, numa_cpus))
    for field_name in ("pci_bus_id", "uuid"):
        values = [getattr(g, field_name) for g in gpus]
        for i, value in enumerate(values):
            if value in values[:i]:
                raise top.error(f"gpus[{i}].{field_name}", f"{value} is used by another GPU")
    switches = tuple(
        read_bus_id(top, f"nvswitches[{i}]", raw) for i, raw in enumerate(top.listing("nvswitches"))
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
        sub = Fields(
            source,
            f"faults[{i}]",
            raw_fault,
            ("call", "gpu", "error", "after", "times", "at", "until", "delay"),
        )
        faults.append(_parse_fault(sub, len(gpus)))
    events: list[XidEvent] = []
    for i, raw_event in enumerate(top.listing("events")):
        sub = Fields(source, f"events[{i}]", raw_event, ("at", "gpu", "xid"))
        gpu = sub.integer("gpu", minimum=0)
        xid = sub.integer("xid", minimum=1)
        if gpu is None or xid is None:
            raise sub.error(sub.path, "needs gpu and xid")
        if gpu >= len(gpus):
            raise sub.error(sub.path_of("gpu"), f"there are only {len(gpus)} GPUs")
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


def _parse_fault(sub: Fields, gpu_count: int) -> Fault:
    call = sub.string("call")
    if call is None:
        raise sub.error(sub.path_of("call"), "is required (an NVML function name or '*')")
    if call != "*" and not (call.startswith("nvml") and callable(getattr(FakeNvml, call, None))):
        raise sub.error(sub.path_of("call"), f"the fake NVML has no function {call!r}")
    gpu = sub.integer("gpu", minimum=0)
    if gpu is not None and gpu >= gpu_count:
        raise sub.error(sub.path_of("gpu"), f"there are only {gpu_count} GPUs")
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
