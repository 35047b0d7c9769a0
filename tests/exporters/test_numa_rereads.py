"""What the NUMA part keeps between scrapes (node list, file paths, hugepage pool sizes) never
hides a change: values are read on every scrape, and a new or offlined node is seen.
"""

from __future__ import annotations

from pathlib import Path

from tests.exporters.text_registry import text_registry
from toposcope.exporters.collectors.numa_memory import NumaMemoryCollector
from toposcope.host.procfs import Procfs, parse_proc_stat_ticks
from toposcope.host.sysfs import SysfsNodes

KIB = 1024
TOTAL = "toposcope_numa_memory_total_bytes"
FREE = "toposcope_numa_memory_free_bytes"
PAGES = "toposcope_numa_memory_pages_bytes"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def node(base: Path, number: int, free_kib: int, huge_pages: int = 0) -> None:
    directory = base / f"node{number}"
    write(
        directory / "meminfo",
        f"Node {number} MemTotal: 1000 kB\nNode {number} MemFree: {free_kib} kB\n",
    )
    write(directory / "numastat", "numa_hit 5\nnuma_miss 1\n")
    write(directory / "hugepages" / "hugepages-2048kB" / "nr_hugepages", f"{huge_pages}\n")


def test_values_nodes_and_pools_changed_between_scrapes_are_read(tmp_path: Path) -> None:
    base = tmp_path / "sys" / "devices" / "system" / "node"
    node(base, 0, free_kib=600)
    write(base / "online", "0\n")
    registry = text_registry(NumaMemoryCollector(SysfsNodes(tmp_path / "sys")))
    value = registry.get_sample_value
    assert value(FREE, {"numa_node": "0"}) == 600 * KIB
    assert value(PAGES, {"numa_node": "0", "type": "hugepages"}) == 0

    node(base, 0, free_kib=250, huge_pages=3)  # same tree, new figures
    assert value(FREE, {"numa_node": "0"}) == 250 * KIB
    assert value(PAGES, {"numa_node": "0", "type": "hugepages"}) == 3 * 2048 * KIB

    node(base, 1, free_kib=100)  # hot-added: a new directory, then online
    assert value(TOTAL, {"numa_node": "1"}) is None
    write(base / "online", "0-1\n")
    assert value(FREE, {"numa_node": "1"}) == 100 * KIB

    write(base / "online", "1\n")  # node 0 offline, its directory kept
    assert value(FREE, {"numa_node": "0"}) is None
    assert value(FREE, {"numa_node": "1"}) == 100 * KIB


def test_a_node_directory_added_without_an_online_file_is_seen(tmp_path: Path) -> None:
    base = tmp_path / "sys" / "devices" / "system" / "node"
    node(base, 0, free_kib=10)
    nodes = SysfsNodes(tmp_path / "sys")
    assert nodes.node_ids() == [0]
    node(base, 4, free_kib=20)
    assert nodes.node_ids() == [0, 4]
    memory = nodes.node_memory(4)
    assert memory is not None and memory.free_bytes == 20 * KIB


def test_cpu_ticks_are_read_again_and_agree_with_the_seconds(tmp_path: Path) -> None:
    write(tmp_path / "stat", "cpu  1 1 1 1\ncpu0 100 0 7 100 0 0 0 0 3 0\nintr 5\n")
    procfs = Procfs(tmp_path, hz=100)
    assert procfs.cpu_ticks() == {0: (100, 0, 7, 100, 0, 0, 0, 0)}
    write(tmp_path / "stat", "cpu0 150 0 9 120 0 0 0 0\ncpu1 1 2 3 4\n")
    assert procfs.cpu_ticks() == {0: (150, 0, 9, 120, 0, 0, 0, 0), 1: (1, 2, 3, 4)}
    times = procfs.cpu_times()
    assert times is not None and times[0].user == 1.5 and times[1].idle == 0.04


def test_proc_stat_bytes_with_odd_fields_are_bad_lines_not_errors() -> None:
    data = b"cpu0 1 2 x 4\ncpu1 +5 6\ncpu2 1_0 2\ncpu3 " + b"9" * 21 + b" 1\ncpu4 7 8\ncpux 1\n"
    ticks, bad = parse_proc_stat_ticks(data)
    assert ticks == {4: (7, 8)}
    assert len(bad) == 4 and bad[0] == "cpu0 1 2 x 4"
