"""The NUMA families written straight to text are byte for byte what client_python writes for
the same readings (names, HELP and TYPE from the catalogue, label order, value formatting).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import Metric

from tests.exporters.text_registry import client_python_text
from toposcope.catalogue import spec
from toposcope.config import ExporterConfig, HostPaths
from toposcope.exporters.collectors.numa_cpu import NumaCpuCollector
from toposcope.exporters.collectors.numa_memory import NumaMemoryCollector
from toposcope.exporters.context import CollectorContext
from toposcope.exporters.exposition import (
    PREFIX_LIMIT,
    FamilyLayout,
    RenderedFamily,
    format_value,
    go_float,
    joined,
    render_families,
)
from toposcope.host.procfs import CPU_MODES, Procfs
from toposcope.host.sysfs import SysfsNodes
from toposcope.serving.httpgzip import GzipMember

FIXTURE = "64amd64-4s2n4ca2co"


def memory_reference(nodes: SysfsNodes) -> list[Metric]:
    """The numa_memory families built as client_python families from the same readings."""
    total, free, used, pages, allocations = (
        spec(name).family()
        for name in (
            "toposcope_numa_memory_total_bytes",
            "toposcope_numa_memory_free_bytes",
            "toposcope_numa_memory_used_bytes",
            "toposcope_numa_memory_pages_bytes",
            "toposcope_numa_allocations_total",
        )
    )
    for node in nodes.node_ids():
        memory = nodes.node_memory(node)
        assert memory is not None
        for family, value in ((total, memory.total_bytes), (free, memory.free_bytes)):
            assert value is not None
            family.add_metric([str(node)], float(value))
        assert memory.used_bytes is not None
        used.add_metric([str(node)], float(memory.used_bytes))
        for page_type, value in sorted(memory.pages_bytes.items()):
            pages.add_metric([str(node), page_type], float(value))
        stat = nodes.node_numastat(node)
        assert stat is not None
        for result, count in sorted(stat.counts.items()):
            allocations.add_metric([str(node), result], float(count))
    return [total, free, used, pages, allocations]


def cpu_reference(root: Path, hz: int) -> list[Metric]:
    """The numa_cpu family of a first scrape (plain per-node sums) as a client_python family."""
    context = CollectorContext(ExporterConfig(paths=HostPaths.under(root)))
    cpu_node = context.topology.get().cpu_to_node()
    ticks = Procfs(root / "proc", hz=hz).cpu_ticks()
    assert ticks is not None
    sums: dict[int, list[int]] = {}
    for cpu, values in ticks.items():
        total = sums.setdefault(cpu_node[cpu], [0] * len(values))
        total[:] = [a + b for a, b in zip(total, values, strict=True)]
    family = spec("toposcope_numa_cpu_seconds_total").family()
    for node in sorted(sums):
        for mode, value in zip(CPU_MODES, sums[node], strict=False):
            family.add_metric([str(node), mode], value / hz)
    return [family]


def test_numa_memory_text_is_client_pythons(hwloc_root: Callable[[str], Path]) -> None:
    nodes = SysfsNodes(hwloc_root(FIXTURE) / "sys")
    collector = NumaMemoryCollector(nodes)
    families = list(collector.collect())
    assert families and all(isinstance(f, RenderedFamily) for f in families)
    expected = client_python_text(memory_reference(nodes))
    assert b"toposcope_numa_allocations_total{numa_node=" in expected
    assert render_families(families) == expected
    assert render_families(collector.collect()) == expected  # remembered prefixes, again


def test_numa_cpu_text_is_client_pythons(hwloc_root: Callable[[str], Path]) -> None:
    root = hwloc_root(FIXTURE)
    context = CollectorContext(ExporterConfig(paths=HostPaths.under(root)))
    collector = NumaCpuCollector(Procfs(root / "proc", hz=100), context.topology)
    expected = client_python_text(cpu_reference(root, 100))
    assert expected.count(b'mode="idle"') == 8
    assert render_families(collector.collect()) == expected
    # the second scrape folds the same reading column by column: the same text
    assert render_families(collector.collect()) == expected


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 999_999, 1_000_000, 10**7, 2**53 - 1, 2**53, 1e6, 999_999.5, -0.0])
)
def test_values_are_formatted_as_client_python_does(value: float) -> None:
    assert format_value(value) == go_float(value)  # client_python's floatToGoString


def test_remembered_prefixes_write_what_fresh_ones_do() -> None:
    row = spec("toposcope_numa_memory_pages_bytes")
    remembered = FamilyLayout(row, remember=True)
    labels = [("0", 'odd "type" \\ \n'), ("1", "anon"), ("0", 'odd "type" \\ \n')]
    for _ in range(2):
        fresh, again = FamilyLayout(row).writer(), remembered.writer()
        for index, pair in enumerate(labels):
            fresh.add_metric(pair, index * 1024)
            again.add_metric(list(pair), index * 1024)
        assert again.plain().data == fresh.plain().data
    assert b'type="odd \\"type\\" \\\\ \\n"' in fresh.plain().data


def test_remembered_prefixes_stay_bounded() -> None:
    layout = FamilyLayout(spec("toposcope_numa_memory_free_bytes"), remember=True)
    writer = layout.writer()
    for node in range(PREFIX_LIMIT + 10):
        writer.add_metric((str(node),), 1)
    assert len(layout._prefixes or {}) <= PREFIX_LIMIT
    text = writer.plain().data
    assert text.count(b"\n") == PREFIX_LIMIT + 10 + 2
    assert text.endswith(f'numa_node="{PREFIX_LIMIT + 9}"}} 1.0\n'.encode())


def test_an_empty_writer_is_false() -> None:
    writer = FamilyLayout(spec("toposcope_numa_memory_free_bytes"), remember=True).writer()
    assert not writer
    writer.add_metric(("0",), 0)
    assert writer


def test_joined_keeps_gzip_members_and_joins_the_rest() -> None:
    member = GzipMember.pack([b"packed\n"])
    chunks = joined([b"a\n", b"", b"b\n", member, b"c\n", b"d\n"])
    assert chunks == [b"a\nb\n", member, b"c\nd\n"]
    assert chunks[1] is member
    assert joined([]) == []
