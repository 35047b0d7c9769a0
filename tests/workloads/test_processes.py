"""The /proc/PID readers: stat, numa_maps, status, cgroup, fds, process trees."""

from __future__ import annotations

import re

import pytest

from tests.workloads.helpers import V1HOST, V2HOST
from toposcope.host.proc_files import (
    parse_numa_maps,
    parse_nvidia_information,
    parse_proc_cgroup,
    parse_stat,
    parse_status,
)
from toposcope.host.processes import ProcFs, gpu_minors, process_trees

# A real line shape (kernel 6.1) whose comm holds spaces and parentheses.
STAT = (
    b"4242 (my (odd)) proc) R 1 4242 4242 0 -1 4194560 2405 0 0 0 1234 567 0 0 20 0 3 0 "
    b"987654 231170048 4389 18446744073709551615 94014 94015 140725 0 0 0 0 0 16386 0 0 0 "
    b"17 13 0 0 0 0 0 94016 94017 94018 140726 140727 140728 140729 0\n"
)


def test_stat_with_spaces_and_parentheses_in_comm() -> None:
    stat = parse_stat(STAT, clock_ticks=100)
    assert stat.pid == 4242
    assert stat.comm == "my (odd)) proc"
    assert stat.state == "R"
    assert stat.ppid == 1
    assert stat.cpu_seconds == pytest.approx(18.01)  # (1234 + 567) / 100
    assert stat.starttime == 987654
    assert stat.processor == 13
    assert not stat.kernel_thread


def test_stat_without_processor_field_and_kernel_thread() -> None:
    short = b"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 1 2 0 0 20 0 1 0 5 0 0 1844 0 0\n"
    stat = parse_stat(short, clock_ticks=100)
    assert stat.processor is None
    assert stat.kernel_thread
    assert stat.cpu_seconds == pytest.approx(0.03)


@pytest.mark.parametrize("line", [b"", b"12 no parens S 1", b"12 (x) S 1 2 3\n"])
def test_malformed_stat_raises_value_error(line: bytes) -> None:
    with pytest.raises(ValueError):
        parse_stat(line)


def test_numa_maps_pages_times_page_size_and_garbage_skipped() -> None:
    text = (
        "55d4c0a00000 default file=/usr/bin/python3.11 mapped=200 N0=150 N1=50 "
        "kernelpagesize_kB=4\n"
        "7f2a80000000 default file=/dev/hugepages/buf huge dirty=2 N0=1 N1=1 "
        "kernelpagesize_kB=2048\n"
        "this is not a mapping N0=notanumber\n"
        "7f0000000000 default anon=5 N1=5 kernelpagesize_kB=four\n"
        "\n"
        "7f1000000000 default anon=3 N1=3\n"  # no page size: base pages
        "7f2000000000 default N=3 Nx=4 N2 N-1=7 kernelpagesize_kB=4\n"
    )
    assert parse_numa_maps(text) == {
        0: 150 * 4096 + 2 * 1024 * 1024,
        1: 50 * 4096 + 2 * 1024 * 1024 + 3 * 4096,
    }


def test_status_and_proc_cgroup_and_nvidia_information() -> None:
    status = parse_status("Name:\tmy app\nTgid:\t12\nCpus_allowed_list:\t0-3,8\nnocolon\n")
    assert status == {"Name": "my app", "Tgid": "12", "Cpus_allowed_list": "0-3,8"}
    v1 = parse_proc_cgroup(
        "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n1:name=systemd:/x\n0::/x\njunk\n"
    )
    assert [(e.hierarchy, e.controllers, e.path) for e in v1] == [
        (4, ("memory",), "/docker/abc"),
        (3, ("cpu", "cpuacct"), "/docker/abc"),
        (1, ("name=systemd",), "/x"),
        (0, (), "/x"),
    ]
    assert parse_nvidia_information("Model: \t A100\nDevice Minor: \t 3\n") == 3
    assert parse_nvidia_information("Model: A100\n") is None


def test_threads_of_a_fixture_process() -> None:
    proc = ProcFs(V2HOST / "proc", clock_ticks=100)
    ppid, comm, samples = proc.threads(1001)
    assert (ppid, comm) == (1, "python3")
    assert sorted(samples) == [
        (1001, 5000, 4.0, 5),
        (1002, 5001, 2.0, 6),
        (1003, 5002, 1.0, 1),
    ]
    with pytest.raises(FileNotFoundError):
        proc.threads(1099)  # listed in cgroup.procs, gone from /proc


def test_thread_without_stat_is_skipped() -> None:
    proc = ProcFs(V1HOST / "proc", clock_ticks=100)
    assert sorted(s[0] for s in proc.threads(4001).samples) == [4001, 4002, 4003]
    assert sorted(t.pid for t in proc.tasks(4001)) == [4001, 4002, 4003]


def test_fd_targets_and_gpu_minors() -> None:
    proc = ProcFs(V2HOST / "proc")
    targets = proc.fd_targets(1001)
    assert "/dev/nvidia1" in targets
    assert not any(t.startswith(("socket:", "anon_inode:")) for t in targets)
    assert gpu_minors(targets, re.compile(r"^/dev/nvidia(\d+)$")) == {1}


def test_per_process_readers_on_fixture() -> None:
    proc = ProcFs(V2HOST / "proc")
    assert proc.comm(3001) == "my (odd) app"
    assert proc.stat(3001).cpu_seconds == pytest.approx(1.0)
    assert proc.cgroups(3001)[0].path == "/system.slice/foo.service"
    assert proc.status(3001)["Threads"] == "2"
    assert proc.numa_maps(1010) == {0: 10 * 4096}
    assert ProcFs(V1HOST / "proc").nvidia_minors() == {1: "0000:3b:00.0", 0: "0000:7b:00.0"}
    assert proc.nvidia_minors() == {}


def test_pids_of_missing_root_is_empty(tmp_path: object) -> None:
    assert ProcFs(f"{tmp_path}/nothing").pids() == []


def test_process_trees_are_children_of_init() -> None:
    trees = process_trees(ProcFs(V2HOST / "proc"))
    assert [(t.root, t.comm, t.pids) for t in trees] == [
        (1001, "python3", (1001, 1010)),
        (2001, "nginx", (2001,)),
        (3001, "my (odd) app", (3001,)),
        (4001, "bash", (4001,)),
    ]
