"""Build the GPU part of a :class:`~toposcope.topology.model.Topology` from NVML readings.

This module never calls NVML: the exporter's NVML source
(``toposcope.host.nvml``) reads the raw facts through its one error-mapping
helper and hands them over as :class:`NvmlGpuRecord` values. Keeping the rules here, as pure
functions over plain data, lets the ``nvidia-smi topo -m`` semantics be tested without a GPU
and keeps the core free of the bindings.

The rules follow ``nvidia-smi topo -m``:

* ``nvmlDeviceGetTopologyCommonAncestor`` levels map to ``PIX`` (one PCIe bridge or the same
  board), ``PXB`` (several bridges), ``PHB`` (a host bridge), ``NODE`` (same NUMA node,
  different host bridges) and ``SYS`` (across the inter-socket link).
* NVLink wins over any PCIe path: ``NV<n>``, where ``n`` counts the active links from one GPU
  that reach the other, directly (the link's remote PCI id is the peer) or through an
  NVSwitch the peer also has links to (DGX A100: 12 links to 6 switches, ``NV12`` everywhere).
  The count is the smaller of the two directions so that the matrix stays symmetric.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from toposcope.topology.model import PCI_VENDOR_NVIDIA, Gpu, GpuLink, Topology

#: NVML's ``nvmlGpuTopologyLevel_t`` values (``NVML_TOPOLOGY_*``), kept here as plain
#: numbers so that the core does not import the bindings.
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50

#: NVML topology level -> ``nvidia-smi topo -m`` label. ``INTERNAL`` (two GPUs on one board,
#: such as a K80) is shown as ``PIX`` by nvidia-smi.
LEVEL_LABELS: dict[int, str] = {
    NVML_TOPOLOGY_INTERNAL: "PIX",
    NVML_TOPOLOGY_SINGLE: "PIX",
    NVML_TOPOLOGY_MULTIPLE: "PXB",
    NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
    NVML_TOPOLOGY_NODE: "NODE",
    NVML_TOPOLOGY_SYSTEM: "SYS",
}


def normalise_pci_bus_id(bus_id: str | bytes) -> str:
    """Turn NVML's ``00000000:3B:00.0`` into sysfs's ``0000:3b:00.0``.

    NVML prints an 8-digit domain in upper case; sysfs and ``lspci -D`` use 4 digits (more
    only when the domain needs them) in lower case. Raises ``ValueError`` for text that is
    not a ``DOMAIN:BUS:DEVICE.FUNCTION`` address.
    """
    text = bus_id.decode("ascii", "replace") if isinstance(bus_id, bytes) else bus_id
    text = text.strip().rstrip("\x00")
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3 or "." not in parts[2]:
        raise ValueError(f"not a PCI bus id: {text!r}")
    domain_text, bus_text, rest = parts
    device_text, _, function_text = rest.partition(".")
    try:
        domain = int(domain_text, 16)
        bus = int(bus_text, 16)
        device = int(device_text, 16)
        function = int(function_text, 16)
    except ValueError:
        raise ValueError(f"not a PCI bus id: {text!r}") from None
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def level_label(level: int) -> str:
    """The ``nvidia-smi topo -m`` label of an NVML topology level (unknown levels -> SYS)."""
    if level in LEVEL_LABELS:
        return LEVEL_LABELS[level]
    # NVML may add finer levels; place them with the next coarser known one.
    for known in sorted(LEVEL_LABELS):
        if level <= known:
            return LEVEL_LABELS[known]
    return "SYS"


@dataclass(frozen=True)
class NvLinkRemote:
    """One active NVLink of a GPU: the PCI id at its far end and whether that is an NVSwitch.

    ``switch`` is ``None`` when NVML could not say what the remote device is; such a remote
    counts as a switch when it is not one of the GPUs.
    """

    link: int
    remote_bus_id: str
    switch: bool | None = None


@dataclass(frozen=True)
class NvmlGpuRecord:
    """What NVML says about one GPU, in the units and notations of the model.

    ``pci_bus_id`` is already normalised (``0000:3b:00.0``); ``nvlinks`` lists active links
    only.
    """

    index: int
    pci_bus_id: str | None
    uuid: str | None = None
    model: str | None = None
    numa_node: int | None = None
    local_cpus: tuple[int, ...] = ()
    nvlinks: tuple[NvLinkRemote, ...] = ()


def _nvlink_reach(record: NvmlGpuRecord, peer: NvmlGpuRecord, gpu_bus_ids: set[str]) -> int:
    """Active links of ``record`` that lead to ``peer``, directly or through a shared switch."""
    peer_switches = {
        remote.remote_bus_id for remote in peer.nvlinks if _is_switch(remote, gpu_bus_ids)
    }
    count = 0
    for remote in record.nvlinks:
        direct = peer.pci_bus_id is not None and remote.remote_bus_id == peer.pci_bus_id
        shared_switch = _is_switch(remote, gpu_bus_ids) and remote.remote_bus_id in peer_switches
        if direct or shared_switch:
            count += 1
    return count


def _is_switch(remote: NvLinkRemote, gpu_bus_ids: set[str]) -> bool:
    if remote.switch is not None:
        return remote.switch
    return remote.remote_bus_id not in gpu_bus_ids


def nvlink_counts(records: Sequence[NvmlGpuRecord]) -> dict[tuple[int, int], int]:
    """NVLink count for every ordered pair of GPUs that NVLink connects (symmetric)."""
    gpu_bus_ids = {r.pci_bus_id for r in records if r.pci_bus_id is not None}
    counts: dict[tuple[int, int], int] = {}
    for record in records:
        for peer in records:
            if peer.index == record.index:
                continue
            forward = _nvlink_reach(record, peer, gpu_bus_ids)
            backward = _nvlink_reach(peer, record, gpu_bus_ids)
            count = min(forward, backward)
            if count > 0:
                counts[(record.index, peer.index)] = count
    return counts


def build_gpu_topology(
    records: Sequence[NvmlGpuRecord],
    ancestors: Mapping[tuple[int, int], int],
) -> tuple[tuple[Gpu, ...], tuple[GpuLink, ...]]:
    """Model GPUs and the ``nvidia-smi topo -m`` link matrix from NVML readings.

    ``ancestors`` maps ordered GPU index pairs to the ``nvmlDeviceGetTopologyCommonAncestor``
    level; a pair missing from it (NVML could not say) and not joined by NVLink gets no link.
    """
    gpus = tuple(
        Gpu(
            index=r.index,
            pci_bus_id=r.pci_bus_id,
            numa_node=r.numa_node,
            local_cpus=r.local_cpus,
            vendor=PCI_VENDOR_NVIDIA,
            model=r.model,
            uuid=r.uuid,
        )
        for r in sorted(records, key=lambda r: r.index)
    )
    nv = nvlink_counts(records)
    links: list[GpuLink] = []
    for gpu in gpus:
        for peer in gpus:
            if peer.index == gpu.index:
                continue
            pair = (gpu.index, peer.index)
            if pair in nv:
                links.append(GpuLink(gpu.index, peer.index, f"NV{nv[pair]}"))
                continue
            level = ancestors.get(pair, ancestors.get((peer.index, gpu.index)))
            if level is not None:
                links.append(GpuLink(gpu.index, peer.index, level_label(level)))
    return gpus, tuple(links)


def merge_nvml_gpus(topology: Topology, gpus: Iterable[Gpu], links: Iterable[GpuLink]) -> Topology:
    """The sysfs topology with NVML's view of the GPUs merged in.

    GPUs are numbered as NVML numbers them and carry NVML's model and UUID. Locality comes
    from sysfs whenever sysfs knows the GPU (matched by PCI bus id): sysfs wins over NVML, as
    in the exporter. GPUs sysfs shows but NVML does not (another vendor's, or one NVML
    excludes) are kept after NVML's, renumbered. The link matrix is NVML's.
    """
    by_bus = {g.pci_bus_id: g for g in topology.gpus if g.pci_bus_id is not None}
    merged: list[Gpu] = []
    seen: set[str] = set()
    for gpu in sorted(gpus, key=lambda g: g.index):
        local = by_bus.get(gpu.pci_bus_id) if gpu.pci_bus_id is not None else None
        if gpu.pci_bus_id is not None:
            seen.add(gpu.pci_bus_id)
        if local is None:
            merged.append(gpu)
            continue
        merged.append(
            replace(
                gpu,
                numa_node=local.numa_node if local.numa_node is not None else gpu.numa_node,
                local_cpus=local.local_cpus or gpu.local_cpus,
                vendor=local.vendor if local.vendor is not None else gpu.vendor,
            )
        )
    next_index = max((g.index for g in merged), default=-1) + 1
    for gpu in topology.gpus:
        if gpu.pci_bus_id is not None and gpu.pci_bus_id in seen:
            continue
        merged.append(replace(gpu, index=next_index))
        next_index += 1
    return replace(
        topology,
        gpus=tuple(merged),
        gpu_links=tuple(links),
        source=f"{topology.source}+nvml" if topology.source else "nvml",
    )
