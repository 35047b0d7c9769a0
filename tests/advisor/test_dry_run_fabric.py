"""``advise --dry-run``: a fabric placement of a pending multi-node job, planned whole.

The recommendations are the real fabric-placement policy's on Slurm's documented tree (leaves
s0, s1, s2 of six nodes under spine s3). With no slurmctld answering, the Slurm plan is the
``scontrol update`` of the recommendation with what could not be checked as comments; the
script passes ``bash -n``. The Kubernetes side is in ``tests/kube/test_fabric_steer.py``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.advisor.builders import cluster, pcie8
from tests.advisor.test_dry_run import bash_n
from tests.helpers import REPO
from toposcope.advisor.dry_run import planner_for, render_dry_run
from toposcope.advisor.model import PendingWorkload, WorkloadModel
from toposcope.advisor.policies.fabric_placement import FabricPlacement
from toposcope.fabric.slurmconf import read_topology_conf
from toposcope.report.recommendation import Recommendation, Report, RunInfo
from toposcope.rm.plan import PlanHints

TREE = REPO / "tests" / "fixtures" / "fabric" / "slurm-tree.conf"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A Slurm configuration whose controller does not answer."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=gone\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nMessageTimeout=1\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(conf))


def advice(held: dict[str, float | None], gpus: int) -> Recommendation:
    policy = FabricPlacement(
        replace(FabricPlacement().settings, defragment=False), fabric=read_topology_conf(TREE)
    )
    holders = [
        WorkloadModel(f"job-{node}", node, gpus=tuple(range(8)), time_left_seconds=left)
        for node, left in held.items()
    ]
    model = cluster(
        [pcie8(f"dev{n}") for n in range(18)],
        holders,
        pending=[PendingWorkload("slurm-job-42", gpus)],
    )
    [rec] = policy.evaluate(model).recommendations
    return rec


def script(*recs: Recommendation) -> str:
    run = RunInfo("2026-01-01T00:00:00+00:00", "test", "1h", ("fabric-placement",), 0.05)
    planner = planner_for("slurm", None, {})
    return render_dry_run(Report(run, recs), "slurm", planner, PlanHints())


def test_slurm_prints_the_steer_and_what_it_could_not_check() -> None:
    rec = advice({"dev0": 600, "dev1": 600}, 32)
    text = script(rec)
    nodes = ",".join(rec.proposed["nodes"])
    assert f"scontrol update JobId=42 ReqNodeList={nodes} Switches=1\n" in text
    assert "# not checked: whether the job is still pending" in text
    assert "Slurm could not be read" in text
    assert "advice for a person" not in text
    bash_n(text)


def test_a_held_job_waits_for_its_switch_count() -> None:
    rec = advice({f"dev{n}": 60.0 for n in range(0, 18, 3)}, 40)
    assert rec.proposed.get("hold_level") == "leaf", rec.proposed
    text = script(rec)
    assert "scontrol update JobId=42 Switches=1@00:01:00" in text
    bash_n(text)


def test_a_job_name_slurm_cannot_steer_is_a_refusal_comment() -> None:
    rec = replace(advice({}, 32), target=replace(advice({}, 32).target, workload="ml:JobSet:x"))
    text = script(rec)
    assert "# slurm refuses this action:" in text and "scontrol" not in text
    bash_n(text)
