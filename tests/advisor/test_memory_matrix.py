"""``--memory-bandwidth NODE=FILE``: measured memory bandwidth files read strictly and
attached to the nodes they were measured on.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, pcie4
from toposcope.advisor.memory_matrix import (
    MAX_BYTES,
    MemoryMatrixError,
    MemoryOption,
    parse_memory_options,
    read_memory_file,
    with_measured_memory,
)
from toposcope.errors import UsageError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "memory-bandwidth"


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "memory.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_pair_lines_give_a_cores_bandwidth_and_the_remote_costs() -> None:
    matrix = read_memory_file(FIXTURES / "stream-pairs-2s.txt")
    assert matrix.per_core
    assert matrix.core_gbps(0) == 9.6
    assert matrix.remote_cost(0, 1) == pytest.approx(9.6 / 6.0 - 1)
    assert matrix.remote_cost(1, 0) == pytest.approx(9.5 / 6.1 - 1)
    assert matrix.remote_cost(1, 1) == 0.0
    assert matrix.pairs[(0, 1)].origin.endswith("stream-pairs-2s.txt:3")


def test_an_mlc_matrix_gives_remote_costs_but_not_a_cores_bandwidth() -> None:
    matrix = read_memory_file(FIXTURES / "mlc-bandwidth-matrix-2s.txt")
    assert not matrix.per_core
    assert matrix.pairs[(0, 0)].gbps == pytest.approx(92.3405)
    assert matrix.remote_cost(0, 1) == pytest.approx(92340.5 / 50812.3 - 1)
    assert matrix.core_gbps(0) is None
    assert matrix.nodes() == {0, 1}


def test_a_pair_not_measured_has_no_cost() -> None:
    matrix = read_memory_file(FIXTURES / "stream-pairs-2s.txt")
    assert matrix.remote_cost(0, 2) is None
    assert matrix.remote_cost(2, 0) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0 0 9\n0 1 5\n0 1 5\n", ":3: node 0 to node 1 again"),
        ("0 1 5\n", "node 0 has remote figures but no local one"),
        ("0 0 9\n0 1 fast\n", ":2: 'fast' is not a bandwidth"),
        ("0 0 9\n0 1 0\n", ":2: '0' is not a bandwidth above 0"),
        ("0 0 9\n0 1 -3\n", "is not a bandwidth above 0"),
        ("0 0 nan\n", "is not a bandwidth above 0"),
        ("0 0 9\n0 x 5\n", ":2: 'x' is not a NUMA node id"),
        ("0 0 9\n0 1024 5\n", "'1024' is not a NUMA node id"),
        ("0 0 9 1\n", "not a pair line (CPU_NODE MEMORY_NODE GBPS)"),
        ("Numa node 0 1\n0 9000 5000\n1 5000\n", ":3: node 1's row has 1 figure(s) for 2"),
        ("Numa node 0 1\n0 9000 5000\n\nNuma node 0 1\n", ":4: a second matrix"),
        ("Measuring idle latencies for random access (in ns)...\n", "a latency figure"),
        ("# nothing\n", "no pair of NUMA nodes with a figure"),
    ],
)
def test_a_malformed_file_is_refused_naming_the_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(MemoryMatrixError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_memory_file(written(tmp_path, text))


def test_a_missing_directory_or_oversized_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MemoryMatrixError, match="not a file"):
        read_memory_file(tmp_path)
    big = tmp_path / "big.txt"
    big.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(MemoryMatrixError, match="over"):
        read_memory_file(big)


def test_options_take_a_node_glob_and_refuse_a_bad_one() -> None:
    [option] = parse_memory_options([f"gpu-*={FIXTURES / 'stream-pairs-2s.txt'}"])
    assert option.glob == "gpu-*"
    with pytest.raises(UsageError, match="is not NODE=FILE"):
        parse_memory_options(["gpu-1"])
    with pytest.raises(UsageError, match="is not a node name or glob"):
        parse_memory_options([f"a/b={FIXTURES / 'stream-pairs-2s.txt'}"])


def test_the_first_matching_option_attaches_to_each_node_and_an_unused_one_is_noted() -> None:
    pairs = read_memory_file(FIXTURES / "stream-pairs-2s.txt")
    mlc = read_memory_file(FIXTURES / "mlc-bandwidth-matrix-2s.txt")
    model = cluster([pcie4("a1"), pcie4("b1")], [])
    options = [MemoryOption("a*", pairs), MemoryOption("*", mlc), MemoryOption("c*", mlc)]
    measured = with_measured_memory(model, options)
    assert measured.nodes["a1"].measured_memory is pairs
    assert measured.nodes["b1"].measured_memory is mlc
    assert [n for n in measured.notes if "--memory-bandwidth c*=" in n]
    assert with_measured_memory(model, []) is model


def test_a_file_naming_a_numa_node_the_machine_lacks_is_an_error(tmp_path: Path) -> None:
    far = read_memory_file(written(tmp_path, "0 0 9\n0 3 5\n"))
    with pytest.raises(UsageError, match="node n1 has no NUMA node 3"):
        with_measured_memory(cluster([pcie4()], []), [MemoryOption("n1", far)])


def test_a_node_of_one_numa_node_is_left_alone() -> None:
    node = pcie4()
    single = replace(node, numa_nodes=node.numa_nodes[:1])
    pairs = read_memory_file(FIXTURES / "stream-pairs-2s.txt")
    model = with_measured_memory(cluster([single], []), [MemoryOption("*", pairs)])
    assert model.nodes["n1"].measured_memory is None
