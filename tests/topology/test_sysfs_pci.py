"""PCI functions from sysfs: their place in the PCIe tree, and directories lacking files.

The references are hwloc's own outputs for its sysfs snapshots (``lstopo -v`` text beside
each tarball): the PCI bridges hwloc nests a function under, the host bridge it hangs
from, and the NUMA node of its locality.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import HWLOC_LINUX
from tests.hwloc_expected import HwObj, load_expected, parse_console
from toposcope.topology.model import PciDevice
from toposcope.topology.pcie import pcie_link
from toposcope.topology.sysfs import build_from_sysfs

Snapshot = Callable[[str], Path]
#: NEC vector engines and InfiniBand behind PLX switches on two host bridges of package 0
VE = "32intel64-2p8co2t+8ve"


def _devices(root: Path) -> dict[str, PciDevice]:
    return {d.bus_id: d for d in build_from_sysfs(root / "sys", root / "proc").pci_devices}


def _hwloc_chain(obj: HwObj) -> tuple[tuple[str, ...], HwObj | None]:
    """The bus ids of the PCI bridges above ``obj`` in hwloc's tree, and its host bridge."""
    chain: list[str] = []
    current = obj.parent
    while current is not None and current.type == "Bridge":
        if current.busid is None:
            return tuple(chain), current
        chain.append(current.busid)
        current = current.parent
    return tuple(chain), None


@pytest.mark.parametrize("name", [VE, "2pa-pcidomain32bits", "40intel64-4n10c+pci-conflicts"])
def test_bridges_and_host_bridges_agree_with_hwloc(snapshot: Snapshot, name: str) -> None:
    ours = _devices(snapshot(name))
    root, _ = parse_console((HWLOC_LINUX / f"{name}.console").read_text(encoding="utf-8"))
    shown = [o for o in root.walk() if o.type == "PCIDev" and o.busid is not None]
    assert shown
    host_names: dict[int, set[str | None]] = {}
    for obj in shown:
        chain, host = _hwloc_chain(obj)
        assert obj.busid is not None and host is not None
        assert ours[obj.busid].bridges == chain, obj.busid
        host_names.setdefault(id(host), set()).add(ours[obj.busid].host_bridge)
    # one name per hwloc host bridge, and a different name for each
    assert all(len(names) == 1 and None not in names for names in host_names.values())
    assert len({next(iter(names)) for names in host_names.values()}) == len(host_names)


def test_pcie_links_between_vector_engines(snapshot: Snapshot) -> None:
    devices = _devices(snapshot(VE))
    # two downstream ports (19:08.0, 19:0c.0) of the PLX switch 18:00.0
    assert pcie_link(devices["0000:1b:00.0"], devices["0000:1c:00.0"]).value == "PIX"
    # the host bridges 0000:[17-1e] and 0000:[3a-41] both belong to NUMA node 0
    assert pcie_link(devices["0000:1b:00.0"], devices["0000:3d:00.0"]).value == "NODE"


def test_functions_lacking_id_and_node_files_are_listed_with_hwloc_locality(
    snapshot: Snapshot, tmp_path: Path
) -> None:
    root = tmp_path / "trimmed"
    shutil.copytree(snapshot(VE), root, symlinks=True)
    trimmed = ("0000:1b:00.0", "0000:3e:00.0")
    for bus_id in trimmed:
        for name in ("vendor", "device", "class", "numa_node"):
            (root / "sys" / "bus" / "pci" / "devices" / bus_id / name).unlink()
    full, ours = _devices(snapshot(VE)), _devices(root)
    assert set(ours) == set(full)
    expected = load_expected(HWLOC_LINUX / f"{VE}.console").pci_nodes
    for bus_id in trimmed:
        device = ours[bus_id]
        assert full[bus_id].vendor != 0 and full[bus_id].class_id != 0
        assert (device.vendor, device.device, device.class_id) == (0, 0, 0)
        assert device.local_cpus == full[bus_id].local_cpus
        assert device.numa_node == expected[bus_id] == full[bus_id].numa_node
        assert device.bridges == full[bus_id].bridges
