"""Where fabric-placement moves a single-node job out of a multi-node job's way: never a job
about to end, never onto other GPU models or dearer GPU pairs, its own indices first; and the
leaf clearing's migrate actions name the GPUs they take.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.advisor.builders import cluster, gpu, pcie8
from tests.advisor.test_policy_fabric_placement import model as placement_model
from tests.advisor.test_policy_fabric_placement import policy as placement_policy
from tests.helpers import REPO
from toposcope.advisor.model import ClusterModel, NodeModel, WorkloadModel
from toposcope.advisor.policies.fabric_aside import aside_gpus, ending_soon
from toposcope.advisor.policies.fabric_defrag import defrag_recommendation, occupants_of
from toposcope.fabric.celldefrag import CellClearing, Move
from toposcope.fabric.cells import CellTree
from toposcope.fabric.slurmconf import read_topology_conf
from toposcope.rm import ActionStatus, Allocation, ResourceManagerError
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.templates import builtin_template

TREE = CellTree(read_topology_conf(REPO / "tests" / "fixtures" / "fabric" / "slurm-tree.conf"))


def other_make(name: str) -> NodeModel:
    """An 8-GPU node like :func:`pcie8` but of another GPU model, its GPUs idle (their
    workloads, if any, run on the node this one replaces).
    """
    node = pcie8(name)
    made = tuple(gpu(g, g // 4, util=0.0, model="NVIDIA L4") for g in range(8))  # as pcie8
    return replace(node, gpus=made)


def two_nodes(target: NodeModel | None = None) -> ClusterModel:
    """``job`` on GPUs 0,1 (one PCIe switch) of n1; n2 empty."""
    return cluster(
        [pcie8("n1"), target or pcie8("n2")],
        [WorkloadModel("job", "n1", gpus=(0, 1), time_left_seconds=3600.0)],
    )


def test_own_indices_first_then_an_equally_priced_pair() -> None:
    model = two_nodes()
    assert aside_gpus(model, "n1", (0, 1), "n2", range(8)) == (0, 1)
    # 0 taken: 4,5 share a switch as 0,1 do (the cheapest pair, lowest indices)
    assert aside_gpus(model, "n1", (0, 1), "n2", [1, 2, 4, 5, 6, 7]) == (4, 5)


def test_no_dearer_pair_and_no_other_gpu_model() -> None:
    model = two_nodes()
    # 1 and 2 sit on two switches of one socket: dearer than a switch's pair
    assert aside_gpus(model, "n1", (0, 1), "n2", [1, 2]) is None
    assert aside_gpus(two_nodes(other_make("n2")), "n1", (0, 1), "n2", range(8)) is None
    assert aside_gpus(model, "n1", (0, 1), "n9", range(8)) is None


def test_a_job_about_to_end_is_not_moved() -> None:
    assert ending_soon(2399.0, 600.0) and not ending_soon(2400.0, 600.0)
    assert not ending_soon(None, 600.0)
    held = [
        WorkloadModel("ends", "dev0", gpus=(0, 1, 2, 3), time_left_seconds=900.0),
        WorkloadModel("runs", "dev1", gpus=(4, 5), time_left_seconds=None),
    ]
    occupants = occupants_of(cluster([pcie8("dev0"), pcie8("dev1")], held), TREE)
    assert [(o.job, o.movable, o.indices) for o in occupants["dev0"]] == [
        ("ends", False, (0, 1, 2, 3))
    ]
    assert [(o.job, o.movable, o.indices) for o in occupants["dev1"]] == [("runs", True, (4, 5))]


@pytest.mark.parametrize("free", [(), (3,)])
def test_too_few_free_gpus_is_no_place(free: tuple[int, ...]) -> None:
    assert aside_gpus(two_nodes(), "n1", (0, 1), "n2", free) is None


def test_the_clearing_action_names_gpus_and_the_simulator_carries_it_out() -> None:
    template = builtin_template("pcie-8gpu-2sw")
    sim = SimCluster(SimClock(seed=1), scheduler="none")
    for node in ("dev0", "dev10"):
        sim.add_node(node, template)
    sim.submit(
        make_job("small", JobKind.GPU_TRAIN, gpus=2, duration=36_000),
        Allocation("dev0", [], [], [4, 5]),
    )
    clearing = CellClearing(1, "s0", ("dev0",), (Move("small", "dev0", "dev10", 2, (4, 5)),))
    rec = defrag_recommendation("fabric-placement", "big", clearing, 600.0, 14_400.0)
    [action] = rec.actions
    assert action.gpus == [4, 5] and "gpu:dev10/4" in rec.claims
    state = sim.apply(replace(action, request_id="clear-1"))
    assert state.status is not ActionStatus.FAILED and state.after is not None
    assert (state.after.node, state.after.gpus) == ("dev10", [4, 5])
    # the same move without GPU indices is what the simulator refused
    with pytest.raises(ResourceManagerError, match="needs 2 GPU"):
        sim.apply(replace(action, request_id="clear-2", node="dev0", gpus=[]))


def test_fabric_placement_clears_around_a_job_about_to_end_onto_like_gpus() -> None:
    # as the clearing test of test_policy_fabric_placement: s0 needs one of dev0/dev1 cleared
    held = {"dev0": 7200, "dev1": 7200, "dev6": 7200, "dev7": 7200, "dev12": 7200, "dev13": 7200}
    no_wait = placement_policy(wait=False)
    moves, _ = no_wait.evaluate(placement_model(held, {"mid": 40})).recommendations
    assert [(a.workload, a.node, a.gpus) for a in moves.actions] == [
        ("job-dev0", "dev10", list(range(8)))
    ]
    # job-dev0 ends within four restarts: dev1 is cleared instead
    soon = placement_model({**held, "dev0": 1200}, {"mid": 40})
    moves, _ = no_wait.evaluate(soon).recommendations
    assert [(a.workload, a.node) for a in moves.actions] == [("job-dev1", "dev10")]
    # leaves s1 and s2 of another GPU model: a job of s0 has nowhere to go, so a job of s1
    # moves (onto a node like its own) to clear s1 instead
    base = placement_model(held, {"mid": 40})
    others = {n: m if n in {f"dev{i}" for i in range(6)} else other_make(n)
              for n, m in base.nodes.items()}  # fmt: skip
    moves, _ = no_wait.evaluate(replace(base, nodes=others)).recommendations
    assert moves.proposed["cell"] == "s1"
    assert [(a.workload, a.node) for a in moves.actions] == [("job-dev6", "dev14")]
