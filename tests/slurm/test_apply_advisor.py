"""The advisor applying through ``--resource-manager slurm``: found by its entry point, audited,
and a placement reverted, both in process and by ``toposcope advise revert``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.slurm.managers import blockers, job_field, job_state
from toposcope.advisor.applying import Applier
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.recommendations import make_recommendation
from toposcope.advisor.rmclients import backend_names, make_resource_manager
from toposcope.report.recommendation import (
    Evidence,
    Recommendation,
    RecommendationKind,
    Risk,
    Target,
)
from toposcope.rm import ActionKind, ActionRequest
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.manager import SlurmResourceManager

ACTOR = "tester@host"


def placement(job: int, node: str) -> Recommendation:
    """A recommendation to place pending ``job`` on GPU 0 of ``node``, as the policy writes it."""
    workload = f"slurm-job-{job}"
    return make_recommendation(
        kind=RecommendationKind.PLACE,
        policy="gpu-placement",
        target=Target(node, workload, (0,)),
        summary=f"place {workload} on {node} GPU 0",
        current={},
        proposed={"node": node, "gpus": [0]},
        evidence=[Evidence("toposcope_gpu_info", {"node": node, "gpu": "0"}, 1.0)],
        estimated_gain=0.3,
        gain_model="test",
        confidence=0.7,
        risk=Risk.LOW,
        actions=[ActionRequest("", ActionKind.PLACE, workload, node, [0, 1], [0], [0])],
    )


def slurm_backend(cluster: LocalCluster) -> SlurmResourceManager:
    """The backend as the advisor builds it: by name, with the command line's options."""
    manager = make_resource_manager(
        "slurm", options={"slurm_conf": str(cluster.layout.slurm_conf), "slurm_timeout": 20.0}
    )
    assert isinstance(manager, SlurmResourceManager)
    return manager


def test_slurm_is_a_backend_of_the_command_line() -> None:
    assert "slurm" in backend_names()
    done = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "advise", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    for option in ("slurm", "--slurm-url", "--slurm-token-file", "--slurm-idle-action"):
        assert option in done.stdout


def test_the_applier_places_audits_and_reverts(slurm: LocalCluster, tmp_path: Path) -> None:
    node = slurm.node_names[2]
    blockers(slurm, *slurm.node_names)  # the job stays pending throughout
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    audit = AuditLog(tmp_path / "audit.sqlite")
    applier = Applier(slurm_backend(slurm), audit, actor=ACTOR, backend="slurm")
    rec = placement(job, node)
    (action,) = rec.actions

    (outcome,) = applier.apply([rec])
    assert outcome.result == "applied", outcome.detail
    (row,) = audit.entries(rec.id)
    assert (row.request_id, row.kind, row.workload, row.node) == (
        action.request_id,
        "place",
        f"slurm-job-{job}",
        node,
    )
    assert (row.state, row.backend, row.actor, row.before) == ("succeeded", "slurm", ACTOR, None)
    assert row.after is not None and row.after.node == node and row.action_id
    assert job_field(slurm, job, "ReqNodeList") == node

    (undone,) = applier.revert(rec.id)
    assert undone.result == "reverted", undone.detail
    placed, revert = audit.entries(rec.id)
    assert placed.state == "reverted" and placed.reverted_by == revert.request_id
    assert (revert.kind, revert.state, revert.reverts) == (
        "unplace",
        "succeeded",
        placed.request_id,
    )
    assert job_field(slurm, job, "ReqNodeList") == "(null)"
    assert job_state(slurm, job)[0] == "PENDING"
    (again,) = applier.apply([rec])
    assert again.result == "skipped" and "reverted earlier" in again.detail


def test_advise_revert_undoes_a_placement_from_another_process(
    slurm: LocalCluster, tmp_path: Path
) -> None:
    node = slurm.node_names[1]
    blockers(slurm, *slurm.node_names)
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    database = tmp_path / "audit.sqlite"
    rec = placement(job, node)
    applier = Applier(slurm_backend(slurm), AuditLog(database), actor=ACTOR, backend="slurm")
    assert [o.result for o in applier.apply([rec])] == ["applied"]

    command = [
        sys.executable, "-m", "toposcope.cli", "advise", "revert", rec.id,
        "--resource-manager", "slurm", "--slurm-conf", str(slurm.layout.slurm_conf),
        "--audit-db", str(database),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TOPOSCOPE_"))}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert f"revert {rec.id}: reverted" in done.stdout
    assert job_field(slurm, job, "ReqNodeList") == "(null)"
    assert [e.state for e in AuditLog(database).entries(rec.id)] == ["reverted", "succeeded"]
