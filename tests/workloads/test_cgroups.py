"""cgroup sources: mountinfo (v1, v2, hybrid), memory.numa_stat, cpusets, the tree walk,
and the mapping of cgroup paths to workloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workloads.helpers import V1HOST, V2HOST
from toposcope.config import HostPaths
from toposcope.host.cgroups import (
    Cgroups,
    CpuSet,
    layout_from_mounts,
    parse_cgroup_procs,
    parse_mountinfo,
    parse_numa_stat,
)
from toposcope.host.workload_identity import PathMapper, classify_cgroup

HEAD = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
    "24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw\n"
)
V2 = HEAD + (
    "29 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
)
V1 = HEAD + (
    "25 24 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:3 - tmpfs tmpfs ro,mode=755\n"
    "27 25 0:25 / /sys/fs/cgroup/systemd rw,relatime shared:5 - cgroup cgroup "
    "rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd\n"
    "30 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:8 - cgroup cgroup rw,cpu,cpuacct\n"
    "31 25 0:29 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup "
    "rw,cpuset,clone_children\n"
)
HYBRID = V1 + (
    "26 25 0:24 / /sys/fs/cgroup/unified rw,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
    "32 25 0:30 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory\n"
)


def test_mountinfo_v2() -> None:
    (mount,) = parse_mountinfo(V2)
    assert (mount.version, mount.controllers, mount.root, mount.mount_point) == (
        2,
        frozenset(),
        "/",
        "/sys/fs/cgroup",
    )
    layout = layout_from_mounts([mount], HostPaths.under("/host"))
    assert layout.mode == "v2"
    walk = layout.walk_hierarchy()
    assert walk is not None and walk.directory == Path("/host/sys/fs/cgroup")
    assert layout.controller("memory") is walk


def test_mountinfo_v1_controllers_and_named_hierarchy() -> None:
    mounts = parse_mountinfo(V1)
    assert [sorted(m.controllers) for m in mounts] == [
        ["name=systemd"],
        ["cpu", "cpuacct"],
        ["cpuset"],
    ]
    layout = layout_from_mounts(mounts, HostPaths.under("/r"))
    assert layout.mode == "v1"
    walk = layout.walk_hierarchy()  # no memory controller: cpuacct is next in preference
    assert walk is not None and walk.directory == Path("/r/sys/fs/cgroup/cpu,cpuacct")
    cpuset = layout.controller("cpuset")
    assert cpuset is not None and cpuset.directory.name == "cpuset"


def test_mountinfo_hybrid_walks_the_v1_memory_hierarchy() -> None:
    layout = layout_from_mounts(parse_mountinfo(HYBRID), HostPaths.under("/r"))
    assert layout.mode == "hybrid"
    assert layout.unified is not None
    assert layout.unified.directory == Path("/r/sys/fs/cgroup/unified")
    walk = layout.walk_hierarchy()
    assert walk is not None and walk.directory == Path("/r/sys/fs/cgroup/memory")


def test_mountinfo_escapes_and_cgroup_namespace_root() -> None:
    text = (
        "40 30 0:40 /kubepods/pod1 /host\\040root/cgroup rw - cgroup2 cgroup2 rw\n"
        "41 30 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
        "not a mountinfo line - cgroup\n"
    )
    mounts = parse_mountinfo(text)
    assert mounts[0].mount_point == "/host root/cgroup"
    assert mounts[0].root == "/kubepods/pod1"
    layout = layout_from_mounts(mounts, HostPaths.under("/r"))
    # the mount showing the whole tree wins over a bind mount of a subtree
    assert layout.unified is not None and layout.unified.mount.root == "/"
    inner = layout_from_mounts(mounts[:1], HostPaths.under("/r")).unified
    assert inner is not None
    assert inner.dir_of("/kubepods/pod1/abc") == "/r/host root/cgroup/abc"
    assert inner.dir_of("/system.slice") is None
    assert inner.cgroup_of("abc") == "/kubepods/pod1/abc"


def test_numa_stat_v2_sums_anon_and_file_bytes() -> None:
    text = "anon N0=1048576 N1=3145728\nfile N0=0 N1=1048576\nkernel_stack N0=16384 N1=16384\n"
    assert parse_numa_stat(text) == {0: 1048576, 1: 4194304}


def test_numa_stat_v1_pages_prefers_hierarchical_total() -> None:
    text = (
        "total=0 N0=0 N1=0\nfile=0 N0=0 N1=0\nanon=0 N0=0 N1=0\n"
        "hierarchical_total=1000 N0=100 N1=900\nhierarchical_file=0 N0=0 N1=0\n"
    )
    assert parse_numa_stat(text, page_size=4096) == {0: 409600, 1: 3686400}
    old_kernel = "total=300 N0=100 N1=200 Nx=5 N2=bad\nfile=50 N0=50 N1=0\n"
    assert parse_numa_stat(old_kernel, page_size=65536) == {0: 100 * 65536, 1: 200 * 65536}


def test_cgroup_procs_skips_junk() -> None:
    assert parse_cgroup_procs(b"12\n\n13\nx\n") == [12, 13]


def test_walk_v2_fixture_lists_cgroups_with_processes() -> None:
    cgroups = Cgroups(HostPaths.under(V2HOST))
    layout = cgroups.layout()
    walk = layout.walk_hierarchy()
    assert walk is not None
    found = dict(cgroups.procs(walk))
    assert found["/init.scope"] == [1]
    assert found["/system.slice/foo.service"] == [3001]
    assert "/kubepods.slice" not in found  # empty cgroups are not listed
    skipped = dict(cgroups.procs(walk, keep=lambda path: not path.startswith("/kube")))
    assert not any(path.startswith("/kube") for path in skipped)
    assert "/system.slice/foo.service" in skipped


def test_v1_fixture_numa_stat_and_cpuset() -> None:
    cgroups = Cgroups(HostPaths.under(V1HOST), page_size=4096)
    layout = cgroups.layout()
    assert layout.mode == "hybrid"
    docker = "/docker/c0ffee000000" + "2" * 52
    assert cgroups.numa_stat(docker, layout) == {0: 409600, 1: 819200}
    assert cgroups.numa_stat("/system.slice/sshd.service", layout) is None
    assert cgroups.cpuset(docker, layout) == CpuSet((0, 1, 2, 3), (0,))


def test_v2_fixture_cpuset_effective() -> None:
    cgroups = Cgroups(HostPaths.under(V2HOST))
    layout = cgroups.layout()
    walk = layout.walk_hierarchy()
    assert walk is not None
    (path,) = [p for p, _ in cgroups.procs(walk) if "cri-containerd-a1" in p]
    assert cgroups.cpuset(path, layout) == CpuSet((4, 5, 6, 7), (1,))
    assert cgroups.cpuset("/system.slice/foo.service", layout) is None


def test_no_mountinfo_is_an_empty_layout(tmp_path: Path) -> None:
    layout = Cgroups(HostPaths.under(tmp_path)).layout()
    assert layout.mode == "none"
    assert layout.walk_hierarchy() is None


UID = "1a2b3c4d-5e6f-4a5b-8c7d-0123456789ab"
UID_ = UID.replace("-", "_")
CID = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("path", "name", "kind", "cgroup"),
    [
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
            f"cri-containerd-{CID}.scope",
            f"{UID}/{CID[:12]}",
            "pod",
            None,
        ),
        (
            f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope/container",
            f"{UID}/{CID[:12]}",
            "pod",
            f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope",
        ),
        (f"/kubepods/burstable/pod{UID}/{CID}", f"{UID}/{CID[:12]}", "pod", None),
        (f"/kubepods/pod{UID}/{CID}", f"{UID}/{CID[:12]}", "pod", None),
        (
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice",
            UID,
            "pod",
            None,
        ),
        (f"/docker/{CID}", CID[:12], "container", None),
        (f"/system.slice/docker-{CID}.scope", CID[:12], "container", None),
        (f"/machine.slice/libpod-{CID}.scope", CID[:12], "container", None),
        ("/system.slice/docker.service", "docker.service", "systemd_unit", None),
        ("/system.slice/foo.service", "foo.service", "systemd_unit", None),
        (
            "/system.slice/foo.service/worker",
            "foo.service",
            "systemd_unit",
            "/system.slice/foo.service",
        ),
        (
            "/user.slice/user-1000.slice/user@1000.service/app.slice/x.service",
            "/user.slice/user-1000.slice/user@1000.service/app.slice/x.service",
            "systemd_unit",
            None,
        ),
        (
            "/slurm/uid_1000/job_42/step_0/task_0",
            "slurm-job-42",
            "slurm_job",
            "/slurm/uid_1000/job_42",
        ),
        (
            "/slurm_node7/uid_0/job_7/step_extern",
            "slurm-job-7",
            "slurm_job",
            "/slurm_node7/uid_0/job_7",
        ),
        (
            "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
            "slurm-job-42",
            "slurm_job",
            "/system.slice/slurmstepd.scope/job_42",
        ),
        ("/machine.slice/vm1", "/machine.slice/vm1", "cgroup", None),
        ("/", "/", "cgroup", None),
    ],
)
def test_classify_cgroup(path: str, name: str, kind: str, cgroup: str | None) -> None:
    identity = classify_cgroup(path)
    assert identity.name == name
    assert identity.kind == kind
    assert identity.cgroup == (cgroup or path)
    assert (identity.pod, identity.namespace, identity.container) == ("", "", "")


def test_kubernetes_identity_fields() -> None:
    identity = classify_cgroup(
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope"
    )
    assert (identity.pod_uid, identity.container_id, identity.qos_class) == (
        UID,
        CID,
        "Burstable",
    )
    slurm = classify_cgroup("/slurm/uid_1000/job_42/step_0")
    assert slurm.slurm_job_id == "42"


def test_path_mapper_memoises() -> None:
    mapper = PathMapper()
    first = mapper.identify("/system.slice/foo.service")
    assert mapper.identify("/system.slice/foo.service") is first


def test_layout_prefers_the_hosts_mount_table_over_the_containers(tmp_path: Path) -> None:
    # In a DaemonSet with the host's /proc mounted, "self" is the exporter's container: its
    # table shows a v2 mount, while the host (PID 1) runs hybrid cgroups.
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "mountinfo").write_text(HYBRID)
    (tmp_path / "proc" / "self" / "mountinfo").write_text(V2)
    paths = HostPaths.under(tmp_path)
    assert Cgroups(paths).layout().mode == "hybrid"
    (tmp_path / "proc" / "1" / "mountinfo").unlink()
    assert Cgroups(paths).layout().mode == "v2"
