"""The workloads collector on the fixture hosts: concrete values, selection, GPUs, locality."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.workloads.helpers import (
    POD_A,
    V1HOST,
    V2HOST,
    WL_A,
    WL_B,
    WL_DOCKER,
    WL_SERVICE,
    WL_SLURM,
    WL_SSHD,
    FakeGpuProcesses,
    build,
    copy_host,
    info_labels,
    info_value,
    scrape,
    workload_names,
    workload_value,
)
from toposcope.config import ExporterConfig, HostPaths, WorkloadSettings
from toposcope.errors import NoDataError
from toposcope.exporters.collectors import default_table
from toposcope.exporters.collectors.workloads import ENTRY as workloads_entry
from toposcope.exporters.collectors.workloads import WorkloadsCollector
from toposcope.exporters.context import CollectorContext, HostTopology
from toposcope.host.nvml.records import GpuProcess
from toposcope.host.workload_identity import PathMapper, with_names
from toposcope.identity.workload import WorkloadIdentity
from toposcope.sim.proc_text import stat_line

CPU = "toposcope_workload_cpu_seconds_total"
THREADS = "toposcope_workload_threads"
MEMORY = "toposcope_workload_memory_bytes"
GPU_INFO = "toposcope_workload_gpu_info"
GPU_MEMORY = "toposcope_workload_gpu_memory_used_bytes"
LOCALITY = "toposcope_workload_locality_ratio"
INFO = "toposcope_workload_info"
DROPPED = "toposcope_workloads_dropped_total"
CID_A = "a1b2c3d4e5f6" + "0" * 52
CGROUP_A = (
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
    + POD_A.replace("-", "_")
    + f".slice/cri-containerd-{CID_A}.scope"
)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    if name == INFO:
        return info_value(registry, **labels)
    if name == DROPPED:
        return registry.get_sample_value(name, labels)
    return workload_value(registry, name, **labels)


def test_registered_and_enabled_by_default() -> None:
    entry = default_table().get("workloads")
    assert entry.default_enabled


def test_v2_host_values() -> None:
    reg = scrape(build(V2HOST))
    assert workload_names(reg) == {WL_A, WL_B, WL_SERVICE}  # init.scope, user.slice excluded
    assert value(
        reg, INFO, workload=WL_A, pid="1001", comm="python3", cgroup=CGROUP_A,
        pod="", namespace="", container="",
    ) == 1.0  # fmt: skip
    assert value(
        reg, INFO, workload=WL_SERVICE, pid="3001", comm="my (odd) app",
        cgroup="/system.slice/foo.service", pod="", namespace="", container="",
    ) == 1.0  # fmt: skip
    # 1001: cpu5 4.0 s, 1002: cpu6 2.0 s, 1003: cpu1 1.0 s; 1010: cpu2 1.0 s
    assert value(reg, CPU, workload=WL_A, numa_node="1") == pytest.approx(6.0)
    assert value(reg, CPU, workload=WL_A, numa_node="0") == pytest.approx(2.0)
    assert value(reg, THREADS, workload=WL_A, numa_node="0") == 2
    assert value(reg, THREADS, workload=WL_A, numa_node="1") == 2
    assert value(reg, CPU, workload=WL_B, numa_node="0") == pytest.approx(0.2)
    assert value(reg, CPU, workload=WL_B, numa_node="1") is None
    assert value(reg, CPU, workload=WL_SERVICE, numa_node="0") == pytest.approx(0.5)
    assert value(reg, CPU, workload=WL_SERVICE, numa_node="1") == pytest.approx(0.5)
    # memory.numa_stat v2: anon + file
    assert value(reg, MEMORY, workload=WL_A, numa_node="0") == 1048576
    assert value(reg, MEMORY, workload=WL_A, numa_node="1") == 4194304
    assert value(reg, MEMORY, workload=WL_B, numa_node="1") == 2097152
    assert value(reg, MEMORY, workload=WL_SERVICE, numa_node="1") == 4096
    assert value(reg, DROPPED) == 0


def test_locality_of_a_workload_holding_nvidia1_on_node1() -> None:
    reg = scrape(build(V2HOST))
    assert value(reg, GPU_INFO, workload=WL_A, gpu="1") == 1.0
    assert value(reg, GPU_INFO, workload=WL_A, gpu="0") is None
    assert value(reg, LOCALITY, workload=WL_A, resource="cpu") == pytest.approx(6.0 / 8.0)
    assert value(reg, LOCALITY, workload=WL_A, resource="memory") == pytest.approx(4 / 5)
    # no GPU: share on the dominant node
    assert value(reg, LOCALITY, workload=WL_B, resource="cpu") == pytest.approx(1.0)
    assert value(reg, LOCALITY, workload=WL_B, resource="memory") == pytest.approx(0.5)
    assert value(reg, LOCALITY, workload=WL_SERVICE, resource="cpu") == pytest.approx(0.5)
    assert value(reg, GPU_MEMORY, workload=WL_A, gpu="1") is None  # only from NVML


def test_locality_follows_the_gpu_numa_node(tmp_path: Path) -> None:
    host = copy_host(V2HOST, tmp_path)
    (host / "sys/bus/pci/devices/0000:7b:00.0/numa_node").write_text("0\n")
    reg = scrape(build(host))
    assert value(reg, LOCALITY, workload=WL_A, resource="cpu") == pytest.approx(2.0 / 8.0)
    assert value(reg, LOCALITY, workload=WL_A, resource="memory") == pytest.approx(1 / 5)


def test_gpu_with_unknown_node_gives_no_locality(tmp_path: Path) -> None:
    host = copy_host(V2HOST, tmp_path)
    device = host / "sys/bus/pci/devices/0000:7b:00.0"
    (device / "numa_node").write_text("-1\n")
    (device / "local_cpulist").write_text("0-7\n")  # spans both nodes: no single node
    reg = scrape(build(host))
    assert value(reg, GPU_INFO, workload=WL_A, gpu="1") == 1.0
    assert value(reg, LOCALITY, workload=WL_A, resource="cpu") is None
    assert value(reg, LOCALITY, workload=WL_A, resource="memory") is None
    assert value(reg, LOCALITY, workload=WL_B, resource="cpu") == pytest.approx(1.0)


def test_gpu_processes_from_nvml_are_summed_per_workload_and_gpu() -> None:
    nvml = FakeGpuProcesses(
        [
            GpuProcess(pid=1001, gpu=1, used_bytes=1 << 30),
            GpuProcess(pid=1010, gpu=1, used_bytes=1 << 29),
            GpuProcess(pid=2001, gpu=0, used_bytes=512 << 20),
            GpuProcess(pid=3001, gpu=1, used_bytes=None),
            GpuProcess(pid=7777, gpu=0, used_bytes=123),  # no tracked workload
        ]
    )
    reg = scrape(build(V2HOST, gpu_processes=nvml))
    assert value(reg, GPU_MEMORY, workload=WL_A, gpu="1") == (1 << 30) + (1 << 29)
    assert value(reg, GPU_MEMORY, workload=WL_B, gpu="0") == 512 << 20
    assert value(reg, GPU_INFO, workload=WL_B, gpu="0") == 1.0
    assert value(reg, GPU_INFO, workload=WL_SERVICE, gpu="1") == 1.0
    assert value(reg, GPU_MEMORY, workload=WL_SERVICE, gpu="1") is None  # unknown size
    # B now has a GPU on node 0: its CPU is all local, its memory half
    assert value(reg, LOCALITY, workload=WL_B, resource="cpu") == pytest.approx(1.0)
    assert value(reg, LOCALITY, workload=WL_B, resource="memory") == pytest.approx(0.5)
    assert value(reg, LOCALITY, workload=WL_SERVICE, resource="memory") == pytest.approx(1.0)


def test_v1_hybrid_host_values() -> None:
    reg = scrape(build(V1HOST))
    assert workload_names(reg) == {WL_DOCKER, WL_SLURM, WL_SSHD}
    assert value(
        reg, INFO, workload=WL_SLURM, pid="5101", comm="slurm_script",
        cgroup="/slurm/uid_1000/job_42", pod="", namespace="", container="",
    ) == 1.0  # fmt: skip
    # docker: 4001 cpu0 15 s, 4002 cpu1 5 s, 4003 cpu5 2 s (task 4004 has no stat, 4077 gone)
    assert value(reg, CPU, workload=WL_DOCKER, numa_node="0") == pytest.approx(20.0)
    assert value(reg, CPU, workload=WL_DOCKER, numa_node="1") == pytest.approx(2.0)
    assert value(reg, THREADS, workload=WL_DOCKER, numa_node="0") == 2
    # v1 memory.numa_stat, pages x page size
    page = os.sysconf("SC_PAGE_SIZE")
    assert value(reg, MEMORY, workload=WL_DOCKER, numa_node="0") == 100 * page
    assert value(reg, MEMORY, workload=WL_DOCKER, numa_node="1") == 200 * page
    # Slurm: both steps, memory from the job's hierarchical_total; the job's labels are on
    # every value series, as the pod labels are
    job = {k: v for k, v in info_labels(reg, WL_SLURM).items() if k.startswith("slurm_")}
    assert job["slurm_job_id"] == "42"
    assert value(reg, CPU, workload=WL_SLURM, **job, numa_node="1") == pytest.approx(10.0)
    assert value(reg, CPU, workload=WL_SLURM, **job, numa_node="0") == pytest.approx(2.02)
    assert value(reg, THREADS, workload=WL_SLURM, **job, numa_node="0") == 2
    assert value(reg, MEMORY, workload=WL_SLURM, **job, numa_node="1") == 900 * page
    # /dev/nvidia0 is board 0000:7b:00.0 (driver information), i.e. GPU 1 on node 1
    assert value(reg, GPU_INFO, workload=WL_SLURM, **job, gpu="1") == 1.0
    assert value(reg, GPU_INFO, workload=WL_SLURM, **job, gpu="0") is None
    cpu_share = value(reg, LOCALITY, workload=WL_SLURM, **job, resource="cpu")
    assert cpu_share == pytest.approx(10 / 12.02)
    assert value(reg, LOCALITY, workload=WL_SLURM, **job, resource="memory") == pytest.approx(0.9)
    assert value(reg, LOCALITY, workload=WL_DOCKER, resource="cpu") == pytest.approx(20 / 22)
    assert value(reg, LOCALITY, workload=WL_DOCKER, resource="memory") == pytest.approx(2 / 3)


def test_numa_maps_fallback_skips_garbage_lines() -> None:
    reg = scrape(build(V1HOST))
    # sshd.service has no memory.numa_stat: numa_maps N0=100 pages, N1=3 pages (two bad lines)
    assert value(reg, MEMORY, workload=WL_SSHD, numa_node="0") == 100 * 4096
    assert value(reg, MEMORY, workload=WL_SSHD, numa_node="1") == 3 * 4096
    no_maps = scrape(build(V1HOST, WorkloadSettings(numa_maps=False)))
    assert value(no_maps, MEMORY, workload=WL_SSHD, numa_node="0") is None
    assert value(no_maps, LOCALITY, workload=WL_SSHD, resource="memory") is None


def test_max_workloads_keeps_the_busiest_and_counts_the_rest() -> None:
    collector = build(V2HOST, WorkloadSettings(max_workloads=2))
    first = scrape(collector)
    # A: 8.0 s, foo.service: 1.0 s, B: 0.2 s
    assert workload_names(first) == {WL_A, WL_SERVICE}
    assert value(first, DROPPED) == 1
    assert value(first, CPU, workload=WL_B, numa_node="0") is None
    second = scrape(collector)
    assert value(second, DROPPED) == 2  # cumulative since start


def test_min_cpu_seconds_and_include_exclude() -> None:
    busy = scrape(build(V2HOST, WorkloadSettings(min_cpu_seconds=0.5)))
    assert workload_names(busy) == {WL_A, WL_SERVICE}
    assert value(busy, DROPPED) == 0  # filtered, not dropped
    pods = scrape(build(V2HOST, WorkloadSettings(include=(r"^/kubepods",))))
    assert workload_names(pods) == {WL_A, WL_B}
    everything = scrape(build(V2HOST, WorkloadSettings(exclude=())))
    assert workload_names(everything) == {
        WL_A, WL_B, WL_SERVICE, "/init.scope",
        "/user.slice/user-1000.slice/session-1.scope",
    }  # fmt: skip


def test_vanished_processes_are_skipped(tmp_path: Path) -> None:
    host = copy_host(V2HOST, tmp_path)
    # 1099 is already listed without a /proc entry; now every process of B vanishes too
    for path in sorted((host / "proc/2001").rglob("*"), reverse=True):
        path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
    (host / "proc/2001").rmdir()
    reg = scrape(build(host))
    assert workload_names(reg) == {WL_A, WL_SERVICE}
    assert value(reg, THREADS, workload=WL_A, numa_node="1") == 2


def test_cpu_counter_attributes_increments_to_the_current_node(tmp_path: Path) -> None:
    host = copy_host(V2HOST, tmp_path)
    collector = build(host)
    before = scrape(collector)
    assert value(before, CPU, workload=WL_A, numa_node="0") == pytest.approx(2.0)
    task = host / "proc/1001/task"
    # thread 1003 migrates from CPU 1 (node 0) to CPU 7 (node 1) and runs 0.5 s more
    (task / "1003/stat").write_text(
        stat_line(1003, "python3", ppid=1, utime=150, stime=0, starttime=5002, processor=7)
    )
    after = scrape(collector)
    assert value(after, CPU, workload=WL_A, numa_node="0") == pytest.approx(2.0)
    assert value(after, CPU, workload=WL_A, numa_node="1") == pytest.approx(6.5)
    assert value(after, THREADS, workload=WL_A, numa_node="0") == 1
    assert value(after, THREADS, workload=WL_A, numa_node="1") == 3
    # thread 1002 exits: the counter keeps what it used
    (task / "1002/stat").unlink()
    (task / "1002").rmdir()
    # a new thread starts on node 0 with 1.0 s
    (task / "1004").mkdir()
    (task / "1004/stat").write_text(
        stat_line(1004, "python3", ppid=1, utime=100, stime=0, starttime=9000, processor=0)
    )
    later = scrape(collector)
    assert value(later, CPU, workload=WL_A, numa_node="1") == pytest.approx(6.5)
    assert value(later, CPU, workload=WL_A, numa_node="0") == pytest.approx(3.0)
    assert value(later, LOCALITY, workload=WL_A, resource="cpu") == pytest.approx(6.5 / 9.5)


def test_process_mode_uses_process_trees_and_numa_maps() -> None:
    reg = scrape(build(V2HOST, WorkloadSettings(mode="process", exclude=())))
    assert workload_names(reg) == {"pid-1001", "pid-2001", "pid-3001", "pid-4001"}
    assert value(
        reg, INFO, workload="pid-1001", pid="1001", comm="python3", cgroup=CGROUP_A,
        pod="", namespace="", container="",
    ) == 1.0  # fmt: skip
    assert value(reg, CPU, workload="pid-1001", numa_node="1") == pytest.approx(6.0)
    # numa_maps of 1001 and 1010: 150 pages + one 2 MiB page + 10 pages on node 0
    assert value(reg, MEMORY, workload="pid-1001", numa_node="0") == 160 * 4096 + (2 << 20)
    assert value(reg, MEMORY, workload="pid-1001", numa_node="1") == 1074 * 4096 + (2 << 20)
    assert value(reg, GPU_INFO, workload="pid-1001", gpu="1") == 1.0
    only_bash = scrape(build(V2HOST, WorkloadSettings(mode="process", include=("^bash$",))))
    assert workload_names(only_bash) == {"pid-4001"}


class _StaticKubelet:
    """A WorkloadMapper plug-in that knows pod names, as a kubelet-backed one would."""

    def __init__(self) -> None:
        self.paths = PathMapper()

    def identify(self, cgroup: str) -> WorkloadIdentity:
        identity = self.paths.identify(cgroup)
        if identity.pod_uid == POD_A:
            return with_names(identity, "trainer-0", "ml", "pytorch")
        return identity


def test_a_mapper_fills_pod_namespace_and_container_names() -> None:
    config = ExporterConfig(paths=HostPaths.under(V2HOST))
    collector = WorkloadsCollector(
        config.workloads, config.paths, HostTopology(config), mapper=_StaticKubelet()
    )
    reg = scrape(collector)
    assert value(
        reg, INFO, workload=WL_A, pid="1001", comm="python3", cgroup=CGROUP_A,
        pod="trainer-0", namespace="ml", container="pytorch",
    ) == 1.0  # fmt: skip


def test_no_cgroup_mount_is_no_data(tmp_path: Path) -> None:
    host = copy_host(V2HOST, tmp_path)
    (host / "proc/self/mountinfo").write_text("22 1 8:1 / / rw - ext4 /dev/vda1 rw\n")
    with pytest.raises(NoDataError):
        list(build(host).collect())


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every fd directory")
def test_unreadable_fd_directory_is_skipped(tmp_path: Path) -> None:
    host = copy_host(V2HOST, tmp_path)
    fd_dir = host / "proc/1001/fd"
    fd_dir.chmod(0)
    try:
        reg = scrape(build(host))
    finally:
        fd_dir.chmod(0o755)
    assert value(reg, GPU_INFO, workload=WL_A, gpu="1") is None
    assert value(reg, CPU, workload=WL_A, numa_node="1") == pytest.approx(6.0)


def test_gpu_source_attached_after_the_collector_was_built() -> None:
    config = ExporterConfig(paths=HostPaths.under(V2HOST))
    ctx = CollectorContext(config)
    collector = workloads_entry.factory(ctx)
    assert workload_value(scrape(collector), GPU_MEMORY, workload=WL_B, gpu="0") is None
    ctx.gpu_processes = FakeGpuProcesses([GpuProcess(pid=2001, gpu=0, used_bytes=4096)])
    reg = scrape(collector)
    assert value(reg, GPU_MEMORY, workload=WL_B, gpu="0") == 4096
