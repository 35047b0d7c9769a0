"""fabric-placement: pending multi-node jobs on the tightest cell of Slurm's documented tree
(leaves s0, s1, s2 of six nodes under spine s3), holding them for a tighter cell when the wait
pays, and the wait-or-spread rule's own figures.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, pcie8
from tests.helpers import REPO
from toposcope.advisor.fabric_wait import (
    LEVEL_SLOWDOWN_PRIOR,
    level_factor,
    ready_in,
    wait_for_tighter,
)
from toposcope.advisor.model import ClusterModel, PendingWorkload, WorkloadModel
from toposcope.advisor.policies import build
from toposcope.advisor.policies.fabric_placement import FabricPlacement
from toposcope.fabric.slurmconf import read_topology_conf
from toposcope.report.recommendation import RecommendationKind
from toposcope.rm import ActionKind
from toposcope.rm.plan import CommandStep
from toposcope.slurm.control import InvalidChangeError
from toposcope.slurm.fabric_steer import steps_for

TREE = REPO / "tests" / "fixtures" / "fabric" / "slurm-tree.conf"


def model(held: Mapping[str, float | None], pending: Mapping[str, int]) -> ClusterModel:
    """dev0-17 with 8 GPUs each; ``held`` nodes run a job on all 8 with that time left."""
    holders = [
        WorkloadModel(f"job-{node}", node, gpus=tuple(range(8)), time_left_seconds=left)
        for node, left in held.items()
    ]
    return cluster(
        [pcie8(f"dev{n}") for n in range(18)],
        holders,
        pending=[PendingWorkload(name, gpus) for name, gpus in pending.items()],
    )


def policy(*, wait: bool = True, defragment: bool = True) -> FabricPlacement:
    """The policy on Slurm's tree example (whether it may hold jobs, and clear leaves)."""
    base = replace(FabricPlacement().settings, wait=wait, defragment=defragment)
    return FabricPlacement(base, fabric=read_topology_conf(TREE))


def test_a_job_goes_to_the_tightest_leaf_and_says_which_cells_stay_whole() -> None:
    found = policy().evaluate(model({"dev0": 600, "dev1": 600, "dev12": 60}, {"big": 32}))
    [rec] = found.recommendations
    assert rec.kind is RecommendationKind.PLACE and rec.policy == "fabric-placement"
    assert rec.proposed["level"] == "leaf" and rec.proposed["cell"] == "s0"
    assert rec.proposed["nodes"] == ["dev2", "dev3", "dev4", "dev5"]
    assert rec.proposed["switches"] == 1 and rec.proposed["max_wait_s"] == 0
    assert "s1" in rec.proposed["cells_kept_whole"]
    assert rec.proposed["why"].startswith("leaf s0: the tightest level it fits under")
    assert rec.target.node == "s0" and rec.target.workload == "big"
    assert rec.actions == ()  # applied through the scheduler's topology support
    leaves = {e.labels["leaf"] for e in rec.evidence if e.series == "toposcope_fabric_node_info"}
    assert leaves == {"s0"}
    kept = [e for e in rec.evidence if e.series == "toposcope_fabric_switch_info"]
    assert {e.labels["switch"] for e in kept} >= {"s1"}
    assert "gpu:dev2/0" in rec.claims and "workload:pending/big" in rec.claims
    # first-fit takes dev2 ... dev10: over two leaves, so ours is worth a level's slowdown
    assert rec.current["first_fit"]["level"] == "spine"
    assert abs(rec.estimated_gain - LEVEL_SLOWDOWN_PRIOR) < 1e-6


def test_a_job_larger_than_any_leaf_spreads_over_the_spine_without_waiting() -> None:
    [rec] = policy().evaluate(model({}, {"huge": 7 * 8})).recommendations
    assert rec.proposed["level"] == "spine" and rec.proposed["tightest_level"] == "spine"
    assert rec.proposed["switches"] == 2 and rec.proposed["max_wait_s"] == 0
    assert rec.summary.startswith("place huge on 7 nodes under spine s3")


def test_a_job_waits_for_a_leaf_when_the_wait_costs_less_than_the_slower_run() -> None:
    # each leaf has 4 free nodes; dev1's job ends in a minute, then s0 has the 5 it needs
    held = {"dev0": 7200, "dev1": 60, "dev6": 7200, "dev7": 7200, "dev12": 7200, "dev13": 7200}
    [rec] = policy().evaluate(model(held, {"mid": 40})).recommendations
    assert rec.proposed["hold_level"] == "leaf" and rec.proposed["hold_cell"] == "s0"
    assert rec.proposed["max_wait_s"] == 60 and rec.proposed["switches"] == 1
    assert rec.proposed["nodes"] == [] and rec.proposed["level"] == "spine"
    assert rec.summary.startswith("hold mid for leaf s0")
    assert rec.estimated_gain > 0.1
    # a two-hour wait costs more than running across the spine: it is placed now
    slow = {node: 7200.0 for node in held}
    [now] = policy(defragment=False).evaluate(model(slow, {"mid": 40})).recommendations
    assert "hold_level" not in now.proposed and now.proposed["level"] == "spine"
    assert len(now.proposed["nodes"]) == 5
    # and never waits when told not to
    eager_policy = policy(wait=False, defragment=False)
    [eager] = eager_policy.evaluate(model(held, {"mid": 40})).recommendations
    assert "hold_level" not in eager.proposed


def test_jobs_are_placed_largest_first_on_different_nodes() -> None:
    found = policy().evaluate(model({}, {"a": 16, "b": 48, "single": 4}))
    assert [r.target.workload for r in found.recommendations] == ["b", "a"]
    b, a = (set(r.proposed["nodes"]) for r in found.recommendations)
    assert len(b) == 6 and len(a) == 2 and not a & b


def test_a_job_asking_for_nodes_gets_that_many_with_its_gpus_on_each() -> None:
    """A Slurm ``-N 4 --gres=gpu:2`` job: 8 GPUs in all would fit one node, but it asks for
    four; gpu-placement leaves it to this policy instead of packing it onto one node.
    """
    jobs = [PendingWorkload("slurm-job-7", 2, nodes_requested=4)]
    found = policy().evaluate(replace(model({}, {}), pending=tuple(jobs)))
    [rec] = found.recommendations
    assert len(rec.proposed["nodes"]) == 4 and rec.proposed["gpus_per_node"] == 2
    assert rec.proposed["level"] == "leaf"
    placing = build(["gpu-placement"], {})[0].evaluate(replace(model({}, {}), pending=tuple(jobs)))
    assert placing.recommendations == ()
    [note] = placing.undecided
    assert note.target == "slurm-job-7" and "asks for 4 nodes" in note.reason


def test_without_a_fabric_or_multi_node_jobs_the_policy_says_why() -> None:
    [note] = FabricPlacement().evaluate(model({}, {"big": 32})).undecided
    assert "fabric_file" in note.reason
    [few] = policy().evaluate(model({}, {"small": 8})).undecided
    assert "more than 8 GPUs" in few.reason
    blocked = {f"dev{n}": None for n in range(18)}
    [none] = policy().evaluate(model(blocked, {"big": 32})).undecided
    assert none.target == "big" and "4 nodes" in none.reason


def test_the_fabric_file_setting_reads_a_topology_conf(tmp_path: Path) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text(TREE.read_text())
    [placed] = build(["fabric-placement"], {"fabric-placement": {"fabric_file": str(conf)}})
    [rec] = placed.evaluate(model({}, {"big": 16})).recommendations
    assert rec.proposed["level"] == "leaf"
    conf.write_text("SwitchName=s0 Nodes=dev0\nSwitchName=bad Switches=missing\n")
    [broken] = build(["fabric-placement"], {"fabric-placement": {"fabric_file": str(conf)}})
    [note] = broken.evaluate(model({}, {"big": 16})).undecided
    assert "missing" in note.reason


def test_the_wait_rule_prices_each_level_and_the_nodes_readiness() -> None:
    assert level_factor(0) == 1.0 and level_factor(2) == 1.0 + 2 * LEVEL_SLOWDOWN_PRIOR
    # a 4 h run one level up costs 1,800 s: a 30 min wait is just too long, 29 min pays
    assert wait_for_tighter(14400, 1, 0, 1740, gpus=40, waiting=0)
    assert not wait_for_tighter(14400, 1, 0, 1800, gpus=40, waiting=0)
    assert not wait_for_tighter(14400, 1, 1, 0, gpus=40, waiting=0)
    assert ready_in(8, 0, [(4, 300.0), (4, 100.0)], 4) == 100.0
    assert ready_in(8, 0, [(4, 300.0), (4, 100.0)], 8) == 300.0
    assert ready_in(8, 2, [(6, None)], 4) == float("inf")
    assert ready_in(4, 4, [], 8) == float("inf")


def test_the_rule_imports_nothing_from_the_simulator() -> None:
    for name in ("fabric_wait.py", "policies/fabric_placement.py", "policies/fabric_advice.py"):
        tree = ast.parse((REPO / "advisor" / name).read_text())
        imported = {
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert not any("sim" in module.split(".") for module in imported), (name, imported)


def test_the_slurm_backend_turns_a_recommendation_into_one_scontrol_update() -> None:
    (placed,) = policy().evaluate(model({"dev0": 600}, {"slurm-job-7": 32})).recommendations
    [step] = steps_for(placed)
    nodes = ",".join(placed.proposed["nodes"])
    assert isinstance(step, CommandStep) and step.argv == (
        "scontrol",
        "update",
        "JobId=7",
        f"ReqNodeList={nodes}",
        "Switches=1",
    )
    held = {"dev0": 7200, "dev1": 60, "dev6": 7200, "dev7": 7200, "dev12": 7200, "dev13": 7200}
    [hold] = policy().evaluate(model(held, {"slurm-job-8": 40})).recommendations
    [wait] = steps_for(hold)
    assert isinstance(wait, CommandStep) and wait.argv == (
        "scontrol",
        "update",
        "JobId=8",
        "Switches=1@00:01:00",
    )


def spread_job(left: float | None) -> ClusterModel:
    """slurm-job-9 on dev0 (leaf s0) and dev6 (leaf s1), all 8 GPUs each; the rest free."""
    parts = [
        WorkloadModel("slurm-job-9", node, gpus=tuple(range(8)), time_left_seconds=left)
        for node in ("dev0", "dev6")
    ]
    return cluster([pcie8(f"dev{n}") for n in range(18)], parts)


def test_a_running_job_spread_over_two_leaves_moves_onto_one_when_the_time_saved_pays() -> None:
    found = policy().evaluate(spread_job(36_000.0))
    [move] = found.recommendations
    assert move.kind is RecommendationKind.MIGRATE_JOB and move.actions == ()
    assert move.current["level"] == "spine" and move.current["nodes"] == ["dev0", "dev6"]
    assert move.proposed["level"] == "leaf" and move.proposed["cell"] == "s0"
    assert move.proposed["nodes"] == ["dev0", "dev1"] and move.proposed["switches"] == 1
    # 36,000 s left at 1.125x: 4,000 s saved, one 600 s restart
    assert move.proposed["saved_s"] == 4000.0
    assert abs(move.estimated_gain - 3400 / 36_000) < 1e-6
    assert "workload:dev6/slurm-job-9" in move.claims
    [step] = steps_for(move)[2:3]
    assert isinstance(step, CommandStep) and step.argv == (
        "scontrol", "update", "JobId=9", "ReqNodeList=dev0,dev1", "Switches=1", "StartTime=now"
    )  # fmt: skip


def test_a_move_that_saves_less_than_a_restart_or_cannot_be_priced_is_not_made() -> None:
    assert policy().evaluate(spread_job(3600.0)).recommendations == ()
    unpriced = policy().evaluate(spread_job(None))
    assert unpriced.recommendations == ()
    assert any("time left is unknown" in n.reason for n in unpriced.undecided)


def test_a_leaf_is_cleared_for_a_job_when_the_faster_run_beats_the_restarts() -> None:
    # each leaf has 4 free nodes, the job needs 5 and nothing ends soon: moving one 8-GPU job
    # out of s0 (600 s) buys a run on one leaf (1,800 s of a 4 h run at 0.125 per level)
    held = {"dev0": 7200, "dev1": 7200, "dev6": 7200, "dev7": 7200, "dev12": 7200, "dev13": 7200}
    moves, place = policy().evaluate(model(held, {"mid": 40})).recommendations
    assert moves.kind is RecommendationKind.MIGRATE_JOB and moves.proposed["cell"] == "s0"
    [action] = moves.actions
    assert (action.kind, action.workload, action.node) == (ActionKind.MIGRATE, "job-dev0", "dev10")
    # the move names the GPUs it takes (a simulator or agent refuses a GPU job's migrate
    # without them): its own indices, free on an identical node
    assert action.gpus == list(range(8))
    assert moves.proposed["moves"] == [
        {
            "workload": "job-dev0",
            "from_node": "dev0",
            "to_node": "dev10",
            "gpus": 8,
            "to_gpus": list(range(8)),
        }
    ]
    assert abs(moves.estimated_gain - 1200 / 14400) < 1e-6
    assert place.kind is RecommendationKind.PLACE and place.proposed["level"] == "leaf"
    assert sorted(place.proposed["nodes"]) == ["dev0", "dev2", "dev3", "dev4", "dev5"]
    assert moves.id in place.proposed["why"] and not set(moves.claims) & set(place.claims)
    with pytest.raises(InvalidChangeError, match="through its actions"):
        steps_for(moves)
    # a short run is not worth the restart: placed across the spine instead
    short = FabricPlacement(
        replace(FabricPlacement().settings, run_seconds=3600.0),
        fabric=read_topology_conf(TREE),
    )
    [spread] = short.evaluate(model(held, {"mid": 40})).recommendations
    assert spread.kind is RecommendationKind.PLACE and spread.proposed["level"] == "spine"
