"""GPU links from hwloc XML: NVLinks (hwloc's NVLinkBandwidth matrix) and the PCIe tree.

hwloc ships no ``lstopo`` output beside its ``xml/`` files, so the expectations here are
derived by hand from each file, with the reasoning next to them, using NVIDIA's definitions
(``nvidia-smi topo -m``): NV# bonded NVLinks, PIX at most one PCIe switch, PXB several
bridges without the host bridge, PHB through the host bridge, NODE across host bridges of
one NUMA node, SYS across NUMA nodes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, HWLOC_XML
from toposcope.errors import ConfigError
from toposcope.topology.hwloc_links import per_link_bandwidth
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import Gpu, GpuLink, PciDevice, Topology
from toposcope.topology.pcie import MAX_PCIE_MATRIX_GPUS, NvLink, gpu_links, pcie_link

HGX = FIXTURES / "topology" / "hgx-nvswitch.xml"
POWER8 = HWLOC_XML / "power8gpudistances.xml"


def _matrix(topo: Topology) -> dict[tuple[int, int], str]:
    return {(link.gpu, link.peer_gpu): link.link for link in topo.gpu_links}


def _upper(topo: Topology) -> dict[tuple[int, int], str]:
    """The matrix above its diagonal, after checking that it is complete and symmetric."""
    links = _matrix(topo)
    indexes = [g.index for g in topo.gpus]
    assert set(links) == {(a, b) for a in indexes for b in indexes if a != b}
    assert all(links[(a, b)] == links[(b, a)] for a, b in links)
    return {(a, b): label for (a, b), label in links.items() if a < b}


def _devices(path: Path) -> dict[str, PciDevice]:
    return {d.bus_id: d for d in build_from_hwloc_xml(path).pci_devices}


def test_power8_nvlink_pairs_are_nv2_and_the_rest_sys() -> None:
    # The matrix gives 40000 MB/s between nvml0/nvml1 and nvml2/nvml3 and none across
    # sockets; P100 (NVLink 1) links carry 20000 MB/s each, so two bonded links: NV2, as
    # nvidia-smi shows on this machine. The other pairs sit under different host bridges in
    # different NUMA nodes: SYS.
    topo = build_from_hwloc_xml(POWER8)
    assert _upper(topo) == {
        (0, 1): "NV2",
        (0, 2): "SYS",
        (0, 3): "SYS",
        (1, 2): "SYS",
        (1, 3): "SYS",
        (2, 3): "NV2",
    }
    assert not any(link.nvswitch for link in topo.gpu_links)


def test_power8_homogeneous_matrix_of_gpus_only_gives_the_same_links(tmp_path: Path) -> None:
    # hwloc writes a matrix whose members are all OS devices as <distances2 type="OSDev"
    # indexing="gp"> with plain gp indexes (here: the four NVML devices, packages dropped).
    text = POWER8.read_text(encoding="utf-8")
    homogeneous = (
        '<distances2 type="OSDev" nbobjs="4" kind="25" name="NVLinkBandwidth" indexing="gp">'
        "<indexes>332 333 334 335</indexes><u64values>1000000 40000 0 0 40000 1000000 0 0 "
        "0 0 1000000 40000 0 0 40000 1000000</u64values></distances2>"
    )
    text = re.sub(r"<distances2hetero.*?</distances2hetero>", homogeneous, text, flags=re.S)
    path = tmp_path / "power8-homogeneous.xml"
    path.write_text(text, encoding="utf-8")
    assert _upper(build_from_hwloc_xml(path)) == _upper(build_from_hwloc_xml(POWER8))


def test_nvswitch_machine_links_every_sxm_gpu_with_nv18() -> None:
    # GPUs 0, 1, 4 and 5 (H100) reach the NVSwitch with 450000 MB/s = 18 links of 25000;
    # GPUs 2 and 3 (L40S) have no NVLink, so PCIe decides: GPU 2 hangs on another root port
    # of GPU 0's host bridge (PHB), GPU 3 under the second host bridge of package 0 (NODE).
    topo = build_from_hwloc_xml(HGX)
    assert [g.pci_bus_id for g in topo.gpus] == [
        "0000:03:00.0",
        "0000:04:00.0",
        "0000:10:00.0",
        "0000:21:00.0",
        "0000:83:00.0",
        "0000:86:00.0",
    ]
    sxm = {0, 1, 4, 5}
    upper = _upper(topo)
    assert {pair: label for pair, label in upper.items() if set(pair) <= sxm} == {
        (0, 1): "NV18",
        (0, 4): "NV18",
        (0, 5): "NV18",
        (1, 4): "NV18",
        (1, 5): "NV18",
        (4, 5): "NV18",
    }
    assert {pair: label for pair, label in upper.items() if not set(pair) <= sxm} == {
        (0, 2): "PHB",
        (0, 3): "NODE",
        (1, 2): "PHB",
        (1, 3): "NODE",
        (2, 3): "NODE",
        (2, 4): "SYS",
        (2, 5): "SYS",
        (3, 4): "SYS",
        (3, 5): "SYS",
    }
    assert {link.pair for link in topo.gpu_links if link.nvswitch} == {
        (a, b) for a in sxm for b in sxm if a != b
    }
    assert "NVSwitch: GPU0, GPU1, GPU4, GPU5 reach each other through NVSwitches" in (
        topo.to_text()
    )


def test_without_nvlinks_the_pcie_switches_decide(tmp_path: Path) -> None:
    # The same machine with the NVLink matrix removed: GPUs 0 and 1 sit on two downstream
    # ports of one switch (PIX); GPU 5 is behind a second switch cascaded below GPU 4's
    # (PXB); GPUs 0 and 4 are in different packages (SYS).
    text = re.sub(r"<distances2hetero.*?</distances2hetero>", "", HGX.read_text(), flags=re.S)
    path = tmp_path / "hgx-pcie-only.xml"
    path.write_text(text, encoding="utf-8")
    upper = _upper(build_from_hwloc_xml(path))
    assert (upper[(0, 1)], upper[(4, 5)], upper[(0, 4)], upper[(0, 2)]) == (
        "PIX",
        "PXB",
        "SYS",
        "PHB",
    )


def test_pci_path_of_a_device_behind_cascaded_switches() -> None:
    # cxlmem+dax: the CXL device 11:00.0 hangs below five bridges (a root port, then two
    # levels of switches) of the host bridge with bus range 0000:[0c-16].
    device = _devices(HWLOC_XML / "cxlmem+dax.v2.xml")["0000:11:00.0"]
    assert device.bridges == (
        "0000:10:00.0",
        "0000:0f:00.0",
        "0000:0e:00.0",
        "0000:0d:00.0",
        "0000:0c:00.0",
    )
    assert device.host_bridge == "0000:[0c-16]"
    assert _devices(HWLOC_XML / "cxlmem+dax.v3.xml")["0000:11:00.0"] == device


@pytest.mark.parametrize(
    ("path", "a", "b", "expected"),
    [
        # two downstream ports (10:00.0, 10:01.0) of the switch whose upstream port is 0f:00.0
        (HWLOC_XML / "cxlmem+dax.v2.xml", "0000:11:00.0", "0000:12:00.0", "PIX"),
        # they meet at 0d:00.0, two switch levels above 15:00.0
        (HWLOC_XML / "cxlmem+dax.v2.xml", "0000:11:00.0", "0000:15:00.0", "PXB"),
        # two functions directly on host bridge 0000:[00-00]
        (HWLOC_XML / "cxlmem+dax.v2.xml", "0000:00:01.0", "0000:00:02.0", "PHB"),
        # host bridges [00-00] and [0c-16] of the machine's only NUMA node
        (HWLOC_XML / "cxlmem+dax.v2.xml", "0000:00:01.0", "0000:11:00.0", "NODE"),
        # two functions of one Ethernet device behind one bridge
        (HWLOC_XML / "16intel64-manyVFs.xml", "0000:0b:00.0", "0000:0b:00.1", "PIX"),
        # downstream ports 0a:00.0 and 0a:01.0 of the Cisco VIC switch (upstream 09:00.0)
        (HWLOC_XML / "16intel64-manyVFs.xml", "0000:0b:00.0", "0000:0c:00.0", "PIX"),
        # root ports 00:01.1 and 00:03.0 of host bridge 0000:[00-15]
        (HWLOC_XML / "16intel64-manyVFs.xml", "0000:02:00.0", "0000:0b:00.0", "PHB"),
        # host bridges of package 0 and package 1
        (HWLOC_XML / "16intel64-manyVFs.xml", "0000:02:00.0", "0000:88:00.0", "SYS"),
        # the Matrox VGA behind a chain of four bridges vs the NIC on root port 00:03.0
        (HWLOC_XML / "irregulargroups-disallowed.xml", "0000:08:00.0", "0000:01:00.0", "PHB"),
    ],
)
def test_pcie_link_between_functions_of_the_corpus(
    path: Path, a: str, b: str, expected: str
) -> None:
    devices = _devices(path)
    assert pcie_link(devices[a], devices[b]).value == expected
    assert pcie_link(devices[b], devices[a]).value == expected


def test_per_link_bandwidth_follows_the_nvlink_generation() -> None:
    assert per_link_bandwidth("Tesla P100-SXM2-16GB") == 20_000
    assert per_link_bandwidth("NVIDIA H100 80GB HBM3") == 25_000
    assert per_link_bandwidth("NVIDIA B200") == 50_000
    assert per_link_bandwidth(None) == 25_000


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("OSDev:332 ", "OSDev:999 ", "names 'OSDev:999', which is no object of that type"),
        ("OSDev:332 ", "Package:332 ", "names 'Package:332'"),
        ("1000000 40000 0 0 40000 0 40000", "1000000 x 0 0 40000 0 40000", "bad value"),
        ("0 0 40000 40000 0 1000000 ", "0 0 40000 40000 0 ", "6 indexes and 35 values"),
    ],
)
def test_malformed_nvlink_matrix_is_a_config_error(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    text = POWER8.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "broken-nvlink.xml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        build_from_hwloc_xml(path)
    assert "broken-nvlink.xml" in str(raised.value) and problem in str(raised.value)


def test_a_document_with_more_gpus_than_any_machine_keeps_only_its_nvlinks() -> None:
    """The PCIe matrix is quadratic in GPUs: over the cap only the NVLinks are listed."""
    count = MAX_PCIE_MATRIX_GPUS + 1
    gpus = [Gpu(i, f"0000:{i // 256:02x}:{i % 256:02x}.0", 0, ()) for i in range(count)]
    devices = [
        PciDevice(g.pci_bus_id or "", 0x10DE, 0x2330, 0x0302, 0, (), host_bridge="0000:00")
        for g in gpus
    ]
    nvlinks = {frozenset((0, 1)): NvLink(4)}
    assert gpu_links(gpus, devices, nvlinks) == (GpuLink(0, 1, "NV4"), GpuLink(1, 0, "NV4"))
    assert len(gpu_links(gpus[:3], devices[:3], nvlinks)) == 6
