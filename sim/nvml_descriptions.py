"""Templates and fake NVML descriptions, each made from the other where that is the source.

* :func:`shipped_gpus`: a built-in template's GPUs, read from the fake NVML description
  shipped under its name (``toposcope exporter --nvml fake:NAME``), the one source of those
  GPUs' model, PCI device id, memory, power limit, UUIDs, PCI ids, NUMA nodes, PCIe switches
  and NVLinks, so that a simulated node and the fake NVML an exporter runs against never
  disagree;
* :func:`fake_nvml_description`: the description a simulated node's fake NVML is built
  from, made from its template (idle readings; the simulator sets them from its jobs),
  with the throughput and activity sources a GPU of its model has: GPM on Hopper and later
  (:func:`has_gpm`), else the PCIe and NVLink byte counters of the field values;
* :func:`nvlink_lanes`: which of a GPU's NVLinks carry its traffic to each NVLinked peer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from toposcope.cpulist import format_cpulist
from toposcope.fake_nvml import SPEC_DIR, FakeSpec, evaluate, load_spec
from toposcope.sim.nodetemplate import TIER_NVLINK, TIER_NVSWITCH, GpuSpec, NodeTemplate
from toposcope.topology.nvml import level_label

#: ``nvidia-smi topo -m`` labels of two GPUs behind one PCIe switch (one or several levels)
_SAME_SWITCH_LABELS = ("PIX", "PXB")
#: NVLinks of an NVSwitched GPU, two to each of the baseboard's six NVSwitches (A100)
NVSWITCH_LINKS = 12
#: The driver of the simulated nodes: r550, the first with the PCIe byte counter field values
DRIVER_VERSION = "550.90.07"
CUDA_DRIVER_VERSION = 12040
#: GPU names of Hopper and later, the GPUs with GPM (``nvmlGpmQueryDeviceSupport``)
_GPM_MODEL = re.compile(r"(?:^|[\s-])(?:G?H(?:100|200|800|20)|G?B(?:100|200|300))(?:$|[\s-])")
#: Idle readings of the throughput and activity sources
_IDLE_GPM = {
    "sm_util": 0,
    "sm_occupancy": 0,
    "any_tensor_util": 0,
    "dram_bw_util": 0,
    "pcie_tx_per_sec": 0,
    "pcie_rx_per_sec": 0,
    "nvlink_tx_per_sec": 0,
    "nvlink_rx_per_sec": 0,
}
_IDLE_NVLINK_THROUGHPUT = {"data_tx_kib": 0, "data_rx_kib": 0}
#: 64-bit PCIe byte counters: the simulator's exporter reads exact integrals between events,
#: which a driver's 32-bit counter (the fake's default, as driver 580 answers) would lose
_IDLE_PCIE_COUNTERS = {"tx_bytes": 0, "rx_bytes": 0, "bits": 64}


@dataclass(frozen=True)
class ShippedGpus:
    """A template's GPUs as a shipped fake NVML description gives them.

    ``nvlink_label`` is the matrix label of an NVLinked pair (``NV12``: twelve links);
    ``same_switch_label`` that of two GPUs behind one switch (``PIX`` or ``PXB``).
    """

    gpus: tuple[GpuSpec, ...]
    model: str
    pci_device_id: int
    memory_bytes: int
    power_limit_watts: float
    nvlink_label: str = "NV12"
    same_switch_label: str = "PIX"


def shipped_gpus(name: str) -> ShippedGpus:
    """The GPUs of the shipped fake NVML description ``name`` (``fake_nvml/specs/NAME.yaml``).

    A GPU's switch is its ``pcie_switch``, or else the group of GPUs the description's PCIe
    matrix puts behind one switch (``sw0``, ``sw1``, ... in GPU order); GPUs whose NVLinks
    reach the NVSwitches share the ``nvswitch`` fabric.
    """
    spec = load_spec(SPEC_DIR / f"{name}.yaml")
    first = spec.gpus[0]
    switches, same_switch = _switch_groups(spec)
    gpus = tuple(
        GpuSpec(
            index=gpu.index,
            pci_bus_id=gpu.pci_bus_id,
            numa_node=gpu.numa_node,
            switch=switches[gpu.index],
            nvlink_group=(
                "nvswitch"
                if any(link.active and link.remote in spec.nvswitches for link in gpu.nvlinks or ())
                else None
            ),
            uuid=gpu.uuid,
        )
        for gpu in spec.gpus
    )
    links = [link for link in first.nvlinks or () if link.active]
    limit = first.power_limit_mw
    return ShippedGpus(
        gpus=gpus,
        model=first.name,
        pci_device_id=first.pci_device_id,
        memory_bytes=first.memory_total_bytes or 0,
        power_limit_watts=evaluate(limit, 0.0) / 1000.0 if limit is not None else 400.0,
        nvlink_label=f"NV{len(links)}" if links else "NV12",
        same_switch_label=same_switch,
    )


def _switch_groups(spec: FakeSpec) -> tuple[list[str | None], str]:
    """Each GPU's PCIe switch, and the matrix label of a same-switch pair."""
    groups: list[str | None] = [gpu.pcie_switch for gpu in spec.gpus]
    label = "PIX"
    if spec.matrix is None:
        return groups, label
    named = 0
    for a in range(len(groups)):
        if groups[a] is not None:
            continue
        for b in range(a):
            pair = level_label(spec.matrix[a][b])
            if pair in _SAME_SWITCH_LABELS and groups[b] is not None:
                groups[a], label = groups[b], pair
                break
        else:
            if any(level_label(level) in _SAME_SWITCH_LABELS for level in spec.matrix[a]):
                groups[a] = f"sw{named}"
                named += 1
    return groups, label


def _nvml_bus_id(gpu: GpuSpec) -> str:
    """A GPU's PCI id as NVML writes it (eight-digit domain, upper case)."""
    domain, bus, rest = gpu.pci_bus_id.split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}"


def _nvlinks(template: NodeTemplate, gpu: GpuSpec, switches: list[str]) -> list[str]:
    """A GPU's NVLinks as the fake NVML lists them (each link's remote PCI id): twelve links
    over the NVSwitches when its pairs are of the NVSwitch tier, else one entry per direct
    link to each NVLinked peer (``NV2``: two entries with the peer's id).
    """
    links: list[str] = []
    for peer in template.gpus:
        if peer.index == gpu.index:
            continue
        tier, count = template.link_tier(gpu.index, peer.index)
        if tier == TIER_NVSWITCH:
            return [switches[i // 2] for i in range(NVSWITCH_LINKS)]
        if tier == TIER_NVLINK:
            links.extend([_nvml_bus_id(peer)] * (count or 1))
    return links


def has_gpm(model: str) -> bool:
    """Whether a GPU of this NVML name has GPM (Hopper and later: H100, H200, H800, H20,
    GH200, B100, B200, B300, GB200, GB300).
    """
    return _GPM_MODEL.search(model) is not None


def nvlink_lanes(template: NodeTemplate) -> dict[int, dict[int, tuple[int, ...]]]:
    """Per GPU, per NVLinked peer, the indices of the GPU's NVLinks (as the fake NVML lists
    them) that carry its traffic to that peer: every link for an NVSwitched GPU (the
    switches spread it), the direct links to the peer otherwise.
    """
    switches = [f"sw{i}" for i in range(NVSWITCH_LINKS // 2)] if _nvswitched(template) else []
    lanes: dict[int, dict[int, tuple[int, ...]]] = {}
    for gpu in template.gpus:
        links = _nvlinks(template, gpu, switches)
        mine: dict[int, tuple[int, ...]] = {}
        for peer in template.gpus:
            if peer.index == gpu.index:
                continue
            tier = template.link_tier(gpu.index, peer.index)[0]
            if tier == TIER_NVSWITCH:
                mine[peer.index] = tuple(range(len(links)))
            elif tier == TIER_NVLINK:
                remote = _nvml_bus_id(peer)
                mine[peer.index] = tuple(i for i, r in enumerate(links) if r == remote)
        lanes[gpu.index] = mine
    return lanes


def _nvswitched(template: NodeTemplate) -> bool:
    """Whether any GPU pair of the template talks through NVSwitches."""
    return any(
        template.link_tier(a.index, b.index)[0] == TIER_NVSWITCH
        for a in template.gpus
        for b in template.gpus
        if a.index < b.index
    )


def fake_nvml_description(template: NodeTemplate) -> dict[str, Any]:
    """The fake NVML description (as in ``fake_nvml/specs``) of a template's GPUs, idle.

    A GPU with GPM (:func:`has_gpm`) has idle GPM readings, any other the idle PCIe and
    NVLink byte counters of the field values (the simulator sets both from its jobs).
    NVSwitched GPUs reach six NVSwitches over twelve links (an A100 baseboard); GPUs with
    direct NVLinks (an imported POWER8 or DGX-1 machine) list their peers, so that the
    exporter's link matrix shows ``NV#`` pairs and no NVSwitch, as on the real machine.
    """
    numa = {n.id: format_cpulist(n.cpus) for n in template.topology.numa_nodes if n.cpus}
    switches: list[str] = []
    if _nvswitched(template):
        switches = [f"00000000:{0xC4 + i:02X}:00.0" for i in range(NVSWITCH_LINKS // 2)]
    limit_mw = template.gpu_power_limit_watts * 1000
    gpus = []
    for gpu in template.gpus:
        _, bus, rest = gpu.pci_bus_id.split(":")
        entry: dict[str, Any] = {
            "uuid": gpu.uuid
            or f"GPU-{template.name[:8]}-{gpu.index:04d}-4000-8000-{bus}{rest[:2]}",
            "pci_bus_id": _nvml_bus_id(gpu),
            "numa_node": gpu.numa_node,
            "processes": [],
        }
        if gpu.switch is not None:
            entry["pcie_switch"] = gpu.switch
        nvlinks = _nvlinks(template, gpu, switches)
        if nvlinks:
            entry["nvlinks"] = nvlinks
        gpus.append(entry)
    matrix = [[template.pcie_label(a.index, b.index) for b in template.gpus] for a in template.gpus]
    activity: dict[str, Any] = (
        {"gpm": dict(_IDLE_GPM)}
        if has_gpm(template.gpu_model)
        else {
            "nvlink_throughput": dict(_IDLE_NVLINK_THROUGHPUT),
            "pcie_counters": dict(_IDLE_PCIE_COUNTERS),
        }
    )
    return {
        "driver_version": DRIVER_VERSION,
        "cuda_driver_version": CUDA_DRIVER_VERSION,
        "numa_nodes": numa,
        "nvswitches": switches,
        "defaults": {
            "name": template.gpu_model,
            "pci_device_id": template.gpu_pci_device_id,
            "memory_total_bytes": template.gpu_memory_bytes,
            "memory_used_bytes": 0,
            "utilization_gpu": 0,
            "utilization_memory": 0,
            "power_mw": template.gpu_idle_watts * 1000,
            "power_limit_mw": limit_mw,
            "energy_mj": {"start": 0, "rate": 0},
            "temperature_c": 30,
            "clock_sm_mhz": 1410,
            "clock_mem_mhz": 1593,
            "clock_event_reasons": [],
            "ecc": {
                "volatile": {"corrected": 0, "uncorrected": 0},
                "aggregate": {"corrected": 0, "uncorrected": 0},
            },
            "row_remapping": {"correctable": 0, "uncorrectable": 0},
            "nvlink_errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0},
            "pcie_replays": 0,
            "pcie_tx_kbps": 0,
            "pcie_rx_kbps": 0,
            "mig": {"mode": "disabled"},
            **activity,
        },
        "gpus": gpus,
        "topology": {"matrix": matrix},
    }
