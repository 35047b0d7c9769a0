"""Buddy cells over the fabric and where a multi-node job fits: Slurm's documented tree and
block examples, the hand-written rail-optimised unit, and free GPUs per node.
"""

from __future__ import annotations

import pytest

from tests.helpers import REPO
from toposcope.fabric.cellfit import CellError, choose, lowest_level_possible, node_ready_wait
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.fabric.ibnetdiscover import read_ibnetdiscover
from toposcope.fabric.slurmconf import read_topology_conf
from toposcope.fabric.yamlfile import read_fabric_file

FIXTURES = REPO / "tests" / "fixtures" / "fabric"


def tree_example() -> CellTree:
    """Slurm's tree example: leaves s0, s1, s2 of six nodes each (dev0-17) under spine s3."""
    return CellTree(read_topology_conf(FIXTURES / "slurm-tree.conf"))


def free_gpus(
    busy: dict[str, int], nodes: range = range(18), total: int = 8
) -> dict[str, NodeFree]:
    """Every dev node with ``total`` GPUs, ``busy[name]`` of them held."""
    result = {}
    for n in nodes:
        name = f"dev{n}"
        result[name] = NodeFree(name, total, total - busy.get(name, 0))
    return result


def test_the_tree_has_a_cell_per_leaf_and_spine_with_free_gpus_summed() -> None:
    tree = tree_example()
    assert tree.levels == ("node", "leaf", "spine", "fabric")
    leaves = {tree.cells[at].name: tree.cells[at].nodes for at in tree.cells_at(1)}
    assert sorted(leaves) == ["s0", "s1", "s2"]
    assert leaves["s1"] == tuple(f"dev{n}" for n in range(6, 12))
    assert [tree.cells[at].name for at in tree.cells_at(2)] == ["s3"]
    sums = tree.free_by_cell(free_gpus({"dev0": 8, "dev7": 3}))
    s0, s1 = tree.cell_of("dev0", 1), tree.cell_of("dev7", 1)
    assert s0 is not None and s1 is not None
    assert sums[s0] == (40, 48) and sums[s1] == (45, 48)
    spine = tree.cell_of("dev0", 2)
    assert spine is not None and sums[spine] == (18 * 8 - 11, 18 * 8)
    whole = tree.whole_cells(free_gpus({"dev0": 8, "dev7": 3}))
    assert tree.cell_of("dev12", 1) in whole and s0 not in whole and spine not in whole


def test_a_job_takes_the_tightest_leaf_and_keeps_the_whole_one_free() -> None:
    tree = tree_example()
    # s0: two nodes held (4 fit); s1: all free; s2: one node half held (5 fit)
    free = free_gpus({"dev0": 8, "dev1": 8, "dev12": 4})
    choice = choose(tree, free, nodes=4, gpus_per_node=8)
    assert choice is not None
    assert (choice.level_name, choice.cell) == ("leaf", "s0")
    assert choice.nodes == ("dev2", "dev3", "dev4", "dev5")
    assert choice.candidates == 3
    assert "s1" in choice.kept_whole and "s0" not in choice.broken
    # a 4-GPU job per node prefers the half-held node over breaking a whole one
    small = choose(tree, free, nodes=1, gpus_per_node=4)
    assert small is not None and small.nodes == ("dev12",) and small.broken_count == 0


def test_a_job_larger_than_any_leaf_spans_the_fewest_leaves_and_spares_the_whole_one() -> None:
    tree = tree_example()
    free = free_gpus({"dev0": 8, "dev1": 8, "dev12": 8})
    choice = choose(tree, free, nodes=8, gpus_per_node=8)
    assert choice is not None and choice.level_name == "spine" and choice.cell == "s3"
    leaves = {tree.cells[tree.cell_of(n, 1) or 0].name for n in choice.nodes}
    assert leaves == {"s0", "s2"}  # two leaves, as s1 + one other would be, but s1 stays whole
    assert choice.kept_whole[:1] == ("s1",) or "s1" in choice.kept_whole
    assert len(choice.nodes) == 8 and len(set(choice.nodes)) == 8
    # with s1 partly held too, the fewest leaves win over sparing: s1 (5) + s2 (5) is 2 leaves
    again = choose(tree, free_gpus({"dev0": 8, "dev1": 8, "dev2": 8, "dev6": 8}), 9, 8)
    assert again is not None
    assert len({tree.cell_of(n, 1) for n in again.nodes}) == 2


def test_nothing_fits_when_too_few_nodes_have_the_gpus() -> None:
    tree = tree_example()
    assert choose(tree, free_gpus({f"dev{n}": 1 for n in range(16)}), 3, 8) is None
    with pytest.raises(CellError, match="at least 1 node"):
        choose(tree, free_gpus({}), 0, 8)


def test_the_wait_for_a_tighter_cell_is_when_its_last_needed_node_frees() -> None:
    tree = tree_example()
    busy = {f"dev{n}": 8 for n in (0, 1, 6, 7, 8, 12, 13, 14)}
    free = free_gpus(busy)
    # no leaf has 5 free nodes: s0 has 4, s1 3, s2 3
    choice = choose(tree, free, nodes=5, gpus_per_node=8)
    assert choice is not None and choice.level_name == "spine"
    ready = {"dev0": 600.0, "dev1": 60.0, "dev6": 30.0, "dev7": 40.0, "dev12": 900.0}
    # s0 has 5 nodes once dev1 frees (60 s); s1 once dev6 and dev7 do (40 s): s1 is sooner
    assert node_ready_wait(tree, free, 1, 5, 8, ready) == ("s1", 40.0)
    # six nodes: s0 once dev0 frees too (600 s); s1 would need dev8, which never says when
    assert node_ready_wait(tree, free, 1, 6, 8, ready) == ("s0", 600.0)
    assert node_ready_wait(tree, free, 1, 7, 8, ready) is None
    assert lowest_level_possible(tree, free, 5, 8) == 1
    assert lowest_level_possible(tree, free, 7, 8) == 2
    assert lowest_level_possible(tree, free, 19, 8) is None


def test_a_rail_optimised_unit_is_one_cell_and_ranks_get_the_same_gpu_indices() -> None:
    tree = CellTree(read_fabric_file(FIXTURES / "fabric.yaml"))
    assert tree.rail_optimised
    assert [tree.cells[at].name for at in tree.cells_at(1)] == ["rail0-leaf+1"]
    free = {
        "gpu01": NodeFree("gpu01", 8, 4, (4, 5, 6, 7)),
        "gpu02": NodeFree("gpu02", 8, 6, (0, 1, 2, 3, 6, 7)),
        "gpu03": NodeFree("gpu03", 8, 4, (0, 1, 2, 3)),
        "gpu04": NodeFree("gpu04", 8, 5, (0, 1, 2, 3, 4)),
    }
    choice = choose(tree, free, nodes=3, gpus_per_node=4)
    assert choice is not None
    assert choice.gpu_indices == (0, 1, 2, 3) and choice.rail_aligned is True
    assert set(choice.nodes) == {"gpu02", "gpu03", "gpu04"}
    # without indices the choice is by counts alone and alignment is unknown
    counts = {name: NodeFree(name, s.total, s.free) for name, s in free.items()}
    plain = choose(tree, counts, nodes=3, gpus_per_node=4)
    assert plain is not None and plain.gpu_indices == () and plain.rail_aligned is None


def test_a_block_fabric_has_one_level_of_blocks() -> None:
    tree = CellTree(read_topology_conf(FIXTURES / "slurm-block.conf"))
    assert tree.levels == ("node", "block", "fabric")
    free = {f"node{n}": NodeFree(f"node{n}", 4, 0 if n <= 20 else 4) for n in range(1, 129)}
    choice = choose(tree, free, nodes=12, gpus_per_node=4)
    assert choice is not None and (choice.level_name, choice.cell) == ("block", "block1")
    wide = choose(tree, free, nodes=40, gpus_per_node=4)
    assert wide is not None and wide.level_name == "fabric" and wide.cell == "fabric"


def test_a_real_infiniband_dump_gives_leaf_cells_and_best_fit_takes_the_smallest() -> None:
    tree = CellTree(read_ibnetdiscover(FIXTURES / "ibnetdiscover-topograph.out"))
    assert tree.levels == ("node", "leaf", "spine", "fabric")
    sizes = sorted(len(tree.cells[at].nodes) for at in tree.cells_at(1))
    assert sizes == [2, 10, 11, 14, 15, 16, 17, 18, 18]
    free = {n: NodeFree(n, 8, 8) for n in tree.path}
    # every leaf is free: the smallest that holds 4 nodes (10 of them) is broken, 8 stay whole
    four = choose(tree, free, 4, 8)
    assert four is not None and four.level_name == "leaf" and four.cell == "A09-P1-IBLEAF-01-01+2"
    assert four.kept_whole_count == 8 and four.candidates == 8
    # 19 nodes fit under no leaf: the spine, over two leaves
    wide = choose(tree, free, 19, 8)
    assert wide is not None and wide.level_name == "spine"
    assert len({tree.cell_of(n, 1) for n in wide.nodes}) == 2
