"""Pathological inputs to the topology parsers: refused with a clear error, never a crash.

CPU sets, hwloc XML, ``nvidia-smi topo -m`` text and sysfs/procfs files come from people and
snapshots, not only from the kernel. Each case below is input that used to allocate without
bound, loop forever, overflow the interpreter's stack, raise an undocumented exception or be
silently accepted; each must now give the parser's documented error (or be skipped with a
warning where a daemon reads it) whose message names the problem and the limit.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO
from toposcope.cli import main
from toposcope.cpulist import (
    CPU_LIMIT,
    MAX_CPULIST_EXPANSION,
    CpuSetError,
    bits_to_cpus,
    parse_cpulist,
    parse_cpumask,
)
from toposcope.errors import ConfigError, SourceError
from toposcope.host.procfs import parse_proc_stat_cpus
from toposcope.host.sysfs import parse_numastat
from toposcope.topology.hwloc_document import MAX_OBJECT_DEPTH
from toposcope.topology.hwloc_xml import build_from_hwloc_xml
from toposcope.topology.model import MAX_NUMA_DISTANCE
from toposcope.topology.nvidia_smi import GPU_LIMIT, MAX_COLUMNS, build_from_nvidia_smi_topo
from toposcope.topology.sysfs import build_from_sysfs
from toposcope.topology.sysfs_files import parse_distance_row, parse_meminfo_lines

#: Longest error message any refusal below may print (one readable line).
MAX_MESSAGE = 400
#: Generous bound on parsing inputs that used to take minutes; the parsers need well under 1 s.
SLOW = 20.0

# ---------------------------------------------------------------------------- cpulist


@pytest.mark.parametrize(
    "text",
    [
        "0-4000000000",
        "4000000000",
        "65536",
        "0-65536",
        "65535-65536",
        "0-3,70000",
        "1" * 200_000,
        "0-" + "9" * 200_000,
    ],
)
def test_cpulist_refuses_cpus_beyond_the_limit_and_says_so(text: str) -> None:
    with pytest.raises(CpuSetError) as raised:
        parse_cpulist(text)
    message = str(raised.value)
    assert f"{CPU_LIMIT:,}" in message
    assert len(message) < MAX_MESSAGE


def test_cpulist_accepts_every_cpu_below_the_limit() -> None:
    assert parse_cpulist(str(CPU_LIMIT - 1)) == (CPU_LIMIT - 1,)
    assert parse_cpulist(f"0-{CPU_LIMIT - 1}") == tuple(range(CPU_LIMIT))


def test_cpulist_refuses_endless_overlapping_ranges() -> None:
    full = f"0-{CPU_LIMIT - 1}"
    repeats = MAX_CPULIST_EXPANSION // CPU_LIMIT
    assert len(parse_cpulist(",".join([full] * repeats))) == CPU_LIMIT
    with pytest.raises(CpuSetError, match="overlaps included"):
        parse_cpulist(",".join([full] * 100_000))


def test_cpulist_group_sizes_are_bounded_too() -> None:
    with pytest.raises(CpuSetError, match="group"):
        parse_cpulist("0-15:1/4000000000")


@pytest.mark.parametrize("text", ["٣", "1_0", "+1", "0-٣"])
def test_cpulist_takes_only_ascii_digits(text: str) -> None:
    with pytest.raises(CpuSetError, match="malformed cpulist"):
        parse_cpulist(text)


# ---------------------------------------------------------------------------- cpumask


def test_cpumask_with_a_negative_word_is_refused() -> None:
    # int("-1", 16) used to make the whole mask -1, and counting its bits never ended.
    with pytest.raises(CpuSetError, match="malformed cpumask word"):
        parse_cpumask("-1")
    with pytest.raises(CpuSetError, match="malformed cpumask word"):
        parse_cpumask("00000000,-0000001")


def test_cpumask_bits_beyond_the_limit_are_refused() -> None:
    words = CPU_LIMIT // 32
    at_limit = "1," + ",".join(["00000000"] * words)
    with pytest.raises(CpuSetError) as raised:
        parse_cpumask(at_limit)
    assert f"{CPU_LIMIT:,}" in str(raised.value) and len(str(raised.value)) < MAX_MESSAGE
    with pytest.raises(CpuSetError):
        parse_cpumask(",".join(["ffffffff"] * 3000))
    with pytest.raises(CpuSetError):
        parse_cpumask("f" * 200_000)


def test_cpumask_of_the_largest_machine_is_read() -> None:
    assert parse_cpumask("f" * (CPU_LIMIT // 4)) == tuple(range(CPU_LIMIT))
    assert parse_cpumask("8" + "0" * (CPU_LIMIT // 4 - 1)) == (CPU_LIMIT - 1,)
    zeros = ",".join(["00000000"] * 100_000)
    assert parse_cpumask(f"{zeros},00000001") == (0,)


def test_bits_to_cpus_refuses_negative_and_huge_values() -> None:
    with pytest.raises(CpuSetError, match="negative"):
        bits_to_cpus(-1)
    with pytest.raises(CpuSetError, match="65,536"):
        bits_to_cpus(1 << CPU_LIMIT)
    assert bits_to_cpus(1 << (CPU_LIMIT - 1)) == (CPU_LIMIT - 1,)


# ---------------------------------------------------------------------------- hwloc XML


def _nested(depth: int) -> str:
    return (
        '<topology><object type="Machine" os_index="0">'
        + '<object type="Group">' * (depth - 2)
        + '<object type="PU" os_index="0"/>'
        + "</object>" * (depth - 2)
        + "</object></topology>"
    )


def test_hwloc_xml_nested_deeper_than_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.xml"
    path.write_text(_nested(50_000), encoding="utf-8")
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_OBJECT_DEPTH} levels"):
        build_from_hwloc_xml(path)


def test_hwloc_xml_at_the_depth_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "limit.xml"
    path.write_text(_nested(MAX_OBJECT_DEPTH), encoding="utf-8")
    assert build_from_hwloc_xml(path).numa_nodes[0].cpus == (0,)
    path.write_text(_nested(MAX_OBJECT_DEPTH + 1), encoding="utf-8")
    with pytest.raises(ConfigError, match="nested deeper"):
        build_from_hwloc_xml(path)


V1_DISTANCES = """<topology><object type="Machine" os_index="0" cpuset="0x3">
<object type="NUMANode" os_index="0" cpuset="0x1"><object type="PU" os_index="0"/></object>
<object type="NUMANode" os_index="1" cpuset="0x2"><object type="PU" os_index="1"/></object>
<distances nbobjs="2" relative_depth="1" latency_base="{base}">
<latency value="1"/><latency value="{value}"/><latency value="{value}"/><latency value="1"/>
</distances></object></topology>"""

V2_DISTANCES = """<topology version="2.0"><object type="Machine" os_index="0" cpuset="0x3">
<object type="NUMANode" os_index="0" cpuset="0x1"/><object type="NUMANode" os_index="1"
cpuset="0x2"/><object type="PU" os_index="0" cpuset="0x1"/>
<object type="PU" os_index="1" cpuset="0x2"/></object>
<distances2 type="NUMANode" nbobjs="2" kind="5" indexing="os">
<indexes length="3">0 1</indexes><u64values length="9">10 {value} {value} 10</u64values>
</distances2></topology>"""


@pytest.mark.parametrize(
    ("base", "value"),
    [
        ("10", "inf"),
        ("10", "nan"),
        ("10", "-2.1"),
        ("nan", "2.1"),
        ("-10", "-2.1"),
        ("10", "1e300"),
    ],
)
def test_hwloc_v1_latencies_that_are_not_finite_or_negative_are_refused(
    tmp_path: Path, base: str, value: str
) -> None:
    path = tmp_path / "v1.xml"
    path.write_text(V1_DISTANCES.format(base=base, value=value), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"v1\.xml: distances has a bad latency value"):
        build_from_hwloc_xml(path)


def test_hwloc_v1_latencies_still_scale_by_their_base(tmp_path: Path) -> None:
    path = tmp_path / "v1.xml"
    path.write_text(V1_DISTANCES.format(base="10", value="2.1"), encoding="utf-8")
    assert build_from_hwloc_xml(path).numa_nodes[0].distances == {0: 10, 1: 21}


@pytest.mark.parametrize("value", ["-20", "inf", str(MAX_NUMA_DISTANCE + 1), "9" * 5000])
def test_hwloc_v2_distances_out_of_range_are_refused(tmp_path: Path, value: str) -> None:
    path = tmp_path / "v2.xml"
    path.write_text(V2_DISTANCES.format(value=value), encoding="utf-8")
    with pytest.raises(ConfigError, match="distances2 has a bad index or value") as raised:
        build_from_hwloc_xml(path)
    assert len(str(raised.value)) < MAX_MESSAGE + len(str(path))


def test_hwloc_huge_integer_attributes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.xml"
    path.write_text(
        f'<topology><object type="Machine" os_index="0x{"f" * 100_000}"/></topology>',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="os_index longer than"):
        build_from_hwloc_xml(path)


def test_hwloc_wide_document_is_read_in_bounded_time(tmp_path: Path) -> None:
    # Every PU used to rescan all the machine's children, and every PCI device all its PUs:
    # 40,000 PUs, 4,000 nodes and 4,000 devices took minutes.
    pus = 40_000
    nodes = devices = 4_000
    parts = ['<topology version="2.0"><object type="Machine">']
    parts += [f'<object type="NUMANode" os_index="{i}"/>' for i in range(nodes)]
    parts += [f'<object type="PU" os_index="{i}"/>' for i in range(pus)]
    parts += [
        f'<object type="PCIDev" pci_busid="0001:{i % 256:02x}:{i // 256:02x}.0" '
        'pci_type="0302 [10de:2330]"/>'
        for i in range(devices)
    ]
    parts.append("</object></topology>")
    path = tmp_path / "wide.xml"
    path.write_text("".join(parts), encoding="utf-8")
    started = time.monotonic()
    topology = build_from_hwloc_xml(path)
    assert time.monotonic() - started < SLOW
    assert len(topology.numa_nodes) == nodes and len(topology.gpus) == devices
    assert topology.numa_nodes[0].cpus == tuple(range(pus))


# ---------------------------------------------------------------------------- nvidia-smi

HEADER = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
GPU1 = "GPU1\tNV4\t X \t0-7\t0\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # asymmetric matrix: both lines are named
        (
            HEADER + "GPU0\t X \tNV4\t0-7\t0\nGPU1\tPIX\t X \t0-7\t0\n",
            "line 2: GPU0 to GPU1 is NV4, but line 3 says GPU1 to GPU0 is PIX",
        ),
        # absurd GPU numbers
        ("\tGPU0\tGPU999999\nGPU0\t X \tPIX\nGPU999999\tPIX\t X \n", "line 1: column 'GPU999999'"),
        (f"\tGPU0\tGPU{'9' * 5000}\n", "GPU numbers must be below"),
        ("\tGPU0\tGPU01\nGPU0\t X \tPIX\nGPU01\tPIX\t X \n", "'GPU01' has a leading zero"),
        # unknown link labels, in GPU and in NIC rows
        ("\tGPU0\tGPU1\nGPU0\t X \tNVfoo\nGPU1\tNVfoo\t X \n", "line 2: unknown link type 'NVfoo'"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV\nGPU1\tNV\t X \n", "line 2: unknown link type 'NV'"),
        (
            "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tWIRE\t X \n",
            "line 3: unknown link type 'WIRE'",
        ),
        # ragged rows
        (HEADER + "GPU0\t X \tNV4\t0-7\t0\textra\n", "line 2: row GPU0 has 5 cells, expected 4"),
        # affinities beyond the CPU limit
        (HEADER + "GPU0\t X \tNV4\t0-4000000000\t0\n" + GPU1, "line 2: CPU Affinity: range end"),
        (HEADER + "GPU0\t X \tNV4\t0-7\t99999999\n" + GPU1, "line 2: NUMA Affinity '99999999'"),
    ],
)
def test_nvidia_smi_refuses_bad_matrices_with_the_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        build_from_nvidia_smi_topo(text, source="topo.txt")
    assert message in str(raised.value)
    assert len(str(raised.value)) < MAX_MESSAGE


def test_nvidia_smi_refuses_too_many_columns() -> None:
    names = ["GPU0", *(f"NIC{i}" for i in range(MAX_COLUMNS))]
    with pytest.raises(ConfigError, match=f"more than {MAX_COLUMNS}"):
        build_from_nvidia_smi_topo("\t" + "\t".join(names) + "\n", source="topo.txt")


def test_nvidia_smi_accepts_the_highest_gpu_number() -> None:
    last = f"GPU{GPU_LIMIT - 1}"
    text = f"\tGPU0\t{last}\nGPU0\t X \tSYS\n{last}\tSYS\t X \n"
    topology = build_from_nvidia_smi_topo(text)
    assert [g.index for g in topology.gpus] == [0, GPU_LIMIT - 1]


# ---------------------------------------------------------------------------- sysfs, procfs


@pytest.mark.parametrize(
    "text",
    ["10 inf", "10 nan", "10 -21", "10 1e3", f"10 {MAX_NUMA_DISTANCE + 1}", "10 " + "9" * 5000],
)
def test_distance_rows_refuse_non_finite_negative_and_absurd_values(text: str) -> None:
    with pytest.raises(ValueError, match="NUMA distance") as raised:
        parse_distance_row(text)
    assert len(str(raised.value)) < MAX_MESSAGE


def test_distance_row_of_a_real_machine() -> None:
    assert parse_distance_row("10 21 31 21\n\x00") == (10, 21, 31, 21)


def _sysfs_tree(
    root: Path, online: str = "0-1", distance: str = "10 21", meminfo: str = ""
) -> Path:
    """A two-node, two-CPU sysfs tree whose files hold the given text."""
    sysfs = root / "sys"
    cpu = sysfs / "devices" / "system" / "cpu"
    for n in range(2):
        (cpu / f"cpu{n}").mkdir(parents=True)
        node = sysfs / "devices" / "system" / "node" / f"node{n}"
        node.mkdir(parents=True)
        (node / "cpulist").write_text(f"{n}\n", encoding="ascii")
        (node / "distance").write_text(distance if n == 0 else "21 10", encoding="ascii")
        (node / "meminfo").write_text(
            meminfo or f"Node {n} MemTotal:       1024 kB\n", encoding="ascii"
        )
    (cpu / "online").write_text(online + "\n", encoding="ascii")
    (root / "proc").mkdir()
    return sysfs


@pytest.mark.parametrize("distance", ["10 inf", "10 -21", "10 " + "9" * 30])
def test_sysfs_bad_distance_rows_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, distance: str
) -> None:
    sysfs = _sysfs_tree(tmp_path, distance=distance)
    with caplog.at_level(logging.WARNING, logger="toposcope.topology.sysfs"):
        topology = build_from_sysfs(sysfs)
    assert [dict(n.distances) for n in topology.numa_nodes] == [{}, {0: 21, 1: 10}]
    assert any("malformed NUMA distance file" in r.getMessage() for r in caplog.records)


def test_sysfs_huge_meminfo_numbers_are_skipped_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    huge = f"Node 0 MemTotal: {'9' * 5000} kB\n"
    values, bad = parse_meminfo_lines(huge + "Node 0 MemFree: 10 kB\n")
    assert values == {"MemFree": 10 * 1024} and bad == [huge.strip()]
    sysfs = _sysfs_tree(tmp_path, meminfo=huge)
    with caplog.at_level(logging.WARNING, logger="toposcope.topology.sysfs"):
        topology = build_from_sysfs(sysfs)
    assert [n.memory_bytes for n in topology.numa_nodes] == [0, 0]


def test_sysfs_online_cpus_beyond_the_limit_are_a_source_error(tmp_path: Path) -> None:
    sysfs = _sysfs_tree(tmp_path, online="0-4000000000")
    with pytest.raises(SourceError, match=r"malformed cpulist in .*online") as raised:
        build_from_sysfs(sysfs)
    assert f"{CPU_LIMIT:,}" in str(raised.value.__cause__)


def test_numastat_and_proc_stat_lines_with_huge_or_negative_numbers_are_bad_lines() -> None:
    values, bad = parse_numastat(f"numa_hit {'9' * 5000}\nnuma_miss 3\n")
    assert values == {"numa_miss": 3} and len(bad) == 1
    text = f"cpu{'9' * 5000} 1 2 3 4\ncpu1 -5 1 2 3\ncpu{CPU_LIMIT} 1 2 3 4\ncpu2 1 2 3 4\n"
    times, bad = parse_proc_stat_cpus(text, 100)
    assert list(times) == [2] and len(bad) == 3


# ---------------------------------------------------------------------------- the CLI


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["topology", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("toposcope topology: error: "), captured.err
    return lines[0]


def test_cli_deep_hwloc_xml_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "deep.xml"
    path.write_text(_nested(10_000), encoding="utf-8")
    line = _one_line_error(capsys, ["--hwloc-xml", str(path)])
    assert "deep.xml" in line and f"nested deeper than {MAX_OBJECT_DEPTH} levels" in line


def test_cli_infinite_hwloc_latency_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "inf.xml"
    path.write_text(V1_DISTANCES.format(base="10", value="inf"), encoding="utf-8")
    line = _one_line_error(capsys, ["--hwloc-xml", str(path)])
    assert "inf.xml: distances has a bad latency value" in line


def test_cli_asymmetric_nvidia_smi_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "topo.txt"
    path.write_text(HEADER + "GPU0\t X \tNV4\t0-7\t0\nGPU1\tSYS\t X \t0-7\t0\n", encoding="utf-8")
    line = _one_line_error(capsys, ["--nvidia-smi-topo", str(path)])
    assert "topo.txt line 2: GPU0 to GPU1 is NV4, but line 3" in line


def test_cli_absurd_gpu_number_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "topo.txt"
    path.write_text("\tGPU0\tGPU999999\n", encoding="utf-8")
    line = _one_line_error(capsys, ["--nvidia-smi-topo", str(path)])
    assert f"topo.txt line 1: column 'GPU999999': GPU numbers must be below {GPU_LIMIT}" in line


def test_cli_sysfs_cpu_beyond_the_limit_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sysfs = _sysfs_tree(tmp_path, online="0-4000000000")
    argv = ["--path.sysfs", str(sysfs), "--path.procfs", str(tmp_path / "proc")]
    line = _one_line_error(capsys, argv)
    assert "online" in line and f"CPU numbers must be below {CPU_LIMIT:,}" in line


def test_cli_sysfs_bad_distance_still_prints_the_topology(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    sysfs = _sysfs_tree(tmp_path, distance="10 nan")
    argv = ["--path.sysfs", str(sysfs), "--path.procfs", str(tmp_path / "proc")]
    with caplog.at_level(logging.WARNING):
        assert main(["topology", *argv, "--format", "json"]) == 0
    assert '"distances": []' in capsys.readouterr().out
    assert any("distance" in r.getMessage() and "nan" in r.getMessage() for r in caplog.records)


def test_cli_undecodable_stdin_exits_2() -> None:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    done = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "topology", "--nvidia-smi-topo", "-"],
        input=b"\tGPU0\xff\n",
        capture_output=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.startswith("toposcope topology: error: standard input is not utf-8 text")
    assert "Traceback" not in err
