"""The hwloc XML builder on the three format generations, and its error handling.

hwloc's corpus (``tests/fixtures/hwloc``) holds 2.0 and 3.0 files only, so the hwloc 1.x
layout is written here, modelled on what ``lstopo`` exports with the v1 flag; the 2.x
samples exercise what the corpus does not (distances indexed by ``gp_index``, a PCI device
above several nodes, infinite bitmaps).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import HWLOC_LINUX, HWLOC_XML
from toposcope.errors import ConfigError
from toposcope.topology.hwloc_xml import build_from_hwloc_xml

#: hwloc 1.x: NUMA nodes are parents; PU 3 is offline; node 2 has memory and no CPU.
V1_XML = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc.dtd">
<topology>
  <object type="Machine" os_index="0" cpuset="0x000000ff" complete_cpuset="0x000000ff"
      online_cpuset="0x000000f7" allowed_cpuset="0x000000ff" nodeset="0x00000007"
      complete_nodeset="0x00000007" allowed_nodeset="0x00000007" local_memory="0">
    <info name="Backend" value="Linux"/>
    <distances nbobjs="3" relative_depth="1" latency_base="10.000000">
      <latency value="1.000000"/><latency value="2.100000"/><latency value="1.700000"/>
      <latency value="2.100000"/><latency value="1.000000"/><latency value="1.700000"/>
      <latency value="1.700000"/><latency value="1.700000"/><latency value="1.000000"/>
    </distances>
    <object type="NUMANode" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f"
        online_cpuset="0x00000007" nodeset="0x00000001" local_memory="17179869184">
      <page_type size="4096" count="4194304"/>
      <object type="Socket" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f"
          online_cpuset="0x00000007" nodeset="0x00000001">
        <object type="Cache" cpuset="0x0000000f" depth="3" cache_size="8388608">
          <object type="Core" os_index="0" cpuset="0x00000003" online_cpuset="0x00000003">
            <object type="PU" os_index="0" cpuset="0x00000001" online_cpuset="0x00000001"/>
            <object type="PU" os_index="1" cpuset="0x00000002" online_cpuset="0x00000002"/>
          </object>
          <object type="Core" os_index="1" cpuset="0x0000000c" online_cpuset="0x00000004">
            <object type="PU" os_index="2" cpuset="0x00000004" online_cpuset="0x00000004"/>
            <object type="PU" os_index="3" cpuset="0x00000008" online_cpuset="0x00000000"/>
          </object>
        </object>
      </object>
      <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[00-02]">
        <object type="PCIDev" pci_busid="0000:01:00.0" pci_type="0200 [8086:10fb] [8086:000c] 01"
            pci_link_speed="4.000000">
          <object type="OSDev" name="eth0" osdev_type="2"/>
        </object>
      </object>
    </object>
    <object type="NUMANode" os_index="1" cpuset="0x000000f0" complete_cpuset="0x000000f0"
        online_cpuset="0x000000f0" nodeset="0x00000002" local_memory="17179869184">
      <object type="Socket" os_index="1" cpuset="0x000000f0" online_cpuset="0x000000f0">
        <object type="Core" os_index="0" cpuset="0x00000030">
          <object type="PU" os_index="4" cpuset="0x00000010"/>
          <object type="PU" os_index="5" cpuset="0x00000020"/>
        </object>
        <object type="Core" os_index="1" cpuset="0x000000c0">
          <object type="PU" os_index="6" cpuset="0x00000040"/>
          <object type="PU" os_index="7" cpuset="0x00000080"/>
        </object>
      </object>
      <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[80-82]">
        <object type="Bridge" bridge_type="1-1" depth="1" bridge_pci="0000:[81-82]"
            pci_busid="0000:80:02.0" pci_type="0604 [8086:2f04] [0000:0000] 02">
          <object type="PCIDev" pci_busid="0000:82:00.0"
              pci_type="0302 [10DE:1DB4] [10de:1212] a1" pci_link_speed="15.753846">
            <info name="PCIVendor" value="NVIDIA Corporation"/>
            <info name="PCIDevice" value="GV100GL [Tesla V100 PCIe 16GB]"/>
            <object type="OSDev" name="cuda0" osdev_type="5">
              <info name="GPUModel" value="Tesla V100-PCIE-16GB"/>
            </object>
          </object>
        </object>
      </object>
    </object>
    <object type="NUMANode" os_index="2" cpuset="0x00000000" complete_cpuset="0x00000000"
        online_cpuset="0x00000000" nodeset="0x00000004" local_memory="8589934592"/>
  </object>
</topology>
"""

#: hwloc 2.x: package 1 holds DRAM node 1 and HBM node 3; distances are indexed by gp_index.
V2_XML = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f"
      allowed_cpuset="0xf...f,0x0000000f" nodeset="0x0000000b" complete_nodeset="0x0000000b"
      allowed_nodeset="0x0000000b" gp_index="1">
    <object type="Package" os_index="0" cpuset="0x00000003" nodeset="0x00000001" gp_index="2">
      <object type="NUMANode" os_index="0" cpuset="0x00000003" nodeset="0x00000001"
          gp_index="10" local_memory="34359738368"/>
      <object type="Core" os_index="0" cpuset="0x00000003" nodeset="0x00000001" gp_index="3">
        <object type="PU" os_index="0" cpuset="0x00000001" nodeset="0x00000001" gp_index="4"/>
        <object type="PU" os_index="1" cpuset="0x00000002" nodeset="0x00000001" gp_index="5"/>
      </object>
    </object>
    <object type="Package" os_index="1" cpuset="0x0000000c" nodeset="0x0000000a" gp_index="6">
      <object type="NUMANode" os_index="3" subtype="HBM" cpuset="0x0000000c"
          nodeset="0x00000008" gp_index="12" local_memory="17179869184"/>
      <object type="NUMANode" os_index="1" subtype="DRAM" cpuset="0x0000000c"
          nodeset="0x00000002" gp_index="11" local_memory="34359738368"/>
      <object type="Core" os_index="0" cpuset="0x0000000c" nodeset="0x0000000a" gp_index="7">
        <object type="PU" os_index="2" cpuset="0x00000004" nodeset="0x0000000a" gp_index="8"/>
        <object type="PU" os_index="3" cpuset="0x00000008" nodeset="0x0000000a" gp_index="9"/>
      </object>
      <object type="Bridge" gp_index="20" bridge_type="0-1" depth="0" bridge_pci="0000:[40-41]">
        <object type="PCIDev" gp_index="21" pci_busid="0000:41:00.0"
            pci_type="0302 [10de:2330] [10de:16c1] a1 00">
          <object type="OSDev" gp_index="22" name="nvml0" subtype="NVML" osdev_type="1">
            <info name="GPUModel" value="NVIDIA H100 80GB HBM3"/>
            <info name="NVIDIAUUID" value="GPU-0b3c2f1e-1111-2222-3333-444455556666"/>
          </object>
        </object>
      </object>
    </object>
    <object type="Bridge" gp_index="30" bridge_type="0-1" depth="0" bridge_pci="0000:[00-01]">
      <object type="PCIDev" gp_index="31" pci_busid="0000:00:1f.2"
          pci_type="0106 [8086:a182] [1028:0798] 09 00"/>
    </object>
  </object>
  <distances2 type="NUMANode" nbobjs="3" kind="5" name="NUMALatency" indexing="gp">
    <indexes length="8">10 11 12 </indexes>
    <u64values length="26">10 21 31 21 10 13 31 13 10 </u64values>
  </distances2>
  <distances2 type="NUMANode" nbobjs="3" kind="9" name="NUMABandwidth" indexing="gp">
    <indexes length="8">10 11 12 </indexes>
    <u64values length="26">99 1 1 1 99 1 1 1 99 </u64values>
  </distances2>
</topology>
"""


def _write(tmp_path: Path, text: str, name: str = "topo.xml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_v1_numa_parents_online_cpus_and_distances(tmp_path: Path) -> None:
    topo = build_from_hwloc_xml(_write(tmp_path, V1_XML))
    nodes = {n.id: n for n in topo.numa_nodes}
    assert nodes[0].cpus == (0, 1, 2)  # PU 3 is offline
    assert nodes[1].cpus == (4, 5, 6, 7)
    assert nodes[2].cpus == () and nodes[2].cpu_less
    assert [n.memory_bytes for n in topo.numa_nodes] == [16 << 30, 16 << 30, 8 << 30]
    assert [(p.id, p.cpus) for p in topo.packages] == [(0, (0, 1, 2)), (1, (4, 5, 6, 7))]
    assert nodes[0].package == 0 and nodes[1].package == 1 and nodes[2].package is None
    # latency_base 10 x normalised values 1.0 / 2.1 / 1.7
    assert dict(nodes[0].distances) == {0: 10, 1: 21, 2: 17}
    assert dict(nodes[2].distances) == {0: 17, 1: 17, 2: 10}
    assert topo.source.startswith("hwloc-xml:")


def test_v1_pci_locality_and_gpu(tmp_path: Path) -> None:
    topo = build_from_hwloc_xml(_write(tmp_path, V1_XML))
    devices = {d.bus_id: d for d in topo.pci_devices}
    assert set(devices) == {"0000:01:00.0", "0000:80:02.0", "0000:82:00.0"}
    nic = devices["0000:01:00.0"]
    assert (nic.vendor, nic.device, nic.class_id) == (0x8086, 0x10FB, 0x0200)
    assert nic.numa_node == 0 and nic.local_cpus == (0, 1, 2)
    assert devices["0000:80:02.0"].class_id == 0x0604  # a PCI bridge is a PCI function too
    (gpu,) = topo.gpus
    assert gpu.pci_bus_id == "0000:82:00.0" and gpu.vendor == 0x10DE
    assert gpu.numa_node == 1 and gpu.local_cpus == (4, 5, 6, 7)
    assert gpu.model == "Tesla V100-PCIE-16GB"


def test_v2_memory_children_hbm_is_memory_only(tmp_path: Path) -> None:
    topo = build_from_hwloc_xml(_write(tmp_path, V2_XML))
    nodes = {n.id: n for n in topo.numa_nodes}
    assert sorted(nodes) == [0, 1, 3]
    assert nodes[0].cpus == (0, 1)
    assert nodes[1].cpus == (2, 3)  # the DRAM node takes the package's CPUs
    assert nodes[3].cpus == () and nodes[3].package == 1  # HBM: memory only, in package 1
    assert nodes[3].memory_bytes == 16 << 30


def test_v2_distances_by_gp_index_latency_only(tmp_path: Path) -> None:
    topo = build_from_hwloc_xml(_write(tmp_path, V2_XML))
    nodes = {n.id: n for n in topo.numa_nodes}
    # gp 10/11/12 are nodes 0/1/3; the bandwidth matrix is not taken for latencies
    assert dict(nodes[0].distances) == {0: 10, 1: 21, 3: 31}
    assert dict(nodes[3].distances) == {0: 31, 1: 13, 3: 10}
    assert topo.to_dict()["numa_nodes"][1]["distances"] == [21, 10, 13]


def test_v2_pci_numa_node_needs_a_single_node(tmp_path: Path) -> None:
    topo = build_from_hwloc_xml(_write(tmp_path, V2_XML))
    devices = {d.bus_id: d for d in topo.pci_devices}
    # attached to package 1: its CPUs lie in DRAM node 1 only (HBM node 3 holds none)
    assert devices["0000:41:00.0"].numa_node == 1
    # attached to the machine: local to every CPU, so no single node
    sata = devices["0000:00:1f.2"]
    assert sata.numa_node is None and sata.local_cpus == (0, 1, 2, 3)
    (gpu,) = topo.gpus
    assert gpu.model == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid == "GPU-0b3c2f1e-1111-2222-3333-444455556666"


def test_v2_and_v3_exports_of_one_machine_agree() -> None:
    v2 = build_from_hwloc_xml(HWLOC_XML / "cxlmem+dax.v2.xml")
    v3 = build_from_hwloc_xml(HWLOC_XML / "cxlmem+dax.v3.xml")
    assert v2.to_dict() == v3.to_dict()
    assert v2.numa_nodes[0].cpus == (0, 1, 2, 3)


def test_power8_gpus_with_models_uuids_and_nodes() -> None:
    topo = build_from_hwloc_xml(HWLOC_XML / "power8gpudistances.xml")
    assert [n.id for n in topo.numa_nodes] == [0, 1]
    assert topo.numa_nodes[0].distances == {0: 10, 1: 40}
    assert [(g.pci_bus_id, g.numa_node) for g in topo.gpus] == [
        ("0002:01:00.0", 0),
        ("0003:01:00.0", 0),
        ("000a:01:00.0", 1),
        ("000b:01:00.0", 1),
    ]
    assert {g.model for g in topo.gpus} == {"Tesla P100-SXM2-16GB"}
    assert all(g.uuid and g.uuid.startswith("GPU-") for g in topo.gpus)


def test_heterogeneous_memory_dram_holds_cpus_hbm_is_cpu_less() -> None:
    topo = build_from_hwloc_xml(HWLOC_XML / "64intel64-heteromem.xml")
    with_cpus = [n.id for n in topo.numa_nodes if n.cpus]
    memory_only = [n.id for n in topo.numa_nodes if n.cpu_less]
    assert with_cpus == [0, 1, 2, 3] and memory_only == [4, 5, 6, 7]
    assert sum(len(n.cpus) for n in topo.numa_nodes) == 64


def test_nodes_behind_memory_side_caches_get_their_cpus() -> None:
    topo = build_from_hwloc_xml(HWLOC_XML / "memorysidecaches.xml")
    assert [len(n.cpus) for n in topo.numa_nodes] == [20, 20, 20, 20]
    assert topo.numa_nodes[0].distances[2] == 11  # the two SNC halves of package 0


def test_offline_cpus_are_absent() -> None:
    topo = build_from_hwloc_xml(HWLOC_LINUX / "16em64t-4s2c2t-offlines-xml.xml")
    cpus = {c for n in topo.numa_nodes for c in n.cpus}
    assert cpus == {c for p in topo.packages for c in p.cpus}
    assert len(cpus) < 16


def test_json_contract_keys() -> None:
    data = build_from_hwloc_xml(HWLOC_XML / "24em64t-2n6c2t-pci.xml").to_dict()
    # the original keys first, in their order; NICs were added after them
    assert list(data) == [
        "packages",
        "numa_nodes",
        "pci_devices",
        "gpus",
        "gpu_links",
        "nics",
        "gpu_nic_links",
    ]
    # three NVIDIA GPUs: two behind root ports of package 1's host bridge, one in package 0
    assert {(link["gpu"], link["peer_gpu"]): link["link"] for link in data["gpu_links"]} == {
        (0, 1): "SYS",
        (0, 2): "SYS",
        (1, 0): "SYS",
        (1, 2): "PHB",
        (2, 0): "SYS",
        (2, 1): "PHB",
    }
    assert data["pci_devices"][0]["vendor"].startswith("0x")


# ------------------------------------------------------------------------------ errors


def test_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.xml"
    with pytest.raises(ConfigError, match=r"nope\.xml does not exist"):
        build_from_hwloc_xml(missing)


def test_a_directory_is_not_readable_xml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read hwloc XML file"):
        build_from_hwloc_xml(tmp_path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not well-formed XML"),
        ("<topology><object type='Machine'>", "not well-formed XML"),
        ("<?xml version='1.0'?><lstopo/>", "root element is <lstopo>"),
        ("<topology version='2.0'/>", "no <object> under <topology>"),
        ("<topology><object os_index='0'/></topology>", "has no type"),
        (
            "<topology><object type='Machine' cpuset='0xzz'/></topology>",
            "malformed cpuset='0xzz'",
        ),
        (
            "<topology><object type='Machine'><object type='NUMANode' os_index='x'/>"
            "</object></topology>",
            "non-integer os_index",
        ),
        (
            "<topology><object type='Machine'><object type='Package' "
            "os_index='12345678901234567890123'/></object></topology>",
            "Package os_index 12345678901234567890123 is not a whole number from 0 to "
            "2,147,483,647",
        ),
        (
            "<topology><object type='Machine'><object type='Socket' os_index='-2'/>"
            "</object></topology>",
            "Socket os_index -2 is not a whole number",
        ),
        (
            "<topology><object type='Machine'><object type='Core' os_index='4294967295'/>"
            "</object></topology>",
            "Core os_index 4294967295 is not a whole number",
        ),
        (
            "<topology><object type='Machine'><object type='PU' os_index='65536'/>"
            "</object></topology>",
            "PU os_index 65536 is not a whole number from 0 to 65,535",
        ),
        (
            "<topology><object type='Machine'><object type='NUMANode' os_index='70000'/>"
            "</object></topology>",
            "NUMANode os_index 70000 is not a whole number from 0 to 65,535",
        ),
        (
            "<topology><object type='Machine' cpuset='0x1'><object type='PCIDev' "
            "pci_busid='0000:01:00.0' pci_type='garbage'/></object></topology>",
            "PCI device 0000:01:00.0 has a malformed pci_type",
        ),
        (
            "<topology><object type='Machine' cpuset='0x1'/>"
            "<distances2 type='NUMANode' nbobjs='2' kind='5' indexing='os'>"
            "<indexes length='4'>0 1</indexes><u64values length='5'>10 20 20</u64values>"
            "</distances2></topology>",
            "2 indexes and 3 values for nbobjs=2",
        ),
    ],
)
def test_malformed_documents_raise_config_error_naming_the_file(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = _write(tmp_path, text, "broken.xml")
    with pytest.raises(ConfigError) as raised:
        build_from_hwloc_xml(path)
    assert "broken.xml" in str(raised.value)
    assert problem in str(raised.value)
