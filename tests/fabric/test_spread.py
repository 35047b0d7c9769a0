"""The spread of multi-node jobs over the fabric: domains spanned against the fewest needed,
the highest level crossed, blocks and rail alignment, on Slurm's documented examples and a
real rail-optimised InfiniBand dump.
"""

from __future__ import annotations

from tests.helpers import REPO
from toposcope.fabric.ibnetdiscover import read_ibnetdiscover
from toposcope.fabric.model import Node, Port, Switch, assemble
from toposcope.fabric.slurmconf import read_topology_conf
from toposcope.fabric.spread import FabricIndex, JobPlacement, NodeShare, rail_aligned

FIXTURES = REPO / "tests" / "fixtures" / "fabric"


def job(*nodes: str, gpus: int = 8, indices: tuple[int, ...] | None = None) -> JobPlacement:
    """A Slurm job on ``nodes`` with ``gpus`` GPUs on each."""
    shares = tuple(NodeShare(node, gpus, indices) for node in nodes)
    return JobPlacement("slurm", "gpu", "slurm-job-1", shares)


def test_slurms_tree_example_counts_leaves_and_the_level_crossed() -> None:
    index = FabricIndex(read_topology_conf(FIXTURES / "slurm-tree.conf"))
    together = index.spread(job("dev0", "dev1"))
    assert together.domains == {"leaf": 1, "spine": 1}
    assert together.needed == {"leaf": 1, "spine": 1}
    assert (together.top_level, together.top_level_needed) == (0, 0)
    assert together.spread_beyond_need == {}

    apart = index.spread(job("dev0", "dev6", "dev12"))
    assert apart.domains["leaf"] == 3 and apart.needed["leaf"] == 1
    assert (apart.top_level, apart.top_level_needed) == (1, 0)
    assert apart.spread_beyond_need == {"leaf": 2}
    assert (apart.nodes, apart.gpus, apart.unknown_nodes) == (3, 24, 0)

    # eight nodes cannot fit under one six-node leaf: two leaves are what it needs
    big = index.spread(job(*(f"dev{n}" for n in range(8))))
    assert big.domains["leaf"] == 2 and big.needed["leaf"] == 2
    assert (big.top_level, big.top_level_needed) == (1, 1)


def test_slurms_block_example_counts_blocks() -> None:
    index = FabricIndex(read_topology_conf(FIXTURES / "slurm-block.conf"))
    spread = index.spread(job("node1", "node33", "node34"))
    assert spread.domains == {"block": 2}
    assert spread.needed == {"block": 1}
    assert spread.top_level is None  # no switches: no level to cross
    forty = index.spread(job(*(f"node{n}" for n in range(1, 41))))
    assert forty.domains == {"block": 2} and forty.needed == {"block": 2}


def test_a_rail_optimised_unit_is_one_leaf_domain_in_a_real_dump() -> None:
    # NVIDIA topograph's published ibnetdiscover output (Apache-2.0, see the README): each
    # scalable unit's nodes reach four rail leaves
    index = FabricIndex(read_ibnetdiscover(FIXTURES / "ibnetdiscover-topograph.out"))
    unit = index.spread(job("a07-p1-dgx-03-c01", "a07-p1-dgx-03-c02", "a07-p1-dgx-03-c18"))
    assert unit.domains["leaf"] == 1 and unit.top_level == 0
    across = index.spread(job("a07-p1-dgx-03-c01", "a08-p1-dgx-04-c01"))
    assert across.domains["leaf"] == 2 and across.needed["leaf"] == 1
    assert (across.top_level, across.top_level_needed) == (1, 0)
    assert across.spread_beyond_need == {"leaf": 1}


def test_unknown_nodes_are_counted_and_left_out_of_the_domains() -> None:
    index = FabricIndex(read_topology_conf(FIXTURES / "slurm-tree.conf"))
    spread = index.spread(job("dev0", "dev1", "elsewhere1"))
    assert (spread.nodes, spread.unknown_nodes) == (3, 1)
    assert spread.domains["leaf"] == 1
    nowhere = index.spread(job("elsewhere1", "elsewhere2"))
    assert nowhere.domains == {} and nowhere.top_level is None


def test_separate_trees_never_share_a_domain() -> None:
    fabric = assemble(
        [
            Switch("a-leaf", 0, nodes=("a1", "a2")),
            Switch("a-spine", 1, switches=("a-leaf",)),
            Switch("b-leaf", 0, nodes=("b1", "b2")),
        ]
    )
    spread = FabricIndex(fabric).spread(job("a1", "b1"))
    assert spread.domains == {"leaf": 2, "spine": 2}
    assert spread.top_level == 2  # nothing joins them: beyond the top level


def test_single_node_jobs_are_skipped_and_rails_need_the_same_gpus_everywhere() -> None:
    fabric = assemble(
        [Switch("r0", 0, nodes=("n1", "n2")), Switch("r1", 0, nodes=("n1", "n2"))],
        nodes=[
            Node("n1", (Port("mlx5_0", "r0"), Port("mlx5_1", "r1"))),
            Node("n2", (Port("mlx5_0", "r0"), Port("mlx5_1", "r1"))),
        ],
    )
    index = FabricIndex(fabric)
    single = JobPlacement("slurm", "gpu", "slurm-job-2", (NodeShare("n1", 2, (0, 1)),))
    aligned = job("n1", "n2", gpus=2, indices=(0, 1))
    skewed = JobPlacement(
        "slurm", "gpu", "slurm-job-3", (NodeShare("n1", 2, (0, 1)), NodeShare("n2", 2, (2, 3)))
    )
    spreads = index.spreads([single, aligned, skewed])
    assert [s.job.workload for s in spreads] == ["slurm-job-1", "slurm-job-3"]
    assert [s.rail_aligned for s in spreads] == [True, False]
    assert spreads[0].domains == {"leaf": 1}
    assert rail_aligned((NodeShare("n1", 1, (0,)), NodeShare("n2", 1, None))) is None
