"""Per-scrape sysfs and procfs readers: parsers on text, readers on real machines' trees."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from toposcope.host.procfs import (
    CPU_MODES,
    CpuTimes,
    Procfs,
    parse_proc_stat_cpus,
    user_hz,
)
from toposcope.host.sysfs import (
    SysfsNodes,
    parse_numastat,
)
from toposcope.topology.sysfs_files import parse_meminfo_lines

KIB = 1024
MIB = 1024 * KIB


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ----------------------------------------------------------------------------- parsers


def test_parse_numastat_reads_every_counter() -> None:
    text = "numa_hit 420476\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 8097\n"
    values, bad = parse_numastat(text + "local_node 420295\nother_node 181\n")
    assert values == {
        "numa_hit": 420476,
        "numa_miss": 0,
        "numa_foreign": 0,
        "interleave_hit": 8097,
        "local_node": 420295,
        "other_node": 181,
    }
    assert bad == []


def test_parse_numastat_returns_garbled_lines_and_keeps_the_rest() -> None:
    values, bad = parse_numastat("numa_hit 10\nnuma_miss ten\n\x00\x01garbage\nother_node 3\n\n")
    assert values == {"numa_hit": 10, "other_node": 3}
    assert bad == ["numa_miss ten", "\x00\x01garbage"]


def test_unparsed_meminfo_lines_lists_only_malformed_lines() -> None:
    text = "Node 0 MemTotal: 100 kB\nNode 0 MemFree: lots kB\n\nNode 0 HugePages_Total: 0\n"
    assert parse_meminfo_lines(text)[1] == ["Node 0 MemFree: lots kB"]


def test_parse_proc_stat_converts_ticks_to_seconds() -> None:
    text = (
        "cpu  640 0 1765 1187508 4024 0 37 0 0\n"
        "cpu0 335 1 857 15205 2233 4 32 7 0 0\n"
        "cpu1 45 0 63 18843 53 0 0 0 0 0\n"
        "intr 123 4 5\nctxt 999\n"
    )
    times, bad = parse_proc_stat_cpus(text, 100)
    assert bad == []
    assert sorted(times) == [0, 1]
    assert times[0] == CpuTimes(0, 3.35, 0.01, 8.57, 152.05, 22.33, 0.04, 0.32, 0.07)
    assert dict(times[1].modes())["idle"] == pytest.approx(188.43)


def test_parse_proc_stat_does_not_add_guest_time() -> None:
    # user=1000 already includes guest=400 (the kernel's account_guest_time)
    times, _ = parse_proc_stat_cpus("cpu0 1000 200 0 0 0 0 0 0 400 100\n", 100)
    assert times[0].user == pytest.approx(10.0)
    assert times[0].nice == pytest.approx(2.0)
    assert [mode for mode, _ in times[0].modes()] == list(CPU_MODES)


def test_parse_proc_stat_short_lines_leave_missing_modes_out() -> None:
    times, _ = parse_proc_stat_cpus("cpu3 100 0 50 1000 0 0 0\n", 100)  # 2.6.10: no steal
    assert times[3].steal is None
    assert "steal" not in dict(times[3].modes())
    assert dict(times[3].modes())["softirq"] == 0.0


def test_parse_proc_stat_returns_garbled_cpu_lines() -> None:
    times, bad = parse_proc_stat_cpus("cpu0 1 2 x 4\ncpu1 5 6 7 8 9 10 11 12\ncpu2\n", 100)
    assert sorted(times) == [1]
    assert bad == ["cpu0 1 2 x 4", "cpu2"]


def test_user_hz_is_positive() -> None:
    assert user_hz() > 0


# ----------------------------------------------------------------------------- SysfsNodes


def test_node_memory_on_a_4_socket_8_node_opteron(hwloc_root: Callable[[str], Path]) -> None:
    nodes = SysfsNodes(hwloc_root("64amd64-4s2n4ca2co") / "sys")
    assert nodes.node_ids() == list(range(8))
    memory = nodes.node_memory(0)
    assert memory is not None
    assert memory.total_bytes == 16769836 * KIB
    assert memory.free_bytes == 16087204 * KIB
    assert memory.used_bytes == 682632 * KIB  # MemUsed line
    assert memory.pages_bytes == {
        "file": 23396 * KIB,
        "anon": 4688 * KIB,
        "shmem": 16 * KIB,
        "slab": 292908 * KIB,
        "hugepages": 0,  # hugepages-2048kB/nr_hugepages = 0
    }


def test_node_numastat_on_a_4_socket_8_node_opteron(hwloc_root: Callable[[str], Path]) -> None:
    stat = SysfsNodes(hwloc_root("64amd64-4s2n4ca2co") / "sys").node_numastat(7)
    assert stat is not None
    assert dict(stat.counts) == {
        "hit": 130005,
        "miss": 0,
        "foreign": 0,
        "interleave_hit": 8143,
        "local": 120364,
        "other": 9641,
    }


def test_hugepages_are_pool_size_times_count(hwloc_root: Callable[[str], Path]) -> None:
    memory = SysfsNodes(hwloc_root("32intel64-2p8co2t+8ve") / "sys").node_memory(0)
    assert memory is not None
    # hugepages-2048kB/nr_hugepages = 2048, hugepages-1048576kB/nr_hugepages = 0
    assert memory.pages_bytes["hugepages"] == 2048 * 2 * MIB


def test_hugepages_zero_without_pool_dirs_when_meminfo_says_zero(
    hwloc_root: Callable[[str], Path],
) -> None:
    memory = SysfsNodes(hwloc_root("16amd64-8n2c") / "sys").node_memory(5)
    assert memory is not None
    assert memory.total_bytes == 8388608 * KIB
    assert memory.pages_bytes["hugepages"] == 0


def test_hugepages_unknown_without_pool_dirs_when_meminfo_counts_some(tmp_path: Path) -> None:
    node = tmp_path / "sys" / "devices" / "system" / "node" / "node0"
    write(node / "meminfo", "Node 0 MemTotal: 1000 kB\nNode 0 HugePages_Total: 4\n")
    memory = SysfsNodes(tmp_path / "sys").node_memory(0)
    assert memory is not None
    assert "hugepages" not in memory.pages_bytes
    assert memory.free_bytes is None
    assert memory.used_bytes is None


def test_used_is_total_minus_free_without_memused(tmp_path: Path) -> None:
    node = tmp_path / "sys" / "devices" / "system" / "node" / "node2"
    write(node / "meminfo", "Node 2 MemTotal: 1000 kB\nNode 2 MemFree: 400 kB\n")
    memory = SysfsNodes(tmp_path / "sys").node_memory(2)
    assert memory is not None
    assert memory.used_bytes == 600 * KIB


def test_garbled_lines_are_skipped_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node = tmp_path / "sys" / "devices" / "system" / "node" / "node0"
    write(
        node / "meminfo", "Node 0 MemTotal: 2048 kB\nNode 0 MemFree: #### kB\nNode 0 Slab: 8 kB\n"
    )
    write(node / "numastat", "numa_hit 5\nnuma_miss\nother_node 2\n")
    nodes = SysfsNodes(tmp_path / "sys")
    with caplog.at_level(logging.WARNING):
        memory = nodes.node_memory(0)
        stat = nodes.node_numastat(0)
        nodes.node_memory(0)
        nodes.node_numastat(0)
    assert memory is not None and stat is not None
    assert memory.total_bytes == 2048 * KIB
    assert memory.free_bytes is None
    assert memory.pages_bytes == {"slab": 8 * KIB}
    assert dict(stat.counts) == {"hit": 5, "other": 2}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # once per bad line, not once per read
    assert any("MemFree: #### kB" in w and "meminfo" in w for w in warnings)
    assert any("'numa_miss'" in w and "numastat" in w for w in warnings)


def test_missing_files_read_as_none(hwloc_root: Callable[[str], Path], tmp_path: Path) -> None:
    nodes = SysfsNodes(hwloc_root("4fake-4gr1nu1pu") / "sys")
    assert nodes.node_ids() == [0, 1, 2, 3]
    assert nodes.node_numastat(0) is None  # this machine has no numastat files
    assert nodes.numastat() == {}
    assert nodes.node_memory(9) is None  # no such node
    empty = SysfsNodes(tmp_path / "nothing")
    assert empty.node_ids() == []
    assert empty.l3_cache_cpus() == {}


def test_l3_cache_domains(hwloc_root: Callable[[str], Path]) -> None:
    domains = SysfsNodes(hwloc_root("32intel64-2p8co2t+8ve") / "sys").l3_cache_cpus()
    assert domains == {
        0: (*range(0, 8), *range(16, 24)),
        1: (*range(8, 16), *range(24, 32)),
    }


def test_l3_cache_domains_need_cache_ids(hwloc_root: Callable[[str], Path]) -> None:
    # an older kernel: cache/index3 exists but has no id file
    assert SysfsNodes(hwloc_root("64amd64-4s2n4ca2co") / "sys").l3_cache_cpus() == {}


# ----------------------------------------------------------------------------- Procfs


def test_cpu_times_of_a_real_proc_stat(hwloc_root: Callable[[str], Path]) -> None:
    times = Procfs(hwloc_root("64amd64-4s2n4ca2co") / "proc", hz=100).cpu_times()
    assert times is not None
    assert sorted(times) == list(range(64))
    # cpu0 335 0 857 15205 2233 0 32 0 0
    assert times[0] == CpuTimes(0, 3.35, 0.0, 8.57, 152.05, 22.33, 0.0, 0.32, 0.0)


def test_cpu_times_none_without_proc_stat(hwloc_root: Callable[[str], Path]) -> None:
    assert Procfs(hwloc_root("16ia64-8n2s") / "proc").cpu_times() is None


def test_cpu_times_warn_once_per_garbled_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "stat", "cpu  1 1 1 1\ncpu0 100 0 0 100 0 0 0 0\ncpu1 1 two 3\n")
    procfs = Procfs(tmp_path, hz=100)
    with caplog.at_level(logging.WARNING):
        first = procfs.cpu_times()
        procfs.cpu_times()
    assert first is not None and sorted(first) == [0]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "cpu1 1 two 3" in warnings[0].getMessage()


def test_offline_node_directories_are_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = tmp_path / "sys" / "devices" / "system" / "node"
    for node in (0, 1, 2):
        write(base / f"node{node}" / "meminfo", f"Node {node} MemTotal: 8 kB\n")
    nodes = SysfsNodes(tmp_path / "sys")
    assert nodes.node_ids() == [0, 1, 2]  # no online file: every directory
    write(base / "online", "0,2\n")
    assert nodes.node_ids() == [0, 2]
    write(base / "online", "zero\n")
    with caplog.at_level(logging.WARNING):
        assert nodes.node_ids() == [0, 1, 2]
    assert any("online" in r.getMessage() for r in caplog.records)
