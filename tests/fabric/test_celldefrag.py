"""Clearing a cell for a multi-node job: the fewest moves of movable jobs, each to the tightest
node outside the cell with room, on Slurm's documented tree (leaves s0, s1, s2 of six nodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tests.helpers import REPO
from toposcope.fabric.celldefrag import Move, Occupant, clear_cell
from toposcope.fabric.cells import CellTree, NodeFree
from toposcope.fabric.slurmconf import read_topology_conf

TREE = CellTree(read_topology_conf(REPO / "tests" / "fixtures" / "fabric" / "slurm-tree.conf"))


def state(held: dict[str, list[Occupant]]) -> tuple[dict[str, NodeFree], dict[str, list[Occupant]]]:
    """dev0-17 with 8 GPUs; ``held`` nodes carry those jobs."""
    free = {}
    for n in range(18):
        name = f"dev{n}"
        used = sum(o.gpus for o in held.get(name, ()))
        free[name] = NodeFree(name, 8, 8 - used)
    return free, held


def test_the_cell_with_the_fewest_moves_is_cleared_onto_the_tightest_room() -> None:
    free, held = state(
        {
            "dev0": [Occupant("a", 4, True), Occupant("b", 2, True)],  # two moves
            "dev6": [Occupant("c", 6, True)],  # one move
            "dev12": [Occupant("d", 8, False)],  # cannot move
            "dev13": [Occupant("e", 2, True)],  # half the node: 6 free, room for c
        }
    )
    clearing = clear_cell(TREE, free, held, level=1, nodes=6, gpus_per_node=8)
    assert clearing is not None and clearing.cell == "s1"
    assert clearing.moves == (Move("c", "dev6", "dev13", 6),)
    assert set(clearing.nodes) == {f"dev{n}" for n in range(6, 12)}
    # with 4 GPUs a node, dev0 needs only its larger job moved: s0 and s1 tie at one move
    four = clear_cell(TREE, free, held, level=1, nodes=6, gpus_per_node=4)
    assert four is not None and four.cell == "s0" and [m.job for m in four.moves] == ["a"]


def test_no_cell_when_the_blockers_cannot_move_or_find_no_room() -> None:
    free, held = state({f"dev{n}": [Occupant(f"j{n}", 8, n % 6 != 0)] for n in range(18)})
    # every node is full: the moved jobs find no room outside the cell
    assert clear_cell(TREE, free, held, level=1, nodes=6, gpus_per_node=8) is None
    free, held = state({"dev0": [Occupant("x", 8, False)], "dev6": [Occupant("y", 8, False)],
                        "dev12": [Occupant("z", 8, False)]})  # fmt: skip
    assert clear_cell(TREE, free, held, level=1, nodes=6, gpus_per_node=8) is None


def with_indices(free: dict[str, NodeFree]) -> dict[str, NodeFree]:
    """``free`` with each node's free GPUs as its highest indices."""
    return {
        n: replace(s, free_indices=tuple(range(s.total - s.free, s.total))) for n, s in free.items()
    }


def test_each_move_names_the_gpus_it_takes_and_a_slower_place_is_no_room() -> None:
    free, held = state({"dev0": [Occupant("a", 2, True, (6, 7))]})
    free = with_indices(free)
    free["dev12"] = NodeFree("dev12", 8, 2, (0, 1))  # the tightest room: 2 free GPUs
    clearing = clear_cell(TREE, free, held, level=1, nodes=6, gpus_per_node=8)
    # own indices 6,7 are not free on dev12: the lowest free ones instead
    assert clearing is not None and clearing.moves == (Move("a", "dev0", "dev12", 2, (0, 1)),)

    def not_dev12(job: Occupant, src: str, dst: str, room: Sequence[int]) -> tuple[int, ...] | None:
        return None if dst == "dev12" else tuple(room[: job.gpus])

    other = clear_cell(TREE, free, held, level=1, nodes=6, gpus_per_node=8, fit=not_dev12)
    assert other is not None and other.moves[0].to_node == "dev10"  # by name among equals
    assert other.moves[0].to_gpus == (0, 1)
    # without free indices the move names none
    plain, held = state({"dev0": [Occupant("a", 2, True, (6, 7))]})
    counted = clear_cell(TREE, plain, held, level=1, nodes=6, gpus_per_node=8)
    assert counted is not None and counted.moves[0].to_gpus == ()
