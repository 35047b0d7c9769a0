"""Per-workload NICs: which RDMA NICs a workload's GPUs are nearest to, and which it uses by
NCCL_IB_HCA or its cgroup's RDMA accounting, near or far.

The host's topology is hwloc's ``32em64t-2n8c2t-pci-normalio`` XML (BSD-3-Clause, see
tests/fixtures/hwloc): three GPUs and ``mlx5_0`` beside GPU 2 (PIX), GPU 1 one host bridge
away (PHB), GPU 0 on the other socket (SYS). Its first Ethernet function is taken as a second
RDMA NIC (RoCE, named ``mlx5_1``) so that a NIC other than the nearest exists. The
processes and cgroups are the ``v2host`` fixture, copied so that the environment and
``rdma.current`` can be written.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from tests.exporters.text_registry import parsed
from tests.helpers import HWLOC_XML
from tests.workloads.helpers import (
    V2HOST,
    WL_A,
    FakeGpuProcesses,
    _Frozen,
    copy_host,
    workload_value,
)
from toposcope.config import HostPaths, WorkloadSettings
from toposcope.exporters.collectors.topology import gpu_nic_link_family
from toposcope.exporters.collectors.workloads import workload_families
from toposcope.exporters.workload_snapshot import WorkloadSnapshotter
from toposcope.host.nic_use import chosen, nccl_ib_hca, parse_nccl_ib_hca, parse_rdma_current
from toposcope.host.nvml.records import GpuProcess
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import NicKind, Topology
from toposcope.topology.nic_locality import NicLocality

NORMALIO = HWLOC_XML / "32em64t-2n8c2t-pci-normalio.xml"
CGROUP_A = (
    "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod1a2b3c4d_5e6f_4a5b_8c7d_0123456789ab.slice/"
    "cri-containerd-a1b2c3d4e5f60000000000000000000000000000000000000000000000000000.scope"
)
POD_A_WHO = {"namespace": "", "pod": "", "container": ""}


def topology() -> Topology:
    """The hwloc fixture with ``eth0`` taken as a second RDMA NIC, ``mlx5_1`` (RoCE)."""
    base = build_from_hwloc_xml(NORMALIO)
    nics = tuple(
        replace(nic, name="mlx5_1", kind=NicKind.ROCE) if nic.name == "eth0" else nic
        for nic in base.nics
    )
    links = tuple(
        replace(link, nic="mlx5_1") if link.nic == "eth0" else link for link in base.gpu_nic_links
    )
    return replace(base, nics=nics, gpu_nic_links=links)


def test_each_gpus_nearest_rdma_nic_and_the_far_ones() -> None:
    locality = NicLocality.of(build_from_hwloc_xml(NORMALIO))
    assert locality.nics == ("mlx5_0",)  # the Ethernet functions are not RDMA NICs
    assert locality.nearest == {
        0: ("SYS", ("mlx5_0",)),
        1: ("PHB", ("mlx5_0",)),
        2: ("PIX", ("mlx5_0",)),
    }
    assert locality.far_gpus({0, 1, 2}) == 1
    two = NicLocality.of(topology())
    assert two.nearest[2] == ("PIX", ("mlx5_0",))
    assert two.nearest[0] == ("SYS", ("mlx5_0", "mlx5_1"))  # a tie: both on the other socket
    assert not two.is_nearest(2, "mlx5_1") and two.best_link({2}, "mlx5_1") == "PHB"


def test_nccl_ib_hca_is_read_as_nccl_reads_it_and_anything_else_is_refused() -> None:
    nics = ("mlx5_0", "mlx5_1", "mlx5_10", "ib0")
    assert parse_nccl_ib_hca("mlx5", nics) == frozenset({"mlx5_0", "mlx5_1", "mlx5_10"})
    assert parse_nccl_ib_hca("=mlx5_1:1", nics) == frozenset({"mlx5_1"})
    assert parse_nccl_ib_hca("mlx5_1", nics) == frozenset({"mlx5_1", "mlx5_10"})  # a prefix
    assert parse_nccl_ib_hca("^=mlx5_0,mlx5_1", nics) == frozenset({"mlx5_10", "ib0"})
    for bad in ("", "mlx5_0;reboot", "mlx5_0:port", "../mlx5_0", "a," * 3000):
        assert parse_nccl_ib_hca(bad, nics) is None, bad
    assert nccl_ib_hca(b"PATH=/bin\0NCCL_IB_HCA==mlx5_0\0X=1\0") == "=mlx5_0"
    assert nccl_ib_hca(b"NCCL_IB_HCAX=1\0") is None


def test_rdma_current_lists_the_devices_with_handles_charged() -> None:
    text = "mlx5_0 hca_handle=2 hca_object=2000\nmlx5_1 hca_handle=0 hca_object=0\ngarbage line!\n"
    assert parse_rdma_current(text) == {"mlx5_0"}


def test_the_gpu_nic_link_family_flags_each_gpus_nearest() -> None:
    registry = CollectorRegistry()
    registry.register(_Frozen(parsed([gpu_nic_link_family(topology()).plain()])))
    name = "toposcope_gpu_nic_link_info"
    gpu2 = {"gpu": "2", "pci_bus_id": "0000:84:00.0"}
    near = {**gpu2, "nic": "mlx5_0", "link": "PIX", "nearest": "true"}
    assert registry.get_sample_value(name, near) == 1
    other = {**gpu2, "nic": "mlx5_1", "link": "PHB", "nearest": "false"}
    assert registry.get_sample_value(name, other) == 1
    nics = {s.labels["nic"] for f in registry.collect() for s in f.samples}
    assert nics == {"mlx5_0", "mlx5_1"}  # plain Ethernet (eth1) is left out


def scrape_workloads(root: Path) -> CollectorRegistry:
    """One snapshot of the ``v2host`` copy at ``root``, GPU 2 held by pid 1001."""
    snapshotter = WorkloadSnapshotter(
        WorkloadSettings(),
        HostPaths.under(root),
        topology,
        FakeGpuProcesses([GpuProcess(1001, 2, 1 << 30)]),
    )
    registry = CollectorRegistry()
    registry.register(_Frozen(workload_families(snapshotter.take())))
    return registry


def test_a_rank_using_a_nic_other_than_its_gpus_nearest_is_far(tmp_path: Path) -> None:
    root = copy_host(V2HOST, tmp_path)
    (root / "proc/1001/environ").write_bytes(b"HOME=/root\0NCCL_IB_HCA==mlx5_1:1\0")
    (root / "proc/1010/environ").write_bytes(b"NCCL_IB_HCA=mlx5_0;rm -rf /\0")  # refused
    (root / CGROUP_A / "rdma.current").write_text("mlx5_0 hca_handle=1 hca_object=12\n")
    registry = scrape_workloads(root)
    who = {"workload": WL_A, **POD_A_WHO}
    assert (
        workload_value(
            registry, "toposcope_workload_nic_nearest_gpus", **who, nic="mlx5_0", link="PIX"
        )
        == 1
    )
    assert workload_value(registry, "toposcope_workload_nic_far_gpus", **who) == 0
    used = "toposcope_workload_nic_used_info"
    assert (
        workload_value(
            registry, used, **who, nic="mlx5_1", source="nccl_env", link="PHB", near="false"
        )
        == 1
    )
    # the cgroup stands for the whole workload: GPU 1 (its open /dev/nvidia1) reaches mlx5_0
    # over PHB as near as any NIC, GPU 2 over PIX; the farther tier is reported
    assert (
        workload_value(
            registry, used, **who, nic="mlx5_0", source="rdma_cgroup", link="PHB", near="true"
        )
        == 1
    )
    # the malformed value of pid 1010 selected nothing
    assert (
        workload_value(
            registry, used, **who, nic="mlx5_0", source="nccl_env", link="PIX", near="true"
        )
        is None
    )


def test_no_environment_and_no_accounting_claim_no_use(tmp_path: Path) -> None:
    registry = scrape_workloads(copy_host(V2HOST, tmp_path))
    names = {s.name for family in registry.collect() for s in family.samples}
    assert "toposcope_workload_nic_used_info" not in names
    assert "toposcope_workload_nic_nearest_gpus" in names


def test_a_rank_is_taken_to_use_the_nearest_nic_it_may_use() -> None:
    locality = NicLocality.of(topology())
    both = {"mlx5_0", "mlx5_1"}
    # NCCL picks GPU 2's switch HCA when allowed both; only the other one is far
    assert chosen(locality, frozenset({2}), both) == [("mlx5_0", "PIX", True)]
    assert chosen(locality, frozenset({2}), {"mlx5_1"}) == [("mlx5_1", "PHB", False)]
    # GPU 0 is SYS from both: a tie, and neither is farther than its nearest
    assert chosen(locality, frozenset({0}), both) == [
        ("mlx5_0", "SYS", True),
        ("mlx5_1", "SYS", True),
    ]
    assert chosen(locality, frozenset(), {"mlx5_1"}) == [("mlx5_1", "", True)]


def test_allowing_every_nic_is_not_using_a_far_one(tmp_path: Path) -> None:
    root = copy_host(V2HOST, tmp_path)
    (root / "proc/1001/environ").write_bytes(b"NCCL_IB_HCA=mlx5\0")
    (root / CGROUP_A / "rdma.current").write_text(
        "mlx5_0 hca_handle=1 hca_object=12\nmlx5_1 hca_handle=1 hca_object=12\n"
    )
    registry = scrape_workloads(root)
    # pid 1001's rank (GPU 2) takes its switch's HCA; for the cgroup GPU 1 is as near (PHB)
    # to both, so both count, and neither is far
    used = [
        dict(s.labels)
        for f in registry.collect()
        for s in f.samples
        if s.name == "toposcope_workload_nic_used_info"
    ]
    assert {(u["nic"], u["source"], u["near"]) for u in used} == {
        ("mlx5_0", "nccl_env", "true"),
        ("mlx5_0", "rdma_cgroup", "true"),
        ("mlx5_1", "rdma_cgroup", "true"),
    }


def test_a_container_given_only_a_far_hca_opens_it_and_is_far(tmp_path: Path) -> None:
    """The uverbs device a rank holds open names its HCA (a device plugin gave the container
    one), as ``class/infiniband_verbs/uverbsN/ibdev`` says.
    """
    root = copy_host(V2HOST, tmp_path)
    verbs = root / "sys/class/infiniband_verbs"
    for number, device in enumerate(["mlx5_0", "mlx5_1"]):
        (verbs / f"uverbs{number}").mkdir(parents=True)
        (verbs / f"uverbs{number}" / "ibdev").write_text(device + "\n")
    (root / "proc/1001/fd/17").symlink_to("/dev/infiniband/uverbs1")
    (root / "proc/1001/fd/18").symlink_to("/dev/infiniband/rdma_cm")
    registry = scrape_workloads(root)
    who = {"workload": WL_A, **POD_A_WHO}
    used = "toposcope_workload_nic_used_info"
    far = {"nic": "mlx5_1", "source": "uverbs", "link": "PHB", "near": "false"}
    assert workload_value(registry, used, **who, **far) == 1
    sources = {s.labels["source"] for f in registry.collect() for s in f.samples if s.name == used}
    assert sources == {"uverbs"}
