"""The numa_memory collector on real machines' sysfs trees and on broken ones."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.exporters.text_registry import text_registry
from toposcope.config import ExporterConfig, HostPaths
from toposcope.errors import NoDataError, SourceError
from toposcope.exporters.app import build_runner, render
from toposcope.exporters.collectors import default_table
from toposcope.exporters.collectors.numa_memory import ENTRY, NumaMemoryCollector
from toposcope.exporters.context import CollectorContext
from toposcope.host.sysfs import SysfsNodes

KIB = 1024


def registry_for(sysfs: Path) -> CollectorRegistry:
    return text_registry(NumaMemoryCollector(SysfsNodes(sysfs)))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_default_table_lists_the_numa_and_cross_socket_collectors() -> None:
    names = default_table().names()
    assert names[0] == "topology"
    wanted = ["numa_memory", "numa_cpu", "cross_socket"]
    assert [n for n in names if n in wanted] == wanted
    assert names.index("numa_memory") == names.index("topology") + 1
    for entry in default_table():
        if entry.name in wanted:
            assert entry.default_enabled
            assert entry.description


def test_entry_builds_from_the_context(hwloc_root: Callable[[str], Path]) -> None:
    ctx = CollectorContext(ExporterConfig(paths=HostPaths.under(hwloc_root("16amd64-8n2c"))))
    registry = text_registry(ENTRY.factory(ctx))
    assert registry.get_sample_value(
        "toposcope_numa_memory_total_bytes", {"numa_node": "5"}
    ) == pytest.approx(8388608 * KIB)


def test_4_socket_8_node_opteron(hwloc_root: Callable[[str], Path]) -> None:
    registry = registry_for(hwloc_root("64amd64-4s2n4ca2co") / "sys")
    value = registry.get_sample_value
    node0 = {"numa_node": "0"}
    assert value("toposcope_numa_memory_total_bytes", node0) == 16769836 * KIB
    assert value("toposcope_numa_memory_free_bytes", node0) == 16087204 * KIB
    assert value("toposcope_numa_memory_used_bytes", node0) == 682632 * KIB
    assert value("toposcope_numa_memory_total_bytes", {"numa_node": "1"}) == 16777216 * KIB
    assert value("toposcope_numa_memory_free_bytes", {"numa_node": "1"}) == 16190248 * KIB
    pages = "toposcope_numa_memory_pages_bytes"
    assert value(pages, {"numa_node": "7", "type": "file"}) == 23224 * KIB
    assert value(pages, {"numa_node": "7", "type": "anon"}) == 444 * KIB
    assert value(pages, {"numa_node": "7", "type": "shmem"}) == 36 * KIB
    assert value(pages, {"numa_node": "7", "type": "slab"}) == 272376 * KIB
    assert value(pages, {"numa_node": "7", "type": "hugepages"}) == 0
    allocations = "toposcope_numa_allocations_total"
    assert value(allocations, {"numa_node": "0", "result": "hit"}) == 420476
    assert value(allocations, {"numa_node": "0", "result": "interleave_hit"}) == 8097
    assert value(allocations, {"numa_node": "0", "result": "local"}) == 420295
    assert value(allocations, {"numa_node": "0", "result": "other"}) == 181
    assert value(allocations, {"numa_node": "7", "result": "other"}) == 9641
    assert value(allocations, {"numa_node": "7", "result": "miss"}) == 0
    assert value(allocations, {"numa_node": "7", "result": "foreign"}) == 0
    for node in range(8):
        assert value("toposcope_numa_memory_total_bytes", {"numa_node": str(node)}) is not None


def test_8_node_opteron(hwloc_root: Callable[[str], Path]) -> None:
    registry = registry_for(hwloc_root("16amd64-8n2c") / "sys")
    value = registry.get_sample_value
    assert value("toposcope_numa_memory_total_bytes", {"numa_node": "5"}) == 8388608 * KIB
    assert value("toposcope_numa_memory_free_bytes", {"numa_node": "5"}) == 8246360 * KIB
    allocations = "toposcope_numa_allocations_total"
    assert value(allocations, {"numa_node": "5", "result": "hit"}) == 243838962
    assert value(allocations, {"numa_node": "5", "result": "other"}) == 5309


@pytest.mark.parametrize(
    ("root", "nodes"),
    [("4fake-4gr1nu1pu", 4), ("64fake-4n2s2ca2c2t", 4), ("fakeheterocpunuma", 6)],
)
def test_nodes_without_numastat_still_publish_memory(
    hwloc_root: Callable[[str], Path], root: str, nodes: int
) -> None:
    # node_exporter's meminfo_numa fails as a whole on these machines
    sysfs = hwloc_root(root) / "sys"
    registry = registry_for(sysfs)
    for node in SysfsNodes(sysfs).node_ids():
        assert registry.get_sample_value(
            "toposcope_numa_memory_total_bytes", {"numa_node": str(node)}
        ), node
    names = {s.name for m in registry.collect() for s in m.samples}
    assert "toposcope_numa_allocations_total" not in names
    assert len(SysfsNodes(sysfs).node_ids()) == nodes


def test_success_through_the_runner_without_numastat(hwloc_root: Callable[[str], Path]) -> None:
    config = ExporterConfig(paths=HostPaths.under(hwloc_root("4fake-4gr1nu1pu")))
    entries = [e for e in default_table() if e.name == "numa_memory"]
    text = render(build_runner(config, entries), "host").decode()
    assert 'toposcope_scrape_collector_success{collector="numa_memory"} 1.0' in text
    assert 'toposcope_numa_memory_total_bytes{numa_node="0"} 1.073741824e+09' in text


def test_no_node_directory_is_no_data(hwloc_root: Callable[[str], Path]) -> None:
    collector = NumaMemoryCollector(SysfsNodes(hwloc_root("2arm-2c") / "sys"))
    with pytest.raises(NoDataError):
        list(collector.collect())


def test_garbled_lines_are_skipped_and_the_rest_published(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = tmp_path / "sys" / "devices" / "system" / "node"
    write(
        base / "node0" / "meminfo",
        "Node 0 MemTotal:  4096 kB\nNode 0 MemFree: \x00\x00 kB\nNode 0 AnonPages: 12 kB\n",
    )
    write(base / "node0" / "numastat", "numa_hit 77\nnuma_miss -3\nother_node 5\n")
    write(base / "node1" / "meminfo", "Node 1 MemTotal: 8 kB\nNode 1 MemFree: 2 kB\n")
    with caplog.at_level(logging.WARNING):
        registry = registry_for(tmp_path / "sys")
        value = registry.get_sample_value
        assert value("toposcope_numa_memory_total_bytes", {"numa_node": "0"}) == 4096 * KIB
        assert value("toposcope_numa_memory_free_bytes", {"numa_node": "0"}) is None
        assert value("toposcope_numa_memory_used_bytes", {"numa_node": "0"}) is None
        assert (
            value("toposcope_numa_memory_pages_bytes", {"numa_node": "0", "type": "anon"})
            == 12 * KIB
        )
        allocations = "toposcope_numa_allocations_total"
        assert value(allocations, {"numa_node": "0", "result": "hit"}) == 77
        assert value(allocations, {"numa_node": "0", "result": "miss"}) is None
        assert value(allocations, {"numa_node": "0", "result": "other"}) == 5
        assert value("toposcope_numa_memory_used_bytes", {"numa_node": "1"}) == 6 * KIB
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("meminfo" in m for m in messages)
    assert any("numa_miss -3" in m for m in messages)


def test_unreadable_meminfo_keeps_the_nodes_counters(tmp_path: Path) -> None:
    base = tmp_path / "sys" / "devices" / "system" / "node"
    write(base / "node0" / "numastat", "numa_hit 9\n")
    base.joinpath("node0", "meminfo").mkdir()  # reading it fails (a directory)
    write(base / "node1" / "meminfo", "Node 1 MemTotal: 8 kB\n")
    registry = registry_for(tmp_path / "sys")
    value = registry.get_sample_value
    assert value("toposcope_numa_allocations_total", {"numa_node": "0", "result": "hit"}) == 9
    assert value("toposcope_numa_memory_total_bytes", {"numa_node": "0"}) is None
    assert value("toposcope_numa_memory_total_bytes", {"numa_node": "1"}) == 8 * KIB


def test_node_directories_with_nothing_readable_fail(tmp_path: Path) -> None:
    (tmp_path / "sys" / "devices" / "system" / "node" / "node0").mkdir(parents=True)
    collector = NumaMemoryCollector(SysfsNodes(tmp_path / "sys"))
    with pytest.raises(SourceError, match="no readable meminfo or numastat"):
        list(collector.collect())
