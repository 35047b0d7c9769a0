"""Slurm's topology.conf: the documented examples, each malformed line named by file:line,
and the round trip through the writer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO
from toposcope.errors import ConfigError
from toposcope.fabric.model import FabricError
from toposcope.fabric.slurmconf import (
    parse_topology_conf,
    read_topology_conf,
    write_topology_conf,
)

FIXTURES = REPO / "tests" / "fixtures" / "fabric"


def test_the_documented_tree_example() -> None:
    fabric = read_topology_conf(FIXTURES / "slurm-tree.conf")
    assert [(s.name, s.level) for s in fabric.switches] == [
        ("s0", 0),
        ("s1", 0),
        ("s2", 0),
        ("s3", 1),
    ]
    assert fabric.switch("s3").switches == ("s0", "s1", "s2")
    assert fabric.switch("s1").nodes == tuple(f"dev{n}" for n in range(6, 12))
    assert len(fabric.nodes) == 18


def test_the_documented_block_example() -> None:
    fabric = read_topology_conf(FIXTURES / "slurm-block.conf")
    assert [b.name for b in fabric.blocks] == ["block1", "block2", "block3", "block4"]
    assert fabric.blocks[3].nodes[0] == "node97"
    assert fabric.block_sizes == (30, 120)


@pytest.mark.parametrize("name", ["slurm-tree.conf", "slurm-block.conf"])
def test_written_back_it_reads_as_the_same_model(name: str) -> None:
    fabric = read_topology_conf(FIXTURES / name)
    text = write_topology_conf(fabric, note="written back")
    assert text.startswith("# written back\n")
    assert parse_topology_conf(text) == fabric


def test_keys_in_any_case_comments_and_continued_lines() -> None:
    text = (
        "# a comment\n"
        "switchname=leaf1 NODES=gpu[01-02] linkspeed=100 # trailing comment\n"
        "SwitchName=top \\\n"
        "   Switches=leaf1\n"
    )
    fabric = parse_topology_conf(text)
    assert fabric.switch("leaf1").link_speed == 100
    assert fabric.switch("top").switches == ("leaf1",)
    assert fabric.switch("top").level == 1


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n", 2, "declared again (first on line 1)"),
        ("SwitchName=a Nodes=n[1-\n", 1, "Nodes"),
        ("SwitchName=a Nodes=n1 Switches=b\n", 1, "both"),
        ("\n\nSwitchName=a Switches=ghost\n", 3, "not declared"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", 2, "cycle"),
        ("SwitchName=a Nodes=n1 Colour=red\n", 1, "colour does not belong"),
        ("SwitchName=a Nodes=n1 nodes=n2\n", 1, "twice"),
        ("Nodes=n1\n", 1, "starts with SwitchName="),
        ("RingName=r Nodes=n[1-4]\n", 1, "topology/ring"),
        ("SwitchName=a LinkSpeed=fast\n", 1, "LinkSpeed"),
        ("SwitchName=a Nodes=n1 junk\n", 1, "not Key=Value"),
        ("BlockName=b1 Nodes=n[1-4]\nBlockSizes=4,12\n", 2, "power of two"),
        ("BlockName=b1 Nodes=n[1-2]\nBlockSizes=4\n", 1, "fewer than the base block size"),
        ("BlockSizes=4\nBlockSizes=8\n", 2, "again"),
        ("BlockSizes=4,x\n", 1, "not numbers"),
        ("BlockName=b1 Nodes=n1\nBlockName=b2 Nodes=n1\n", 2, "in block b1 already"),
        ("SwitchName=bad/name Nodes=n1\n", 1, "is not"),
        ("SwitchName=odd\\#name Nodes=n1\n", 1, "'odd#name' is not"),
    ],
)
def test_each_malformed_line_is_named(text: str, line: int, words: str) -> None:
    with pytest.raises(FabricError) as refused:
        parse_topology_conf(text, "topo.conf")
    assert str(refused.value).startswith(f"topo.conf:{line}: "), refused.value
    assert words in str(refused.value)


def test_an_unreadable_or_huge_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        read_topology_conf(tmp_path / "missing.conf")
    big = tmp_path / "big.conf"
    big.write_bytes(b"#" * (16 << 20) + b"\n")
    with pytest.raises(ConfigError, match="over"):
        read_topology_conf(big)
