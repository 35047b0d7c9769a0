"""NICs in the topology model: sysfs, hwloc XML and ``nvidia-smi topo -m``, and GPU-to-NIC labels.

References: hwloc's own XML output for two of its sysfs snapshots that hold NICs (the
``.xml`` beside each tarball, written by ``lstopo --whole-io`` on that snapshot), hwloc XML
files whose PCIe trees give GPU-to-NIC labels worked out by hand below, and real
``nvidia-smi topo -m`` texts quoted in public issues (``tests/fixtures/nvidia-smi``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, HWLOC_LINUX, HWLOC_XML
from toposcope.cli import main
from toposcope.errors import ConfigError
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import Nic, NicKind, NicPort, Topology
from toposcope.topology.nics import ib_port_state, ib_state_pair
from toposcope.topology.nvidia_smi import build_from_nvidia_smi_topo
from toposcope.topology.sysfs import build_from_sysfs

Snapshot = Callable[[str], Path]
#: a Xeon Phi host: an mlx4 InfiniBand HCA (ib0) on package 1, two Ethernet functions
DIMMS = "32em64t-2n8c+dax+nvme+mic+dimms"
#: four packages, a QLogic InfiniBand HCA (qib0) and four Ethernet functions
FAKE_LOCALITIES = "fakepcilocalities"
NORMALIO = HWLOC_XML / "32em64t-2n8c2t-pci-normalio.xml"
SMI = FIXTURES / "nvidia-smi"


def _sysfs(root: Path) -> Topology:
    return build_from_sysfs(root / "sys", root / "proc")


def _by_name(topo: Topology) -> dict[str, Nic]:
    return {nic.name: nic for nic in topo.nics}


def _where(nic: Nic) -> tuple[str | None, NicKind | None, tuple[int, ...], tuple[str, ...]]:
    return nic.pci_bus_id, nic.kind, nic.numa_nodes, nic.interfaces


@pytest.mark.parametrize("name", [DIMMS, FAKE_LOCALITIES])
def test_sysfs_nics_agree_with_hwloc(snapshot: Snapshot, name: str) -> None:
    ours = _by_name(_sysfs(snapshot(name)))
    hwloc = _by_name(build_from_hwloc_xml(HWLOC_LINUX / f"{name}.xml"))
    assert ours and set(ours) == set(hwloc)
    assert {n: _where(nic) for n, nic in ours.items()} == {
        n: _where(nic) for n, nic in hwloc.items()
    }
    if name == DIMMS:  # fakepcilocalities.test narrows localities with HWLOC_PCI_LOCALITY
        assert {n: nic.cpus for n, nic in ours.items()} == {n: nic.cpus for n, nic in hwloc.items()}


def test_sysfs_ports_and_kinds(snapshot: Snapshot) -> None:
    nics = _by_name(_sysfs(snapshot(DIMMS)))
    hca = nics["mlx4_0"]
    assert (hca.kind, hca.pci_bus_id, hca.interfaces) == (
        NicKind.INFINIBAND,
        "0000:82:00.0",
        ("ib0",),
    )
    assert hca.ports == (NicPort(1, "active", 56.0, "InfiniBand"),)
    assert hca.numa_nodes == (1,) and hca.cpus == tuple(range(8, 16))
    assert "ib0" not in nics  # the HCA's interface, not a NIC of its own
    assert nics["eth0"].ports == (NicPort(1, "up", 1.0, "Ethernet"),)
    assert nics["eth1"].ports == (NicPort(1, "down", None, "Ethernet"),)
    assert "scif0" not in nics and "lo" not in nics and "br0" not in nics
    qib = _by_name(_sysfs(snapshot(FAKE_LOCALITIES)))["qib0"]
    assert qib.ports == (NicPort(1, "active", 40.0, "InfiniBand"),)


def _fake_host(root: Path, link_layer: str, numa_node: str, local_cpus: str) -> Path:
    """A two-node host with one RDMA function 0000:17:00.0 (port 1) and its interface."""
    sys = root / "sys"
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        (sys / "devices/system/node" / f"node{node}").mkdir(parents=True)
        (sys / "devices/system/node" / f"node{node}" / "cpulist").write_text(cpus)
    (sys / "devices/system/node/online").write_text("0-1\n")
    for cpu in range(8):
        topology = sys / "devices/system/cpu" / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{cpu // 4}\n")
    (sys / "devices/system/cpu/online").write_text("0-7\n")
    function = sys / "devices/pci0000:16/0000:16:02.0/0000:17:00.0"
    function.mkdir(parents=True)
    for name, value in (
        ("vendor", "0x15b3"),
        ("device", "0x101d"),
        ("class", "0x020700"),
        ("numa_node", numa_node),
        ("local_cpulist", local_cpus),
    ):
        (function / name).write_text(value + "\n")
    port = function / "infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("200 Gb/sec (2X NDR)\n")
    (port / "link_layer").write_text(link_layer + "\n")
    (function / "infiniband/mlx5_0/device").symlink_to("../../../0000:17:00.0")
    net = function / "net/ens1np0"
    net.mkdir(parents=True)
    (net / "device").symlink_to("../../../0000:17:00.0")
    for cls, name, target in (
        ("infiniband", "mlx5_0", "infiniband/mlx5_0"),
        ("net", "ens1np0", "net/ens1np0"),
    ):
        (sys / "class" / cls).mkdir(parents=True, exist_ok=True)
        (sys / "class" / cls / name).symlink_to(
            f"../../devices/pci0000:16/0000:16:02.0/0000:17:00.0/{target}"
        )
    (sys / "bus/pci/devices").mkdir(parents=True)
    (sys / "bus/pci/devices/0000:17:00.0").symlink_to(
        "../../../devices/pci0000:16/0000:16:02.0/0000:17:00.0"
    )
    return root


def test_roce_and_locality_from_local_cpus_not_numa_node(tmp_path: Path) -> None:
    # firmware says node 0, but the function's CPUs are node 1's: hwloc places it in node 1
    topo = _sysfs(_fake_host(tmp_path / "roce", "Ethernet", "0", "4-7"))
    (nic,) = topo.nics
    assert (nic.name, nic.kind, nic.interfaces) == ("mlx5_0", NicKind.ROCE, ("ens1np0",))
    assert (nic.numa_nodes, nic.cpus) == ((1,), (4, 5, 6, 7))
    assert nic.ports == (NicPort(1, "active", 200.0, "Ethernet"),)
    # no firmware node and CPUs spanning both nodes: both nodes, as hwloc's machine-level parent
    spanning = _sysfs(_fake_host(tmp_path / "ib", "InfiniBand", "-1", "0-7")).nics[0]
    assert (spanning.kind, spanning.numa_nodes) == (NicKind.INFINIBAND, (0, 1))


def test_hwloc_gpu_nic_labels_from_the_pcie_tree() -> None:
    # Package 1's host bridge 0000:[80-84] holds root ports 80:01.0 (eth0, eth1), 80:02.0
    # (GPU 1, 83:00.0) and 80:03.0 (GPU 2, 84:00.0, and the ConnectX-4 04:00.0 with
    # mlx5_0); GPU 0 (03:00.0) hangs off package 0. GPU 2 and mlx5_0 share one bridge: PIX;
    # GPU 1 meets them at the host bridge: PHB; GPU 0 crosses packages: SYS.
    topo = build_from_hwloc_xml(NORMALIO)
    links = {(link.gpu, link.nic): link.link for link in topo.gpu_nic_links}
    assert links == {
        (0, "eth0"): "SYS",
        (0, "eth1"): "SYS",
        (0, "mlx5_0"): "SYS",
        (1, "eth0"): "PHB",
        (1, "eth1"): "PHB",
        (1, "mlx5_0"): "PHB",
        (2, "eth0"): "PHB",
        (2, "eth1"): "PHB",
        (2, "mlx5_0"): "PIX",
    }
    hca = _by_name(topo)["mlx5_0"]
    assert (hca.kind, hca.numa_nodes, hca.interfaces) == (NicKind.INFINIBAND, (1,), ("ib0",))
    assert hca.ports == (NicPort(1, "active"),)


def test_hwloc_osdev_types_of_each_format_version() -> None:
    # the same machine written by hwloc 2 (Network = 2) and 3.0 (Network = bit 16); its
    # CXL memory devices are osdev_type 2 and 3 in the 3.0 file, which are not NICs there
    v2 = build_from_hwloc_xml(HWLOC_XML / "cxlmem+dax.v2.xml")
    v3 = build_from_hwloc_xml(HWLOC_XML / "cxlmem+dax.v3.xml")
    assert [nic.name for nic in v3.nics] == ["enp0s2"]
    assert v2.nics == v3.nics
    # 3.0's 48 (Network + OpenFabrics) is an RDMA device; Cisco usNIC speaks Ethernet
    vfs = _by_name(build_from_hwloc_xml(HWLOC_XML / "16intel64-manyVFs.xml"))
    assert vfs["usnic_0"].kind == NicKind.ROCE and vfs["usnic_0"].interfaces == ("eth4",)
    assert vfs["eth0"].kind == NicKind.ETHERNET


def test_nvidia_smi_nic_legend_names_the_columns() -> None:
    topo = build_from_nvidia_smi_topo((SMI / "real-8gpu-pcie-4numa-2nic.txt").read_text())
    assert [nic.name for nic in topo.nics] == ["mlx5_0", "mlx5_1"]
    assert len(topo.gpu_nic_links) == 16
    assert {link.link for link in topo.gpu_nic_links} == {"SYS"}
    assert all(nic.numa_nodes == () and nic.pci_bus_id is None for nic in topo.nics)


def test_nvidia_smi_nic_columns_named_by_device_on_old_drivers() -> None:
    # read cell by cell off the quoted text (nccl issue 243), columns mlx5_1 then mlx5_0
    topo = build_from_nvidia_smi_topo((SMI / "real-6gpu-2nic-2019.txt").read_text())
    links = {(link.gpu, link.nic): link.link for link in topo.gpu_nic_links}
    assert [nic.name for nic in topo.nics] == ["mlx5_1", "mlx5_0"]
    assert [links[(g, "mlx5_0")] for g in range(6)] == ["NODE", "NODE", "PIX", "SYS", "SYS", "SYS"]
    assert [links[(g, "mlx5_1")] for g in range(6)] == ["SYS", "SYS", "SYS", "NODE", "NODE", "PIX"]


def test_nvidia_smi_nic_node_from_the_gpus_it_reaches_without_crossing_nodes() -> None:
    text = (
        "\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tSYS\tPXB\tSYS\t0-7\t0\n"
        "GPU1\tSYS\t X \tSYS\tNODE\t8-15\t1\n"
        "NIC0\tPXB\tSYS\t X \tSYS\n"
        "NIC1\tSYS\tNODE\tSYS\t X \n"
        "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"
    )
    nics = _by_name(build_from_nvidia_smi_topo(text))
    assert (nics["mlx5_0"].numa_nodes, nics["mlx5_1"].numa_nodes) == ((0,), (1,))
    twice = text.replace("NIC1: mlx5_1", "NIC1: mlx5_0")
    with pytest.raises(ConfigError, match="line 10: NIC name 'mlx5_0' is used twice"):
        build_from_nvidia_smi_topo(twice)


def test_json_lists_nics_and_gpu_nic_links(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["topology", "--hwloc-xml", str(NORMALIO), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    hca = next(nic for nic in data["nics"] if nic["name"] == "mlx5_0")
    assert hca["pci_bus_id"] == "0000:04:00.0" and hca["kind"] == "infiniband"
    assert hca["numa_nodes"] == [1] and hca["ports"][0]["state"] == "active"
    assert {"gpu": 2, "nic": "mlx5_0", "link": "PIX"} in data["gpu_nic_links"]
    smi = (SMI / "real-8gpu-pcie-4numa-2nic.txt").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(smi))
    assert main(["topology", "--nvidia-smi-topo", "-"]) == 0
    text = capsys.readouterr().out
    assert "GPU-NIC links:" in text and "NIC mlx5_1:" in text


@pytest.mark.parametrize(
    ("text", "pair", "state"),
    [
        ("4: ACTIVE\n", (4, "ACTIVE"), "active"),
        ("5: LinkUp", (5, "LinkUp"), "linkup"),
        ("1: DOWN   ", (1, "DOWN"), "down"),
        ("4", None, "active"),  # hwloc keeps the number only
        ("9", None, None),
        ("ACTIVE", None, None),
        ("4: ACTIVE{x=1}", None, None),  # not a label value
        ("4: " + "A" * 40, None, None),
    ],
)
def test_one_reading_of_a_port_state_file(
    text: str, pair: tuple[int, str] | None, state: str | None
) -> None:
    assert ib_state_pair(text) == pair
    assert ib_port_state(text) == state
