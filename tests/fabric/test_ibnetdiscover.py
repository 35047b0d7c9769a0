"""ibnetdiscover output: a real dump, and each malformed line named by file:line."""

from __future__ import annotations

import pytest

from tests.helpers import REPO
from toposcope.fabric.ibnetdiscover import link_gbps, parse_ibnetdiscover, read_ibnetdiscover
from toposcope.fabric.model import FabricError

DUMP = REPO / "tests" / "fixtures" / "fabric" / "ibnetdiscover-topograph.out"

SMALL = """\
# a hand-written fabric in ibnetdiscover's format
vendid=0x2c9
switchguid=0x10(10)
Switch\t4 "S-10"\t\t# "MF0;spine-1:MQM9700/U1" enhanced port 0 lid 1 lmc 0
[1]\t"S-20"[3]\t\t# "MF0;leaf-1:MQM9700/U1" lid 2 4xNDR

vendid=0x2c9
switchguid=0x20(20)
Switch\t4 "S-20"\t\t# "MF0;leaf-1:MQM9700/U1" enhanced port 0 lid 2 lmc 0
[1]\t"H-a1"[1](a1) \t\t# "gpu01 mlx5_0" lid 10 4xNDR
[2]\t"H-b1"[1](b1) \t\t# "gpu02 mlx5_0" lid 11 4xHDR
[3]\t"S-10"[1]\t\t# "MF0;spine-1:MQM9700/U1" lid 1 4xNDR

caguid=0xa1
Ca\t1 "H-a1"\t\t# "gpu01 mlx5_0"
[1](a1) \t"S-20"[1]\t\t# lid 10 lmc 0 "MF0;leaf-1:MQM9700/U1" lid 2 4xNDR

caguid=0xb1
Ca\t1 "H-b1"\t\t# "gpu02 mlx5_0"
[1](b1) \t"S-20"[2]\t\t# lid 11 lmc 0 "MF0;leaf-1:MQM9700/U1" lid 2 4xHDR
"""


def test_the_published_dump_reads_as_a_two_level_fat_tree() -> None:
    fabric = read_ibnetdiscover(DUMP)
    levels = {s.level for s in fabric.switches}
    assert levels == {0, 1}
    spines = [s for s in fabric.switches if s.level == 1]
    assert len(spines) == 9 and len(fabric.switches) == 40
    leaf = fabric.switch("A09-P1-IBLEAF-04-04")
    assert leaf.nodes[0] == "a08-p1-dgx-04-c01" and len(leaf.nodes) == 17
    # 17 hosts and a SHARP aggregation node down, 16 spine links up, all 4xNDR (400 Gb/s)
    assert leaf.downlink_gbps == 18 * 400 and leaf.uplink_gbps == 16 * 400
    node = next(n for n in fabric.nodes if n.name == "a05-p1-dgx-01-c01")
    assert {(p.nic, p.switch) for p in node.ports} >= {("HCA-1", "A09-P1-IBLEAF-01-01")}
    # firmware-default descriptions and "localhost" name no host
    assert not any(n.name in {"MT4129", "localhost"} for n in fabric.nodes)


def test_a_small_fabric_levels_names_and_rates() -> None:
    fabric = parse_ibnetdiscover(SMALL)
    assert [(s.name, s.level) for s in fabric.switches] == [("spine-1", 1), ("leaf-1", 0)]
    leaf = fabric.switch("leaf-1")
    assert leaf.nodes == ("gpu01", "gpu02")
    assert (leaf.uplink_gbps, leaf.downlink_gbps) == (400.0, 600.0)
    assert leaf.oversubscription == 1.5
    assert fabric.switch("spine-1").uplink_gbps is None
    assert fabric.rails() == {"mlx5_0": ("leaf-1",)}
    assert link_gbps("lid 3 4xNDR") == 400.0 and link_gbps("lid 3") is None


@pytest.mark.parametrize(
    ("broken", "line", "words"),
    [
        (SMALL.replace('[2]\t"H-b1"', "[2]\tH-b1"), 11, "not an ibnetdiscover line"),
        ('[1]\t"S-10"[1]\n', 1, "before any Switch"),
        (SMALL + 'Ca\t1 "H-a1"\t\t# "gpu01 mlx5_0"\n', 21, "declared again (first on line 15)"),
        (SMALL.replace("[2]\t", "[1]\t", 1), 11, "listed twice"),
        (SMALL.replace('"H-b1"[1](b1)', '"H-ff"[1](ff)'), 11, "never declared"),
        (SMALL.replace("Switch\t4", "Switch\t0", 1), 4, "ports"),
    ],
)
def test_each_malformed_line_is_named(broken: str, line: int, words: str) -> None:
    with pytest.raises(FabricError) as refused:
        parse_ibnetdiscover(broken, "ib.out")
    assert str(refused.value).startswith(f"ib.out:{line}: "), refused.value
    assert words in str(refused.value)


def test_a_rule_of_the_model_is_named_at_the_line_of_what_broke_it() -> None:
    two_nics = SMALL.replace('"gpu02 mlx5_0"', '"gpu01 mlx5_0"')
    with pytest.raises(FabricError) as refused:
        parse_ibnetdiscover(two_nics, "ib.out")
    assert str(refused.value).startswith("ib.out:15: node gpu01: NIC mlx5_0 is listed twice")
