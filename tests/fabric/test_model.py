"""The fabric model: every rule is checked on construction, and says what it is about."""

from __future__ import annotations

import pytest

from toposcope.fabric.model import (
    MAX_LEVELS,
    Block,
    Fabric,
    FabricError,
    Node,
    Port,
    Switch,
    assemble,
    levels_from_children,
)

LEAVES = (Switch("leaf1", 0, nodes=("n1", "n2")), Switch("leaf2", 0, nodes=("n3",)))


def test_a_two_level_tree_with_ports_blocks_and_oversubscription() -> None:
    fabric = assemble(
        [*LEAVES, Switch("spine", 1, switches=("leaf1", "leaf2"))],
        [Block("b1", ("n1", "n2"))],
        [Node("n1", (Port("mlx5_0", "leaf1", 400.0),))],
        block_sizes=(2, 8),
    )
    assert [n.name for n in fabric.nodes] == ["n1", "n2", "n3"]
    assert [s.name for s in fabric.roots] == ["spine"]
    assert fabric.rails() == {"mlx5_0": ("leaf1",)}
    assert Switch("x", uplink_gbps=800, downlink_gbps=1600).oversubscription == 2.0
    assert Switch("x", downlink_gbps=1600).oversubscription is None


@pytest.mark.parametrize(
    ("build", "kind", "name", "words"),
    [
        (lambda: assemble([Switch("bad name")]), "switch", "bad name", "is not"),
        (lambda: assemble([Switch("a"), Switch("a")]), "switch", "a", "declared twice"),
        (
            lambda: assemble([Switch("s", 1, switches=("ghost",))]),
            "switch",
            "s",
            "not declared",
        ),
        (
            lambda: assemble([Switch("a", 0), Switch("b", 0, switches=("a",))]),
            "switch",
            "b",
            "lower level",
        ),
        (lambda: assemble([Switch("a", MAX_LEVELS)]), "switch", "a", "level"),
        (
            lambda: assemble([Switch("a", 1, switches=("b",), nodes=("n",)), Switch("b")]),
            "switch",
            "a",
            "both",
        ),
        (lambda: assemble([Switch("l", nodes=("n_1",))]), "node", "n_1", "is not"),
        (
            lambda: assemble([*LEAVES], nodes=[Node("n1", (Port("p0", "leaf2"),))]),
            "node",
            "n1",
            "listed under",
        ),
        (
            lambda: assemble(
                [*LEAVES], nodes=[Node("n1", (Port("p0", "leaf1"), Port("p0", "leaf1")))]
            ),
            "node",
            "n1",
            "twice",
        ),
        (
            lambda: assemble([*LEAVES], nodes=[Node("n1", (Port("p0", "nowhere"),))]),
            "node",
            "n1",
            "not declared",
        ),
        (
            lambda: assemble([], [Block("b1", ("n1",)), Block("b2", ("n1",))]),
            "block",
            "b2",
            "already",
        ),
        (lambda: assemble([], [Block("b1", ("n1",))], block_sizes=(2,)), "block", "b1", "fewer"),
        (lambda: assemble([], [], block_sizes=(4, 12)), "sizes", "", "power of two"),
        (lambda: assemble([], [], block_sizes=(0,)), "sizes", "", "positive"),
    ],
)
def test_each_rule_refuses_and_names_what_it_is_about(
    build: object, kind: str, name: str, words: str
) -> None:
    with pytest.raises(FabricError) as refused:
        build()  # type: ignore[operator]
    assert (refused.value.kind, refused.value.name) == (kind, name)
    assert words in str(refused.value)


def test_a_fabric_built_directly_must_declare_every_node() -> None:
    with pytest.raises(FabricError, match="not declared"):
        Fabric((Switch("leaf", nodes=("n1",)),))


def test_levels_are_computed_as_slurm_does_and_cycles_refused() -> None:
    assert levels_from_children({"a": (), "b": ("a",), "c": ("b", "a")}) == {
        "a": 0,
        "b": 1,
        "c": 2,
    }
    with pytest.raises(FabricError, match="cycle"):
        levels_from_children({"a": ("b",), "b": ("a",)})
    chain = {f"s{i}": (f"s{i + 1}",) for i in range(MAX_LEVELS)} | {f"s{MAX_LEVELS}": ()}
    with pytest.raises(FabricError, match="levels deep"):
        levels_from_children(chain)
