"""Node templates: the built-ins agree with the fake NVML specs; imports through the builders."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import HWLOC_XML
from toposcope.cpulist import format_cpulist
from toposcope.fake_nvml import SPEC_DIR, load_spec
from toposcope.sim.nvml_descriptions import shipped_gpus
from toposcope.sim.sysfs_writer import write_topology_sysfs
from toposcope.sim.templates import (
    BUILTIN_TEMPLATES,
    builtin_template,
    template_from_hwloc_xml,
    template_from_sysfs,
)
from toposcope.topology.nvml import normalise_pci_bus_id


@pytest.mark.parametrize("name", ["dgx-a100", "pcie-4gpu"])
def test_builtin_matches_the_fake_nvml_description(name: str) -> None:
    template = builtin_template(name)
    spec = load_spec(SPEC_DIR / f"{name}.yaml")
    assert [g.pci_bus_id for g in template.gpus] == [g.pci_bus_id for g in spec.gpus]
    assert [g.numa_node for g in template.gpus] == [g.numa_node for g in spec.gpus]
    assert [g.uuid for g in template.gpus] == [g.uuid for g in spec.gpus]
    for gpu, fake in zip(template.gpus, spec.gpus, strict=True):
        assert format_cpulist(template.node_cpus(gpu.numa_node or 0)) == format_cpulist(
            fake.cpu_affinity
        )
    assert {g.name for g in spec.gpus} == {template.gpu_model}


def test_template_gpus_are_read_from_the_shipped_description() -> None:
    dgx = shipped_gpus("dgx-a100")
    # no pcie_switch in the description: the PXB pairs of its PCIe matrix share a switch
    assert [g.switch for g in dgx.gpus] == ["sw0", "sw0", "sw1", "sw1", "sw2", "sw2", "sw3", "sw3"]
    assert dgx.same_switch_label == "PXB" and dgx.nvlink_label == "NV12"
    assert {g.nvlink_group for g in dgx.gpus} == {"nvswitch"}
    assert (dgx.model, dgx.pci_device_id) == ("NVIDIA A100-SXM4-80GB", 0x20B210DE)
    assert (dgx.memory_bytes, dgx.power_limit_watts) == (80 * 1024**3, 400.0)
    pcie4 = shipped_gpus("pcie-4gpu")
    assert [g.switch for g in pcie4.gpus] == ["socket0-switch", "socket0-switch", None, None]
    assert pcie4.same_switch_label == "PIX"
    assert {g.nvlink_group for g in pcie4.gpus} == {None}
    assert (pcie4.model, pcie4.power_limit_watts) == ("NVIDIA L40S", 350.0)


def test_builtin_shapes() -> None:
    dgx = builtin_template("dgx-a100")
    assert len(dgx.cpus) == 256 and dgx.numa_ids == (0, 1, 2, 3)
    assert len(dgx.topology.packages) == 2 and len(dgx.gpus) == 8
    assert {dgx.link_class(a, b) for a in range(8) for b in range(8) if a != b} == {"nvlink"}
    assert dgx.distance(0, 1) < dgx.distance(0, 2)
    xeon = builtin_template("xeon-2s")
    assert len(xeon.cpus) == 56 and xeon.numa_ids == (0, 1) and not xeon.gpus
    assert format_cpulist(xeon.node_cpus(0)) == "0-13,28-41"
    assert sum(n.memory_bytes for n in xeon.topology.numa_nodes) == 192 * 1024**3
    pcie8 = builtin_template("pcie-8gpu-2sw")
    assert len({g.switch for g in pcie8.gpus}) == 4
    assert pcie8.link_class(0, 1) == "same-switch"
    assert pcie8.link_class(0, 2) == "cross-switch"
    assert pcie8.link_class(0, 7) == "cross-socket"
    assert len(pcie8.nics) == 4
    pcie4 = builtin_template("pcie-4gpu")
    assert [g.numa_node for g in pcie4.gpus] == [0, 0, 1, 1]
    assert pcie4.link_class(0, 1) == "same-switch" and pcie4.link_class(2, 3) == "cross-switch"
    assert set(BUILTIN_TEMPLATES) == {"dgx-a100", "pcie-4gpu", "pcie-8gpu-2sw", "xeon-2s"}


def test_gpu_link_matrix_uses_nvidia_smi_labels() -> None:
    pcie8 = builtin_template("pcie-8gpu-2sw")
    labels = {(link.gpu, link.peer_gpu): link.link for link in pcie8.topology.gpu_links}
    assert labels[(0, 1)] == "PIX" and labels[(0, 2)] == "NODE" and labels[(0, 4)] == "SYS"
    dgx = builtin_template("dgx-a100")
    assert {link.link for link in dgx.topology.gpu_links} == {"NV12"}
    assert dgx.pcie_label(0, 1) == "PXB"


def test_import_from_hwloc_xml_gets_the_gpus_and_numa_nodes() -> None:
    template = template_from_hwloc_xml(HWLOC_XML / "32em64t-2n8c2t-pci-normalio.xml")
    assert template.name == "32em64t-2n8c2t-pci-normalio"
    assert template.numa_ids == (0, 1)
    assert len(template.cpus) == 32
    assert [(g.index, g.numa_node) for g in template.gpus] == [(0, 0), (1, 1), (2, 1)]
    assert template.link_class(1, 2) == "cross-switch"
    assert template.link_class(0, 1) == "cross-socket"
    power = template_from_hwloc_xml(HWLOC_XML / "power8gpudistances.xml", "power8")
    assert power.name == "power8"
    assert [g.numa_node for g in power.gpus] == [0, 0, 1, 1]


def test_sysfs_round_trip(tmp_path: Path) -> None:
    original = builtin_template("pcie-8gpu-2sw")
    write_topology_sysfs(tmp_path, original.topology)
    imported = template_from_sysfs(tmp_path, "again")
    assert imported.cpus == original.cpus
    assert imported.numa_ids == original.numa_ids
    for a in original.numa_ids:
        for b in original.numa_ids:
            assert imported.distance(a, b) == original.distance(a, b)
    assert [(g.pci_bus_id, g.numa_node) for g in imported.gpus] == [
        (g.pci_bus_id, g.numa_node) for g in original.gpus
    ]
    assert all(normalise_pci_bus_id(g.pci_bus_id) == g.pci_bus_id for g in imported.gpus)


def test_import_from_an_unpacked_hwloc_sysfs_snapshot(hwloc_root: object) -> None:
    root = hwloc_root("16amd64-8n2c")  # type: ignore[operator]
    template = template_from_sysfs(root)
    assert len(template.numa_ids) == 8
    assert not template.gpus
