"""Property-based fuzzing of every topology parser: only the documented error, in bounded time.

Each parser gets arbitrary text (and text shaped like its format, which reaches deeper) and
must either return a well-formed result or raise the one error type it documents:

=========================================  ==============================================
parser                                     documented outcome for bad input
=========================================  ==============================================
``parse_cpulist``, ``parse_cpumask``        :class:`~toposcope.cpulist.CpuSetError`
``bits_to_cpus``                            :class:`~toposcope.cpulist.CpuSetError`
``build_from_hwloc_xml``                    :class:`~toposcope.errors.ConfigError`
``build_from_nvidia_smi_topo``              :class:`~toposcope.errors.ConfigError`
``build_from_sysfs``                        :class:`~toposcope.errors.SourceError`
``parse_distance_row``                      ``ValueError``
``normalise_pci_bus_id``                    ``ValueError``
``parse_meminfo_lines``, ``parse_numastat``  never raise: bad lines are returned
``parse_proc_stat_cpus``                    never raises: bad lines are returned
=========================================  ==============================================

Inputs are kept small (a few hundred characters) so that the file runs in seconds; the
deadline of every example is far above what a linear parser needs on such input. The
pathological large inputs are in ``test_parser_bounds.py``.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toposcope.cpulist import (
    CPU_LIMIT,
    CpuSetError,
    bits_to_cpus,
    format_cpulist,
    parse_cpulist,
    parse_cpumask,
)
from toposcope.errors import ConfigError, SourceError
from toposcope.host.procfs import CPU_MODES, parse_proc_stat_cpus
from toposcope.host.sysfs import parse_numastat
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import MAX_NUMA_DISTANCE, Topology
from toposcope.topology.nvidia_smi import GPU_LIMIT, build_from_nvidia_smi_topo
from toposcope.topology.nvml import normalise_pci_bus_id
from toposcope.topology.sysfs import build_from_sysfs
from toposcope.topology.sysfs_files import parse_distance_row, parse_meminfo_lines

FUZZ = settings(
    max_examples=200,
    deadline=timedelta(seconds=5),
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
#: For parsers that read files: fewer examples, each writes a small tree.
FUZZ_FILES = settings(FUZZ, max_examples=60)

#: Numbers around every limit the parsers enforce, and far beyond.
EDGE_NUMBERS = st.sampled_from(
    [0, 1, 7, 31, 32, 63, 255, 256, 4095, CPU_LIMIT - 1, CPU_LIMIT, 4_000_000_000, 10**30]
)
NUMBERS = st.one_of(EDGE_NUMBERS, st.integers(min_value=0, max_value=2 * CPU_LIMIT))
JUNK = st.text(max_size=12)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory the file-reading fuzz tests rewrite for every example."""
    return tmp_path_factory.mktemp("parser-fuzz")


# ---------------------------------------------------------------------------- cpulist

CPULIST_ENTRY = st.one_of(
    NUMBERS.map(str),
    st.tuples(NUMBERS, NUMBERS).map(lambda p: f"{p[0]}-{p[1]}"),
    st.tuples(NUMBERS, NUMBERS, NUMBERS, NUMBERS).map(lambda p: f"{p[0]}-{p[1]}:{p[2]}/{p[3]}"),
    JUNK,
)
CPULIST_TEXT = st.one_of(
    st.lists(CPULIST_ENTRY, max_size=8).map(",".join),
    st.text(alphabet="0123456789-,:/ \n\x00x", max_size=80),
    st.text(max_size=80),
)


@FUZZ
@given(CPULIST_TEXT)
def test_cpulist_gives_bounded_cpus_or_cpuset_error(text: str) -> None:
    try:
        cpus = parse_cpulist(text)
    except CpuSetError as exc:
        assert str(exc) and len(str(exc)) < 400
        return
    assert list(cpus) == sorted(set(cpus))
    assert all(0 <= cpu < CPU_LIMIT for cpu in cpus)
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@FUZZ
@given(st.sets(st.integers(min_value=0, max_value=CPU_LIMIT - 1), max_size=64))
def test_cpulist_round_trips_every_valid_set(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))


# ---------------------------------------------------------------------------- cpumask

MASK_WORD = st.one_of(
    st.integers(min_value=0, max_value=2**32 - 1).map(lambda v: f"{v:08x}"),
    st.integers(min_value=0, max_value=2**32 - 1).map(lambda v: f"0x{v:x}"),
    st.text(alphabet="0123456789abcdefABCDEFxX-+_ ", max_size=10),
)
CPUMASK_TEXT = st.one_of(
    st.lists(MASK_WORD, min_size=1, max_size=12).map(",".join),
    st.text(alphabet="0123456789abcdefx,-\n\x00 ", max_size=120),
    st.text(max_size=60),
)


@FUZZ
@given(CPUMASK_TEXT)
def test_cpumask_gives_bounded_cpus_or_cpuset_error(text: str) -> None:
    try:
        cpus = parse_cpumask(text)
    except CpuSetError as exc:
        assert str(exc) and len(str(exc)) < 400
        return
    assert list(cpus) == sorted(set(cpus))
    assert all(0 <= cpu < CPU_LIMIT for cpu in cpus)


@FUZZ
@given(st.integers(min_value=0, max_value=2**2048 - 1))
def test_cpumask_words_agree_with_the_bits(value: int) -> None:
    hex_text = f"{value:x}"
    hex_text = hex_text.rjust(-(-len(hex_text) // 8) * 8, "0")
    words = ",".join(hex_text[i : i + 8] for i in range(0, len(hex_text), 8))
    expected = tuple(bit for bit in range(value.bit_length()) if value >> bit & 1)
    assert parse_cpumask(words) == expected
    assert bits_to_cpus(value) == expected


@FUZZ
@given(st.integers(min_value=-(2**80), max_value=2**80) | st.just(1 << CPU_LIMIT))
def test_bits_to_cpus_gives_the_set_bits_or_cpuset_error(value: int) -> None:
    try:
        cpus = bits_to_cpus(value)
    except CpuSetError:
        assert value < 0 or value.bit_length() > CPU_LIMIT
        return
    assert sum(1 << cpu for cpu in cpus) == value


# ---------------------------------------------------------------------------- hwloc XML

ATTRIBUTE_VALUE = st.one_of(
    NUMBERS.map(str),
    MASK_WORD,
    st.lists(MASK_WORD, min_size=1, max_size=3).map(",".join),
    st.sampled_from(["0xf...f,0x3", "-1", "inf", "nan", "0x", ""]),
    st.text(alphabet="0123456789abcdefx,.-", max_size=12),
)
OBJECT_TYPES = st.sampled_from(
    [
        "Machine",
        "Package",
        "Socket",
        "NUMANode",
        "MemCache",
        "Core",
        "PU",
        "Group",
        "Bridge",
        "PCIDev",
        "OSDev",
        "L3Cache",
        "",
    ]
)
LATENCY = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1", "2.1", "-1", "inf", "nan", "1e400", "x"]),
)


def _attributes(values: dict[str, str]) -> str:
    escaped = {
        k: v.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
        for k, v in values.items()
    }
    return "".join(f' {key}="{value}"' for key, value in escaped.items())


@st.composite
def _hwloc_object(draw: st.DrawFn, depth: int) -> str:
    keys = ["os_index", "cpuset", "online_cpuset", "nodeset", "local_memory", "subtype"]
    values = draw(st.dictionaries(st.sampled_from(keys), ATTRIBUTE_VALUE, max_size=4))
    object_type = draw(OBJECT_TYPES)
    if object_type:
        values["type"] = object_type
    if object_type == "PCIDev" and draw(st.booleans()):
        values["pci_busid"] = "0000:01:00.0"
        values["pci_type"] = draw(st.sampled_from(["0302 [10de:2330]", "garbage", ""]))
    children = draw(st.lists(_hwloc_object(depth - 1), max_size=3)) if depth > 0 else []
    distances = ""
    if draw(st.integers(min_value=0, max_value=5)) == 0:
        count = draw(st.integers(min_value=0, max_value=3))
        latencies = draw(st.lists(LATENCY, min_size=0, max_size=count * count + 1))
        distances = (
            f'<distances nbobjs="{count}" relative_depth="1" latency_base="{draw(LATENCY)}">'
            + "".join(f'<latency value="{v}"/>' for v in latencies)
            + "</distances>"
        )
    return f"<object{_attributes(values)}>{''.join(children)}{distances}</object>"


@st.composite
def _hwloc_document(draw: st.DrawFn) -> str:
    version = draw(st.sampled_from(["", ' version="2.0"', ' version="3.0"']))
    body = draw(_hwloc_object(3))
    if draw(st.booleans()):
        count = draw(st.integers(min_value=0, max_value=3))
        indexes = draw(st.lists(NUMBERS.map(str) | JUNK, max_size=count + 1))
        values = draw(st.lists(LATENCY | NUMBERS.map(str), max_size=count * count + 1))
        indexing = draw(st.sampled_from(["os", "gp"]))
        body += (
            f'<distances2 type="NUMANode" nbobjs="{count}" kind="5" indexing="{indexing}">'
            f"<indexes>{' '.join(indexes)}</indexes><u64values>{' '.join(values)}</u64values>"
            "</distances2>"
        )
    return f"<topology{version}>{body}</topology>"


def _check_topology(topology: Topology) -> None:
    """What every successful build must hold, whatever the input."""
    for node in topology.numa_nodes:
        assert all(0 <= cpu < CPU_LIMIT for cpu in node.cpus)
        assert all(0 <= d <= MAX_NUMA_DISTANCE for d in node.distances.values())
    topology.to_dict()
    topology.to_text()


@FUZZ_FILES
@given(_hwloc_document() | st.text(max_size=200).map(lambda t: f"<topology>{t}</topology>"))
def test_hwloc_xml_gives_a_topology_or_config_error(scratch: Path, document: str) -> None:
    path = scratch / "fuzz.xml"
    path.write_text(document, encoding="utf-8", errors="surrogatepass")
    try:
        topology = build_from_hwloc_xml(path)
    except ConfigError as exc:
        assert "fuzz.xml" in str(exc)
        return
    _check_topology(topology)


# ---------------------------------------------------------------------------- nvidia-smi

LINK_CELL = st.one_of(
    st.sampled_from(["X", "NV4", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "NV"]),
    st.text(alphabet="NVPIXSOC0123456789", min_size=1, max_size=5),
)
AFFINITY_CELL = st.one_of(
    st.sampled_from(["0-7", "N/A", "0", "0-1", "0-4000000000", "zero"]),
    CPULIST_TEXT.filter(lambda t: t.strip() != "" and not any(c.isspace() for c in t)),
)
COLUMN_NAME = st.one_of(
    st.integers(min_value=0, max_value=4).map(lambda i: f"GPU{i}"),
    st.sampled_from(["NIC0", "mlx5_0", f"GPU{GPU_LIMIT}", "GPU01", "GPU999999"]),
)


@st.composite
def _topo_text(draw: st.DrawFn) -> str:
    names = draw(st.lists(COLUMN_NAME, min_size=1, max_size=5, unique=True))
    if draw(st.booleans()):
        names[0] = "GPU0"
    affinity = draw(
        st.lists(st.sampled_from(["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]), unique=True)
    )
    symmetric = draw(st.booleans())
    cells = {}
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j:
                cells[a, b] = "X"
            elif symmetric and (b, a) in cells:
                cells[a, b] = cells[b, a]
            else:
                cells[a, b] = draw(LINK_CELL)
    lines = ["\t" + "\t".join(names + affinity)]
    for a in draw(st.permutations(names)):
        row = [cells[a, b] for b in names] + [draw(AFFINITY_CELL) for _ in affinity]
        if draw(st.integers(min_value=0, max_value=9)) == 0:
            row = row[: draw(st.integers(min_value=0, max_value=len(row)))]
        lines.append("\t".join([a, *row]))
    if draw(st.booleans()):
        lines += ["", "Legend:", "  X    = Self"]
    return "\n".join(lines) + "\n"


@FUZZ
@given(_topo_text() | st.text(max_size=200) | st.text(max_size=100).map(lambda t: "\tGPU0\n" + t))
def test_nvidia_smi_gives_a_topology_or_config_error(text: str) -> None:
    try:
        topology = build_from_nvidia_smi_topo(text, source="fuzz.txt")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.txt") and len(str(exc)) < 400
        return
    _check_topology(topology)
    gpus = [g.index for g in topology.gpus]
    assert all(0 <= index < GPU_LIMIT for index in gpus)
    links = {(link.gpu, link.peer_gpu): link.link for link in topology.gpu_links}
    assert len(links) == len(gpus) * (len(gpus) - 1)
    assert all(links[b, a] == label for (a, b), label in links.items())


# ---------------------------------------------------------------------------- sysfs, procfs

DISTANCE_TEXT = st.one_of(
    st.lists(NUMBERS.map(str) | LATENCY | JUNK, max_size=6).map(" ".join),
    st.text(max_size=60),
)


@FUZZ
@given(DISTANCE_TEXT)
def test_distance_row_gives_bounded_distances_or_value_error(text: str) -> None:
    try:
        row = parse_distance_row(text)
    except ValueError as exc:
        assert "NUMA distance" in str(exc) and len(str(exc)) < 400
        return
    assert all(0 <= d <= MAX_NUMA_DISTANCE for d in row)


MEMINFO_LINE = st.one_of(
    st.tuples(
        st.sampled_from(["", "Node 0 ", "Node 12 "]),
        st.sampled_from(["MemTotal", "HugePages_Total", "x(y)"]),
        NUMBERS | st.integers(),
        st.sampled_from(["", " kB", "kB", " MB"]),
    ).map(lambda p: f"{p[0]}{p[1]}: {p[2]}{p[3]}"),
    st.text(max_size=40),
)


@FUZZ
@given(st.lists(MEMINFO_LINE, max_size=8).map("\n".join))
def test_meminfo_lines_never_raise(text: str) -> None:
    values, bad = parse_meminfo_lines(text)
    assert all(isinstance(v, int) and v >= 0 for v in values.values())
    assert len(values) + len(bad) <= len([line for line in text.splitlines() if line.strip()])


NUMASTAT_LINE = st.one_of(
    st.tuples(st.sampled_from(["numa_hit", "other_node", "Numa"]), NUMBERS | st.integers()).map(
        lambda p: f"{p[0]} {p[1]}"
    ),
    st.text(max_size=40),
)


@FUZZ
@given(st.lists(NUMASTAT_LINE, max_size=8).map("\n".join))
def test_numastat_never_raises(text: str) -> None:
    values, _ = parse_numastat(text)
    assert all(isinstance(v, int) and v >= 0 for v in values.values())


STAT_LINE = st.one_of(
    st.tuples(
        NUMBERS | st.integers(),
        st.lists(NUMBERS.map(str) | st.integers().map(str) | JUNK, max_size=10),
    ).map(lambda p: f"cpu{p[0]} " + " ".join(p[1])),
    st.sampled_from(["cpu  1 2 3 4", "intr 1 2", "ctxt 5", "cpu0", "cpu٣ 1 2"]),
    st.text(max_size=40),
)


@FUZZ
@given(st.lists(STAT_LINE, max_size=8).map("\n".join), st.integers(min_value=1, max_value=1000))
def test_proc_stat_never_raises(text: str, hz: int) -> None:
    times, _ = parse_proc_stat_cpus(text, hz)
    for cpu, reading in times.items():
        assert 0 <= cpu < CPU_LIMIT and reading.cpu == cpu
        modes = dict(reading.modes())
        assert set(modes) <= set(CPU_MODES) and all(v >= 0 for v in modes.values())


@FUZZ
@given(
    st.text(alphabet="0123456789abcdefABCDEF:.x -", max_size=30)
    | st.binary(max_size=30)
    | st.text(max_size=30)
)
def test_pci_bus_id_normalises_or_raises_value_error(raw: str | bytes) -> None:
    try:
        bus_id = normalise_pci_bus_id(raw)
    except ValueError:
        return
    assert normalise_pci_bus_id(bus_id) == bus_id


@FUZZ_FILES
@given(
    online=CPULIST_TEXT,
    cpulist=CPULIST_TEXT,
    cpumap=CPUMASK_TEXT,
    distance=DISTANCE_TEXT,
    meminfo=st.lists(MEMINFO_LINE, max_size=4).map("\n".join),
)
def test_sysfs_tree_gives_a_topology_or_source_error(
    scratch: Path, online: str, cpulist: str, cpumap: str, distance: str, meminfo: str
) -> None:
    root = scratch / "sys"
    shutil.rmtree(root, ignore_errors=True)
    cpu = root / "devices" / "system" / "cpu"
    (cpu / "cpu0").mkdir(parents=True)
    (cpu / "online").write_text(online, encoding="utf-8", errors="surrogatepass")
    for n, (name, text) in enumerate((("cpulist", cpulist), ("cpumap", cpumap))):
        node = root / "devices" / "system" / "node" / f"node{n}"
        node.mkdir(parents=True)
        (node / name).write_text(text, encoding="utf-8", errors="surrogatepass")
        (node / "distance").write_text(distance, encoding="utf-8", errors="surrogatepass")
        (node / "meminfo").write_text(meminfo, encoding="utf-8", errors="surrogatepass")
    try:
        topology = build_from_sysfs(root)
    except SourceError as exc:
        assert str(root) in str(exc)
        return
    _check_topology(topology)
