"""fabric-placement's joint re-placement: spread multi-node jobs that can only reach one leaf
each by trading nodes are moved together (a small job moved aside when it is in the way),
priced by the levels and the uplinks they share; one request for the simulator, a refusal
for Slurm and Kubernetes, never half a move."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.advisor.builders import cluster, pcie8
from tests.advisor.test_dry_run import bash_n
from tests.helpers import REPO
from toposcope.advisor.dry_run import planner_for, render_dry_run
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.policies.fabric_placement import FabricPlacement
from toposcope.advisor.rmclients.http import HttpResourceManager
from toposcope.advisor.rmclients.joint_plan import joint_plan
from toposcope.fabric.yamlfile import read_fabric_file
from toposcope.kube.fabric_steer import FabricSteerPlanner
from toposcope.report.recommendation import Recommendation, RecommendationKind, Report, RunInfo
from toposcope.rm.plan import HttpStep, PlanHints
from toposcope.slurm.control import InvalidChangeError
from toposcope.slurm.fabric_steer import steps_for

FABRIC = REPO / "sim" / "scenarios" / "fabrics" / "fabric-spread.yaml"
EIGHT = tuple(range(8))
#: three jobs of two nodes over three leaves of two nodes, each across two leaves
SPREAD = {
    "slurm-job-1": (("fs-01", EIGHT), ("fs-03", EIGHT)),
    "slurm-job-2": (("fs-02", EIGHT), ("fs-05", EIGHT)),
    "slurm-job-3": (("fs-04", (0, 1, 2, 3)), ("fs-06", (0, 1, 2, 3))),
}
SMALL = {
    "vision": ("fs-04", (4, 5, 6, 7)),
    "serve": ("fs-06", (4,)),
    "notebook": ("fs-06", (6,)),
}


def model(
    left: Mapping[str, float | None], jobs: Mapping[str, Any] = SPREAD, small: Any = SMALL
) -> ClusterModel:
    """Six 8-GPU nodes: the multi-node ``jobs`` with their time left, single-node ``small``."""
    workloads = [
        WorkloadModel(name, node, gpus=gpus, time_left_seconds=left.get(name))
        for name, parts in jobs.items()
        for node, gpus in parts
    ]
    workloads += [
        WorkloadModel(name, node, gpus=gpus, time_left_seconds=None)
        for name, (node, gpus) in small.items()
    ]
    return cluster([pcie8(f"fs-0{n}") for n in range(1, 7)], workloads)


def policy(**settings: Any) -> FabricPlacement:
    """fabric-placement on the fabric-spread scenario's three leaves."""
    return FabricPlacement(
        replace(FabricPlacement().settings, **settings), fabric=read_fabric_file(FABRIC)
    )


def joint(left: Mapping[str, float | None], **settings: Any) -> list[Recommendation]:
    """The joint moves the policy recommends."""
    found = policy(**settings).evaluate(model(left))
    return [r for r in found.recommendations if r.proposed.get("joint")]


def places(rec: Recommendation) -> dict[str, dict[str, tuple[str, tuple[int, ...]]]]:
    """Job -> part -> (node, GPUs) after the move."""
    return {
        j["job"]: {p["part"]: (p["node"], tuple(p["gpus"])) for p in j["parts"]}
        for j in rec.proposed["jobs"]
    }


LONG = dict.fromkeys(SPREAD, 36_000.0)


def test_three_spread_jobs_trade_nodes_so_that_each_runs_under_one_leaf() -> None:
    [rec] = joint(LONG)
    assert rec.kind is RecommendationKind.MIGRATE_JOB and rec.actions == ()
    moved = places(rec)
    # a leaf needs the GPUs of vision (4) or of serve and notebook (1 each): two 1-GPU
    # restarts stand fewer GPUs still than one 4-GPU restart
    assert set(moved) == {*SPREAD, "serve", "notebook"}
    tree_leaf = {"fs-01": 1, "fs-02": 1, "fs-03": 2, "fs-04": 2, "fs-05": 3, "fs-06": 3}
    for job in SPREAD:
        assert len({tree_leaf[node] for node, _ in moved[job].values()}) == 1
    used: dict[str, set[int]] = {}
    for parts in moved.values():
        for node, gpus in parts.values():
            assert not used.setdefault(node, set()) & set(gpus)  # no GPU given twice
            used[node] |= set(gpus)
    assert not used.get("fs-04", set()) & {4, 5, 6, 7}  # vision stays where it is
    # every job crosses two leaf uplinks, each shared by two jobs: 1 + 0.125 x 2 = 1.25x;
    # under one leaf 1x: 36,000 x 0.2 = 7,200 s each; five restarts of 600 s
    assert rec.proposed["saved_s"] == pytest.approx(3 * 7200.0)
    assert rec.proposed["restart_s"] == pytest.approx(5 * 600.0)
    # in GPU-seconds: 7,200 s x 40 GPUs saved, 600 s x (16 + 16 + 8 + 1 + 1) GPUs stood still
    assert rec.proposed["saved_gpu_s"] == pytest.approx(7200.0 * 40)
    assert rec.proposed["restart_gpu_s"] == pytest.approx(600.0 * 42)
    assert rec.estimated_gain == pytest.approx((288_000 - 25_200) / (36_000 * 40), abs=1e-5)
    assert all(f"workload:{n}/{job}" in rec.claims for job, (n, _) in SMALL.items() if job in moved)
    assert "slurm-job-3" in rec.summary and "serve" in rec.summary
    assert rec.current["jobs"]["slurm-job-1"]["communication_share"]["estimate"] == "prior"


def test_no_joint_move_when_a_job_is_about_to_end_or_it_does_not_pay() -> None:
    # slurm-job-2 ends in 20 min: it would save less than its restart, so it stays, and
    # with its nodes held no leaf has room for the others either
    assert joint({**LONG, "slurm-job-2": 1200.0}) == []
    assert joint(dict.fromkeys(SPREAD, 3000.0)) == []  # 600 s saved each: never pays
    assert joint(dict.fromkeys(SPREAD)) == []  # time left unknown: not priced
    assert joint(LONG, move_spread=False) == []


def test_unknown_time_left_is_priced_with_the_setting() -> None:
    [rec] = joint(dict.fromkeys(SPREAD), unknown_time_left_s=21_600.0)
    assert rec.proposed["saved_s"] == pytest.approx(3 * 4320.0)


def test_a_job_already_under_one_leaf_is_left_alone_and_never_slowed() -> None:
    jobs = {
        "slurm-job-1": (("fs-01", EIGHT), ("fs-02", EIGHT)),
        "slurm-job-2": (("fs-03", EIGHT), ("fs-05", EIGHT)),
    }
    found = policy().evaluate(model(dict.fromkeys(jobs, 36_000.0), jobs, {}))
    for rec in found.recommendations:
        assert "slurm-job-1" not in places(rec) if rec.proposed.get("joint") else True


def test_the_simulator_plan_is_one_request_naming_every_part_and_gpu() -> None:
    [rec] = joint(LONG)
    plan = joint_plan(rec, "http://sim:8080/api/v1")
    assert not plan.refused
    [step] = plan.steps
    assert isinstance(step, HttpStep) and step.method == "POST"
    assert step.url == "http://sim:8080/api/v1/gang-moves"
    body: dict[str, Any] = dict(step.body) if isinstance(step.body, dict) else {}
    assert body["request_id"] == f"{rec.id}-0" == plan.request.request_id
    assert [j["job"] for j in body["jobs"]] == [j["job"] for j in rec.proposed["jobs"]]
    for job in body["jobs"]:
        for part in job["parts"]:
            assert f"{part['part']} to {part['node']} GPUs {part['gpus']}" in step.what
    planned = HttpResourceManager("http://127.0.0.1:8080", "token").plan_fabric(rec)
    [sent] = planned.steps
    assert isinstance(sent, HttpStep) and sent.body == step.body


@pytest.mark.parametrize(
    "broken",
    [
        {"jobs": []},
        {"jobs": [{"job": "a\nb", "parts": [{"part": "x", "node": "fs-01", "gpus": [0]}]}]},
        {"jobs": [{"job": "j", "parts": [{"part": "x", "node": "fs 01;", "gpus": [0]}]}]},
        {"jobs": [{"job": "j", "parts": [{"part": "x", "node": "fs-01", "gpus": [-1]}]}]},
        {"jobs": [{"job": "j", "parts": []}]},
    ],
)
def test_a_malformed_joint_move_is_refused_before_any_body(broken: dict[str, Any]) -> None:
    [rec] = joint(LONG)
    bad = replace(rec, proposed={**rec.proposed, **broken})
    plan = joint_plan(bad, "http://sim:8080/api/v1")
    assert plan.refused and plan.steps == ()


def test_slurm_and_kubernetes_refuse_a_joint_move_whole() -> None:
    [rec] = joint(LONG)
    with pytest.raises(InvalidChangeError, match="one at a time"):
        steps_for(rec)
    plan = FabricSteerPlanner(None).plan(rec)
    assert plan.refused and plan.steps == ()


def test_the_sim_dry_run_prints_the_one_joint_request_and_slurm_a_refusal_comment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "slurm.conf"  # a controller that does not answer
    conf.write_text("ClusterName=gone\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    [rec] = joint(LONG)
    run = RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("fabric-placement",), 0.05)
    report = Report(run, (rec,))
    sim = planner_for("sim", "http://127.0.0.1:9850", {})
    text = render_dry_run(report, "sim", sim, PlanHints())
    bash_n(text)
    flat = text.replace(" ", "")
    assert "http://127.0.0.1:9850/api/v1/gang-moves" in text
    assert all(f'"job":"{job}"' in flat for job in (*SPREAD, "serve", "notebook"))
    slurm = render_dry_run(report, "slurm", planner_for("slurm", None, {}), PlanHints())
    bash_n(slurm)
    assert "one at a time" in slurm
    assert not [line for line in slurm.splitlines() if "scontrol" in line.split("#", 1)[0]]


def test_no_job_moves_onto_a_node_of_another_make() -> None:
    # fs-05 with other GPUs: the swap needs vision there (the only four GPUs left) and a part
    # of slurm-job-2 runs there while its sibling runs on fs-02; neither may change make
    nodes = [pcie8(f"fs-0{n}") for n in range(1, 7)]
    nodes[4] = replace(nodes[4], gpus=tuple(replace(g, model="other GPU") for g in nodes[4].gpus))
    found = policy().evaluate(replace(model(LONG), nodes={n.name: n for n in nodes}))
    assert not [r for r in found.recommendations if r.proposed.get("joint")]
