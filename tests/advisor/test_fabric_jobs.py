"""Running multi-node jobs whose parts are separate workloads (a JobSet's pods, the
simulator's gangs), joined through the fabric exporter's ``toposcope_job_fabric_node_gpus``,
and moved whole by fabric-placement."""

from __future__ import annotations

from dataclasses import replace

from tests.advisor.builders import cluster, pcie8
from tests.advisor.test_dry_run import bash_n
from tests.advisor.test_policy_fabric_placement import TREE
from toposcope.advisor.dry_run import planner_for, render_dry_run
from toposcope.advisor.fabric_jobs import job_parts
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.policies.fabric_defrag import occupants_of
from toposcope.advisor.policies.fabric_placement import FabricPlacement
from toposcope.advisor.rmclients.plans import ApiPlanner
from toposcope.fabric.celldefrag import Occupant
from toposcope.fabric.slurmconf import read_topology_conf
from toposcope.report.recommendation import RecommendationKind, Report, RunInfo
from toposcope.rm.plan import PlanHints


def test_parts_are_joined_by_name_then_gpus_then_name_prefix() -> None:
    held = [
        ("n1", "dp-a", 8),
        ("n2", "dp-b", 8),
        ("n3", "pp-a", 4),
        ("n3", "vision", 4),  # same GPU count on n3: the name decides
        ("n4", "pp-b", 4),
        ("n5", "slurm-job-7", 8),
        ("n6", "slurm-job-7", 8),
    ]
    jobs = {
        "dp": {"n1": 8, "n2": 8},
        "pp": {"n3": 4, "n4": 4},
        "slurm-job-7": {"n5": 8, "n6": 8},
    }
    assert job_parts(jobs, held) == {
        "n1/dp-a": "dp",
        "n2/dp-b": "dp",
        "n3/pp-a": "pp",
        "n4/pp-b": "pp",
        "n5/slurm-job-7": "slurm-job-7",
        "n6/slurm-job-7": "slurm-job-7",
    }


def test_a_part_that_cannot_be_told_apart_leaves_the_job_out() -> None:
    held = [("n1", "x", 4), ("n1", "y", 4), ("n2", "z", 4)]
    assert job_parts({"job": {"n1": 4, "n2": 4}}, held) == {}
    assert job_parts({"job": {"n1": 4, "n9": 4}}, [("n1", "job-a", 4)]) == {}


def gang_model(left: float | None) -> ClusterModel:
    """Job ``gang`` as two workloads, ``gang-a`` on dev0 (leaf s0) and ``gang-b`` on dev6 (s1)."""
    parts = [
        WorkloadModel("gang-a", "dev0", gpus=tuple(range(8)), time_left_seconds=left),
        WorkloadModel("gang-b", "dev6", gpus=tuple(range(8)), time_left_seconds=left),
    ]
    base = cluster([pcie8(f"dev{n}") for n in range(18)], parts)
    return replace(base, fabric_jobs={"gang": {"dev0": 8, "dev6": 8}})


def policy(unknown_left: float = 0.0) -> FabricPlacement:
    """fabric-placement on Slurm's tree example."""
    settings = replace(FabricPlacement().settings, unknown_time_left_s=unknown_left)
    return FabricPlacement(settings, fabric=read_topology_conf(TREE))


def test_a_gang_of_separate_workloads_moves_whole_onto_one_leaf() -> None:
    [move] = policy().evaluate(gang_model(36_000.0)).recommendations
    assert move.kind is RecommendationKind.MIGRATE_JOB and move.target.workload == "gang"
    assert move.proposed["nodes"] == ["dev0", "dev1"]
    assert {"workload:dev0/gang-a", "workload:dev6/gang-b"} <= set(move.claims)
    # without the exporter's series the parts are two single-node jobs: nothing to move
    alone = replace(gang_model(36_000.0), fabric_jobs={})
    assert policy().evaluate(alone).recommendations == ()


def test_a_gang_without_a_time_limit_is_priced_over_the_assumed_time_left() -> None:
    unpriced = policy().evaluate(gang_model(None))
    assert unpriced.recommendations == ()
    assert any("time left is unknown" in n.reason for n in unpriced.undecided)
    [move] = policy(36_000.0).evaluate(gang_model(None)).recommendations
    assert move.proposed["saved_s"] == 4000.0


def test_the_sim_dry_run_prints_the_whole_gang_move_and_an_agent_refuses_it() -> None:
    [move] = policy().evaluate(gang_model(36_000.0)).recommendations
    run = RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("fabric-placement",), 0.05)
    report = Report(run, (move,))
    sim = planner_for("sim", "http://127.0.0.1:9850", {})
    text = render_dry_run(report, "sim", sim, PlanHints())
    assert "http://127.0.0.1:9850/api/v1/gang-moves" in text and '"job":"gang"' in text.replace(
        " ", ""
    )
    bash_n(text)
    agent = planner_for("agent", None, {})
    assert "advice for a person" in render_dry_run(report, "agent", agent, PlanHints())
    assert isinstance(sim, ApiPlanner) and not sim.plan_fabric(move).refused
    assert isinstance(agent, ApiPlanner) and "only the simulator" in agent.plan_fabric(move).refused


def test_a_part_of_a_gang_is_never_moved_to_clear_a_leaf() -> None:
    tree = policy()._cells()
    occupants = occupants_of(gang_model(36_000.0), tree)
    assert occupants["dev0"] == [Occupant("gang-a", 8, False, tuple(range(8)))]
    alone = occupants_of(replace(gang_model(36_000.0), fabric_jobs={}), tree)
    assert alone["dev0"] == [Occupant("gang-a", 8, True, tuple(range(8)))]
