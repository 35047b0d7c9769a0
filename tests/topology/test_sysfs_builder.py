"""The sysfs builder on particular real snapshots and on small trees written here.

Real machines come from hwloc's corpus (``snapshot`` fixture, see ``conftest.py``); corner
cases no snapshot shows (missing or garbled files, PCI fallbacks) are written under
``tmp_path`` as the kernel would lay them out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from toposcope.errors import SourceError
from toposcope.topology.model import Topology
from toposcope.topology.sysfs import build_from_sysfs

Snapshot = Callable[[str], Path]


def _build(root: Path) -> Topology:
    return build_from_sysfs(root / "sys", root / "proc")


# ------------------------------------------------------------------------ real snapshots


def test_offline_cpus_and_offline_node(snapshot: Snapshot) -> None:
    """CPUs 0-3 and 21-23 are offline and node 0 is offline (only node 1 is listed online)."""
    topo = _build(snapshot("offline-cpu0-node0"))
    assert [n.id for n in topo.numa_nodes] == [1]
    offline = [c.id for c in topo.cpus if not c.online]
    assert offline == [0, 1, 2, 3, 21, 22, 23]
    assert topo.online_cpus() == tuple(range(4, 21))
    listed = {c for n in topo.numa_nodes for c in n.cpus} | {
        c for p in topo.packages for c in p.cpus
    }
    assert not listed & set(offline)
    assert topo.numa_nodes[0].distances == {1: 10}


def test_memory_only_nodes(snapshot: Snapshot) -> None:
    """HBM and NVM nodes (a QEMU machine of hwloc's corpus) have memory and no CPU."""
    topo = _build(snapshot("fakeheteromemtiers"))
    memory_only = [n for n in topo.numa_nodes if n.cpu_less]
    assert [n.id for n in memory_only] == [4, 6, 8, 9]
    assert all(n.memory_bytes > 0 and n.package is None for n in memory_only)
    assert topo.to_dict()["numa_nodes"][3]["cpus"] == []


def test_cpu_less_seventeenth_node(snapshot: Snapshot) -> None:
    topo = _build(snapshot("128ia64-17n4s2c"))
    node = topo.numa_node(16)
    assert node is not None and node.cpu_less and node.memory_bytes > 0
    assert node.distances[0] == 14
    assert len(topo.numa_nodes) == 17


def test_sparse_node_ids_and_no_package_ids(snapshot: Snapshot) -> None:
    """POWER7 LPAR: node ids 0,1,4,5,8,9,12,13; physical_package_id is -1 everywhere."""
    topo = _build(snapshot("256ppc-8n8s4t"))
    ids = [n.id for n in topo.numa_nodes]
    assert ids == [0, 1, 4, 5, 8, 9, 12, 13]
    assert all(set(n.distances) == set(ids) for n in topo.numa_nodes)
    assert topo.numa_node(4) is not None and topo.numa_node(2) is None
    assert topo.packages == ()
    assert all(c.package is None for c in topo.cpus)
    assert [len(n.cpus) for n in topo.numa_nodes] == [32] * 8
    assert topo.to_dict()["numa_nodes"][2]["distances"] == [40, 40, 10, 20, 40, 40, 40, 40]


def test_overlapping_node_cpus_keep_the_first_node(
    snapshot: Snapshot, caplog: pytest.LogCaptureFixture
) -> None:
    """Old firmware listing every CPU under all 8 nodes: like hwloc, keep node 0 only."""
    with caplog.at_level(logging.WARNING, logger="toposcope.topology.sysfs"):
        topo = _build(snapshot("8em64t-2s2ca2c-buggynuma"))
    assert [n.id for n in topo.numa_nodes] == [0]
    assert topo.numa_nodes[0].cpus == tuple(range(8))
    assert topo.numa_nodes[0].distances == {0: 10}
    assert "NUMA node 7 lists CPUs" in caplog.text


def test_no_numa_directory_means_one_node_with_proc_meminfo(snapshot: Snapshot) -> None:
    topo = _build(snapshot("2arm-2c"))
    (node,) = topo.numa_nodes
    assert node.id == 0 and node.cpus == (0, 1)
    assert node.memory_bytes == 280840 * 1024  # MemTotal of proc/meminfo
    assert node.package == 3


def test_node_memory_includes_hugepages_as_hwloc_reports_it(snapshot: Snapshot) -> None:
    """Node 0 reserves 65 hugepages; hwloc's XML for this snapshot still says MemTotal."""
    topo = _build(snapshot("32amd64-4s2n4c-cgroup2"))
    node = topo.numa_node(0)
    assert node is not None
    assert node.memory_bytes == 16775084 * 1024 == 17177686016  # local_memory in the XML


def test_trailing_nul_bytes_are_tolerated(snapshot: Snapshot) -> None:
    """This snapshot's ``node/online`` reads ``0-7\\n\\0``."""
    topo = _build(snapshot("64amd64-4s2n4ca2co"))
    assert [n.id for n in topo.numa_nodes] == list(range(8))


# ------------------------------------------------------------------------ written trees


def _write(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="ascii")
    return root


def _machine(root: Path, **overrides: str | None) -> Path:
    """Two nodes of two CPUs each; ``overrides`` replace (or, with None, drop) files."""
    files: dict[str, str | None] = {
        "sys/devices/system/cpu/online": "0-3\n",
        "sys/devices/system/node/online": "0-1\n",
        "proc/meminfo": "MemTotal:       16384 kB\n",
    }
    for cpu in range(4):
        base = f"sys/devices/system/cpu/cpu{cpu}/topology"
        files[f"{base}/physical_package_id"] = f"{cpu // 2}\n"
        files[f"{base}/core_id"] = f"{cpu % 2}\n"
    for node in range(2):
        base = f"sys/devices/system/node/node{node}"
        files[f"{base}/cpulist"] = f"{2 * node}-{2 * node + 1}\n"
        files[f"{base}/meminfo"] = (
            f"Node {node} MemTotal:        8192 kB\nNode {node} MemFree:    4096 kB\n"
        )
        files[f"{base}/distance"] = "10 21\n" if node == 0 else "21 10\n"
    for key, value in overrides.items():
        files[key.replace("__", "/")] = value
    return _write(root, {k: v for k, v in files.items() if v is not None})


def _pci(root: Path, bus_id: str, **attrs: str) -> None:
    base = f"sys/bus/pci/devices/{bus_id}"
    _write(root, {f"{base}/{name}": f"{value}\n" for name, value in attrs.items()})


def test_small_tree(tmp_path: Path) -> None:
    topo = _build(_machine(tmp_path))
    assert [(n.id, n.cpus, n.package, n.memory_bytes) for n in topo.numa_nodes] == [
        (0, (0, 1), 0, 8192 * 1024),
        (1, (2, 3), 1, 8192 * 1024),
    ]
    assert topo.numa_nodes[1].distances == {0: 21, 1: 10}
    assert [(p.id, p.cpus) for p in topo.packages] == [(0, (0, 1)), (1, (2, 3))]
    assert topo.source == f"sysfs:{tmp_path / 'sys'}"


def test_missing_distance_files(tmp_path: Path) -> None:
    root = _machine(
        tmp_path,
        sys__devices__system__node__node0__distance=None,
        sys__devices__system__node__node1__distance=None,
    )
    topo = _build(root)
    assert all(n.distances == {} for n in topo.numa_nodes)
    assert [n["distances"] for n in topo.to_dict()["numa_nodes"]] == [[], []]


def test_distance_row_of_the_wrong_length_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _machine(tmp_path, sys__devices__system__node__node1__distance="21 10 30\n")
    topo = _build(root)
    assert topo.numa_nodes[0].distances == {0: 10, 1: 21}
    assert topo.numa_nodes[1].distances == {}
    assert "has 3 entries for 2 nodes" in caplog.text


def test_cpumap_when_there_is_no_cpulist(tmp_path: Path) -> None:
    root = _machine(
        tmp_path,
        sys__devices__system__node__node1__cpulist=None,
        sys__devices__system__node__node1__cpumap="00000000,0000000c\n",
    )
    assert _build(root).numa_nodes[1].cpus == (2, 3)


@pytest.mark.parametrize(
    ("path", "garbage"),
    [
        ("sys/devices/system/node/node1/cpulist", "two-three\n"),
        ("sys/devices/system/node/node1/cpumap", "not hex\n"),
        ("sys/devices/system/cpu/online", "0-\n"),
        ("sys/devices/system/node/online", "zero\n"),
    ],
)
def test_garbled_cpu_sets_raise_source_error_naming_the_file(
    tmp_path: Path, path: str, garbage: str
) -> None:
    overrides: dict[str, str | None] = {path.replace("/", "__"): garbage}
    if path.endswith("cpumap"):
        overrides["sys__devices__system__node__node1__cpulist"] = None
    root = _machine(tmp_path, **overrides)
    with pytest.raises(SourceError) as raised:
        _build(root)
    assert str(tmp_path / path) in str(raised.value)


def test_garbled_meminfo_gives_zero_memory_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _machine(tmp_path, sys__devices__system__node__node1__meminfo="Node 1 MemTotal: lots\n")
    topo = _build(root)
    assert [n.memory_bytes for n in topo.numa_nodes] == [8192 * 1024, 0]
    assert "no readable MemTotal" in caplog.text


def test_node_without_cpu_files_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _machine(tmp_path, sys__devices__system__node__node1__cpulist=None)
    topo = _build(root)
    assert [n.id for n in topo.numa_nodes] == [0]
    assert topo.numa_nodes[0].distances == {0: 10}
    assert "NUMA node 1 has neither cpulist nor cpumap" in caplog.text


def test_package_id_minus_one_means_no_package(tmp_path: Path) -> None:
    overrides = {
        f"sys__devices__system__cpu__cpu{c}__topology__physical_package_id": "-1\n"
        for c in range(4)
    }
    topo = _build(_machine(tmp_path, **overrides))
    assert topo.packages == ()
    assert [n.package for n in topo.numa_nodes] == [None, None]


TWENTY_THREE_DIGITS = "12345678901234567890123"


@pytest.mark.parametrize(
    ("path", "garbage"),
    [
        ("sys/devices/system/cpu/cpu1/topology/physical_package_id", TWENTY_THREE_DIGITS),
        ("sys/devices/system/cpu/cpu1/topology/physical_package_id", "2147483648"),
        ("sys/devices/system/cpu/cpu1/topology/physical_package_id", "-2"),
        ("sys/devices/system/cpu/cpu1/topology/physical_package_id", "one"),
        ("sys/devices/system/cpu/cpu2/topology/core_id", TWENTY_THREE_DIGITS),
    ],
)
def test_package_and_core_ids_beyond_the_kernels_int_raise_naming_the_file(
    tmp_path: Path, path: str, garbage: str
) -> None:
    root = _machine(tmp_path, **{path.replace("/", "__"): f"{garbage}\n"})
    with pytest.raises(SourceError) as raised:
        _build(root)
    assert str(tmp_path / path) in str(raised.value)
    assert "2,147,483,647" in str(raised.value)


def test_the_largest_package_id_the_kernel_writes_is_accepted(tmp_path: Path) -> None:
    root = _machine(
        tmp_path, sys__devices__system__cpu__cpu3__topology__physical_package_id="2147483647\n"
    )
    assert [p.id for p in _build(root).packages] == [0, 1, 2147483647]


@pytest.mark.parametrize(
    "directory",
    [
        "sys/devices/system/cpu/cpu65536",
        f"sys/devices/system/cpu/cpu{TWENTY_THREE_DIGITS}",
        "sys/devices/system/node/node65536",
    ],
)
def test_cpu_and_node_directories_numbered_beyond_the_cpu_limit_raise_naming_them(
    tmp_path: Path, directory: str
) -> None:
    root = _machine(tmp_path)
    leaf = "topology/physical_package_id" if "/cpu/" in directory else "cpulist"
    _write(root, {f"{directory}/{leaf}": "0\n"})
    with pytest.raises(SourceError) as raised:
        _build(root)
    assert str(tmp_path / directory) in str(raised.value)
    assert "65,535" in str(raised.value)


def test_gpu_memory_node_is_kept_as_memory_only(tmp_path: Path) -> None:
    """POWER9 + V100: GPU memory shows as node 255 without CPUs.

    hwloc hides such nodes unless ``HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1``; we keep them,
    because the kernel allocates from them and the exporter reports them.
    """
    root = _machine(
        tmp_path,
        sys__devices__system__node__online="0-1,255\n",
        sys__devices__system__node__node0__distance="10 40 80\n",
        sys__devices__system__node__node1__distance="40 10 80\n",
        sys__devices__system__node__node255__cpulist="\n",
        sys__devices__system__node__node255__meminfo="Node 255 MemTotal: 16515072 kB\n",
        sys__devices__system__node__node255__distance="80 80 10\n",
        **{"proc/driver/nvidia/gpus/0004:04:00.0/numa_status": "Node: 255\n"},
    )
    _pci(root, "0004:04:00.0", vendor="0x10de", device="0x1db1", **{"class": "0x030200"})
    _write(root, {"sys/bus/pci/devices/0004:04:00.0/numa_node": "0\n"})
    topo = _build(root)
    node = topo.numa_node(255)
    assert node is not None and node.cpu_less and node.memory_bytes == 16515072 * 1024
    assert node.distances == {0: 80, 1: 80, 255: 10}
    assert topo.gpus[0].numa_node == 0


def test_pci_locality_fallbacks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _machine(tmp_path, sys__devices__system__cpu__online="0-2\n")
    gpu = {"vendor": "0x10de", "device": "0x20b0", "class": "0x030200"}
    # firmware said nothing (-1): the local CPUs fall inside node 1
    _pci(root, "0000:81:00.0", numa_node="-1", local_cpulist="2-3", **gpu)
    # local CPUs span both nodes: no single node
    _pci(root, "0000:01:00.0", numa_node="-1", local_cpulist="0-3", **gpu)
    # a node the kernel does not list: fall back to the (mask) local CPUs
    _pci(root, "0000:02:00.0", numa_node="7", local_cpus="00000000,00000003", **gpu)
    # AMD GPU with firmware's node; garbled local CPUs are dropped with a warning
    _pci(
        root,
        "0000:c1:00.0",
        vendor="0x1002",
        device="0x740f",
        numa_node="1",
        local_cpulist="garbage",
        **{"class": "0x038000"},
    )
    # a NIC is a PCI device but not a GPU; a device without class is listed with class 0,
    # as hwloc lists it; an entry that is no PCI bus id is skipped
    _pci(
        root,
        "0000:03:00.0",
        vendor="0x15b3",
        device="0x101b",
        numa_node="0",
        **{"class": "0x020000"},
    )
    _pci(root, "0000:04:00.0", vendor="0x8086", device="0x1234", numa_node="0")
    _pci(root, "not-a-device", vendor="0x8086", device="0x1234", numa_node="0")
    topo = _build(root)
    devices = {d.bus_id: d for d in topo.pci_devices}
    assert sorted(devices) == [
        "0000:01:00.0",
        "0000:02:00.0",
        "0000:03:00.0",
        "0000:04:00.0",
        "0000:81:00.0",
        "0000:c1:00.0",
    ]
    classless = devices["0000:04:00.0"]
    assert (classless.vendor, classless.class_id, classless.numa_node) == (0x8086, 0, 0)
    assert devices["0000:81:00.0"].numa_node == 1
    assert devices["0000:81:00.0"].local_cpus == (2,)  # CPU 3 is offline
    assert devices["0000:01:00.0"].numa_node is None
    assert devices["0000:02:00.0"].numa_node == 0
    assert devices["0000:c1:00.0"].numa_node == 1 and devices["0000:c1:00.0"].local_cpus == ()
    assert "malformed" in caplog.text
    # NVIDIA first, then by bus id, as nvidia-smi numbers them; the AMD board comes last
    assert [g.pci_bus_id for g in topo.gpus] == [
        "0000:01:00.0",
        "0000:02:00.0",
        "0000:81:00.0",
        "0000:c1:00.0",
    ]
    assert [g.index for g in topo.gpus] == [0, 1, 2, 3]


def test_root_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        build_from_sysfs(tmp_path / "missing" / "sys")


def test_root_without_cpus(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    with pytest.raises(SourceError, match="no CPU found"):
        build_from_sysfs(tmp_path / "sys")
