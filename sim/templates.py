"""Node templates: the built-in machines of the simulator, and importing one.

Built-in templates (:data:`BUILTIN_TEMPLATES`):

* ``dgx-a100``: NVIDIA DGX A100, 2 AMD EPYC 7742 sockets in NPS2 (4 NUMA nodes, 256 CPUs),
  8 A100-SXM4-80GB on 6 NVSwitches (NV12 between every pair), two GPUs behind each pair of
  PCIe switches;
* ``pcie-4gpu``: 2 sockets x 24 cores x 2 threads, 4 NVIDIA L40S: GPU0 and GPU1 behind one
  PCIe switch on socket 0, GPU2 and GPU3 on two root ports of socket 1;
* ``pcie-8gpu-2sw``: 2 sockets x 32 cores x 2 threads, 8 A100-PCIE-40GB, two PCIe switches
  per socket with two GPUs and one NIC each;
* ``xeon-2s``: the 2-socket Intel Xeon Gold 6132 of the CRI-RM measurement (2 x 14 cores x 2
  threads, 2 NUMA nodes, 192 GB), no GPU.

The GPUs of ``dgx-a100`` and ``pcie-4gpu`` are read from the fake NVML description shipped
under the same name (``toposcope exporter --nvml fake:NAME``), the one source of their
model, memory, power limit, UUIDs, PCI ids, NUMA nodes, PCIe switches and NVLinks; the
template adds what the description does not hold (CPUs, NICs, the switches' own PCI ids).

Templates can also be imported from an hwloc XML file (``lstopo --of xml``) or a sysfs
root through the topology builders (:func:`template_from_hwloc_xml`,
:func:`template_from_sysfs`); their GPU pairs keep the link matrix the builder read
(NVLinks through NVSwitches or direct ``NV#``, ``PIX``/``PXB`` behind PCIe switches, ``PHB``,
``NODE``, ``SYS``), which the performance model prices by the truth's link tiers (see
:meth:`NodeTemplate.link_tier`).
"""

from __future__ import annotations

from pathlib import Path

from toposcope.errors import ConfigError
from toposcope.sim.machines import GIB, PCI_CLASS_ETHERNET, Machine, assemble, machine
from toposcope.sim.nodetemplate import GpuSpec, NicSpec, NodeTemplate
from toposcope.sim.nvml_descriptions import ShippedGpus, shipped_gpus
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import Cpu, LinkType, PciDevice, Topology
from toposcope.topology.sysfs import build_from_sysfs

#: ``NodeTemplate`` is re-exported for the modules that build clusters from templates.
__all__ = [
    "BUILTIN_TEMPLATES",
    "NodeTemplate",
    "builtin_template",
    "template_from_hwloc_xml",
    "template_from_sysfs",
    "template_from_topology",
]


def _dgx_a100() -> NodeTemplate:
    hardware = machine(
        sockets=2,
        cores_per_socket=64,
        numa_per_socket=2,
        memory_per_node=256 * GIB,
        distances={(True, True): 10, (False, True): 12, (False, False): 32},
    )
    shipped = shipped_gpus("dgx-a100")
    nic_layout = [
        ("0c", 1),
        ("12", 1),
        ("4b", 0),
        ("54", 0),
        ("8d", 3),
        ("94", 3),
        ("ba", 2),
        ("cc", 2),
    ]
    nics = [
        NicSpec(f"mlx5_{i}", f"0000:{bus}:00.0", node, 200, f"sw{i // 2}")
        for i, (bus, node) in enumerate(nic_layout)
    ]
    switches = {
        f"sw{i}": (f"0000:{bus}:00.0", node)
        for i, (bus, node) in enumerate([("05", 1), ("45", 0), ("85", 3), ("b5", 2)])
    }
    return _from_shipped(
        "dgx-a100",
        shipped,
        hardware=hardware,
        nics=nics,
        switches=switches,
        idle_watts=60.0,
        description="NVIDIA DGX A100: 2x EPYC 7742 (NPS2, 4 NUMA nodes), "
        "8x A100-SXM4-80GB on NVSwitch",
    )


def _pcie_4gpu() -> NodeTemplate:
    hardware = machine(
        sockets=2,
        cores_per_socket=24,
        numa_per_socket=1,
        memory_per_node=256 * GIB,
        distances={(True, True): 10, (False, False): 21},
    )
    nics = [NicSpec("mlx5_0", "0000:31:00.0", 0, 100), NicSpec("mlx5_1", "0000:b1:00.0", 1, 100)]
    return _from_shipped(
        "pcie-4gpu",
        shipped_gpus("pcie-4gpu"),
        hardware=hardware,
        nics=nics,
        switches={"socket0-switch": ("0000:15:00.0", 0)},
        idle_watts=35.0,
        description="2x 24-core sockets, 4x L40S: GPU0+1 on one switch (socket 0), GPU2, GPU3 "
        "on root ports of socket 1",
    )


def _from_shipped(
    name: str,
    shipped: ShippedGpus,
    *,
    hardware: Machine,
    nics: list[NicSpec],
    switches: dict[str, tuple[str, int]],
    idle_watts: float,
    description: str,
) -> NodeTemplate:
    """A template whose GPUs come from a shipped fake NVML description."""
    topology = assemble(
        name,
        *hardware,
        list(shipped.gpus),
        nics,
        switches,
        gpu_device=shipped.pci_device_id >> 16,
        gpu_model=shipped.model,
        nv_label=shipped.nvlink_label,
        same_switch_label=shipped.same_switch_label,
    )
    return NodeTemplate(
        name=name,
        topology=topology,
        gpus=shipped.gpus,
        nics=tuple(nics),
        gpu_model=shipped.model,
        gpu_pci_device_id=shipped.pci_device_id,
        gpu_memory_bytes=shipped.memory_bytes,
        gpu_power_limit_watts=shipped.power_limit_watts,
        gpu_idle_watts=idle_watts,
        same_switch_label=shipped.same_switch_label,
        description=description,
    )


def _pcie_8gpu_2sw() -> NodeTemplate:
    packages, nodes, cpus = machine(
        sockets=2,
        cores_per_socket=32,
        numa_per_socket=1,
        memory_per_node=512 * GIB,
        distances={(True, True): 10, (False, False): 21},
    )
    buses = ["1a", "1b", "3d", "3e", "88", "89", "b1", "b2"]
    gpus = [
        GpuSpec(
            index=i,
            pci_bus_id=f"0000:{bus}:00.0",
            numa_node=i // 4,
            switch=f"s{i // 4}{'ab'[(i // 2) % 2]}",
            uuid=f"GPU-3c51b0a7-{bus}00-4a1e-8f60-7d2e9c4b5a0{i}",
        )
        for i, bus in enumerate(buses)
    ]
    nics = [
        NicSpec(f"mlx5_{i}", f"0000:{bus}:00.0", i // 2, 200, f"s{i // 2}{'ab'[i % 2]}")
        for i, bus in enumerate(["1c", "3f", "8a", "b3"])
    ]
    switches = {
        "s0a": ("0000:18:00.0", 0),
        "s0b": ("0000:3b:00.0", 0),
        "s1a": ("0000:86:00.0", 1),
        "s1b": ("0000:af:00.0", 1),
    }
    topology = assemble(
        "pcie-8gpu-2sw", packages, nodes, cpus, gpus, nics, switches,
        gpu_device=0x20F1, gpu_model="NVIDIA A100-PCIE-40GB",
    )  # fmt: skip
    return NodeTemplate(
        name="pcie-8gpu-2sw",
        topology=topology,
        gpus=tuple(gpus),
        nics=tuple(nics),
        gpu_model="NVIDIA A100-PCIE-40GB",
        gpu_pci_device_id=0x20F110DE,
        gpu_memory_bytes=40 * GIB,
        gpu_power_limit_watts=250.0,
        gpu_idle_watts=35.0,
        description="2x 32-core sockets, 8x A100-PCIE-40GB, two PCIe switches per socket "
        "(2 GPUs + 1 NIC each)",
    )


def _xeon_2s() -> NodeTemplate:
    packages, nodes, cpus = machine(
        sockets=2,
        cores_per_socket=14,
        numa_per_socket=1,
        memory_per_node=96 * GIB,
        distances={(True, True): 10, (False, False): 21},
    )
    nics = [NicSpec("eth0", "0000:18:00.0", 0, 25)]
    pci = (PciDevice("0000:18:00.0", 0x8086, 0x158B, PCI_CLASS_ETHERNET, 0, nodes[0].cpus),)
    topology = Topology(
        packages=packages, numa_nodes=nodes, cpus=cpus, pci_devices=pci, source="template:xeon-2s"
    )
    return NodeTemplate(
        name="xeon-2s",
        topology=topology,
        nics=tuple(nics),
        description="2x Intel Xeon Gold 6132 (14 cores, 2 threads each), 2 NUMA nodes, 192 GB: "
        "the CRI-RM measurement machine",
    )


_BUILDERS = {
    "dgx-a100": _dgx_a100,
    "pcie-4gpu": _pcie_4gpu,
    "pcie-8gpu-2sw": _pcie_8gpu_2sw,
    "xeon-2s": _xeon_2s,
}

#: Names of the built-in templates.
BUILTIN_TEMPLATES: tuple[str, ...] = tuple(_BUILDERS)

_CACHE: dict[str, NodeTemplate] = {}


def builtin_template(name: str) -> NodeTemplate:
    """A built-in template by name; :class:`ConfigError` lists the known names otherwise."""
    if name not in _BUILDERS:
        raise ConfigError(
            f"unknown node template {name!r} (built-in: {', '.join(BUILTIN_TEMPLATES)})"
        )
    if name not in _CACHE:
        _CACHE[name] = _BUILDERS[name]()
    return _CACHE[name]


# -- importing ---------------------------------------------------------------------------------


def template_from_topology(
    name: str,
    topology: Topology,
    *,
    gpu_model: str | None = None,
    gpu_memory_bytes: int = 40 * GIB,
) -> NodeTemplate:
    """A template over a measured or imported topology.

    CPUs are completed from the NUMA nodes when the builder did not list them (hwloc XML
    gives packages and nodes), GPUs keep the builder's order and NUMA nodes. The topology
    has no PCIe switch facts, so no GPU pair is ``same-switch``; NVLink pairs are those its
    link matrix marks ``NV*``.
    """
    if not any(n.cpus for n in topology.numa_nodes):
        raise ConfigError(f"template {name}: the topology has no NUMA node with CPUs")
    cpus = topology.cpus
    if not cpus:
        package_of = {c: p.id for p in topology.packages for c in p.cpus}
        cpus = tuple(
            Cpu(c, package_of.get(c), None, n.id) for n in topology.numa_nodes for c in n.cpus
        )
        cpus = tuple(sorted(cpus, key=lambda c: c.id))
    fabric: dict[int, str] = {}
    for link in topology.gpu_links:
        if link.type is LinkType.NVLINK:
            for gpu in link.pair:
                if fabric.get(gpu) != "nvswitch":
                    fabric[gpu] = "nvswitch" if link.nvswitch else "nvlink"
    gpus = tuple(
        GpuSpec(
            index=g.index,
            pci_bus_id=g.pci_bus_id or f"0000:{0x10 + g.index:02x}:00.0",
            numa_node=g.numa_node,
            nvlink_group=fabric.get(g.index),
            uuid=g.uuid or "",
        )
        for g in topology.gpus
    )
    model = gpu_model or next((g.model for g in topology.gpus if g.model), None) or "GPU"
    return NodeTemplate(
        name=name,
        topology=Topology(
            packages=topology.packages,
            numa_nodes=topology.numa_nodes,
            cpus=cpus,
            pci_devices=topology.pci_devices,
            gpus=topology.gpus,
            gpu_links=topology.gpu_links,
            source=topology.source,
        ),
        gpus=gpus,
        gpu_model=model,
        gpu_memory_bytes=gpu_memory_bytes if gpus else 0,
        description=f"imported from {topology.source}",
    )


def template_from_hwloc_xml(path: Path | str, name: str | None = None) -> NodeTemplate:
    """Import a template from an hwloc XML file (``lstopo --of xml``, hwloc v1, v2 or 3.0)."""
    path = Path(path)
    return template_from_topology(name or path.stem, build_from_hwloc_xml(path))


def template_from_sysfs(root: Path | str, name: str | None = None) -> NodeTemplate:
    """Import a template from a snapshot root holding ``sys/`` (and optionally ``proc/``)."""
    root = Path(root)
    proc = root / "proc"
    return template_from_topology(
        name or root.name, build_from_sysfs(root / "sys", proc if proc.is_dir() else None)
    )
