"""The automatic loop placing a pending job on the local Slurm cluster: partitions and
accounts read from Slurm decide what it may touch, the placement is audited as automatic and
starts its verification, and the hourly node limit holds.
"""

from __future__ import annotations

from pathlib import Path

from tests.slurm.managers import blockers, job_field
from tests.slurm.test_apply_advisor import placement, slurm_backend
from toposcope.advisor.acting import Acting
from toposcope.advisor.audit import AuditLog
from toposcope.advisor.autoapply.config import AutoApplyPolicy, Scope
from toposcope.advisor.autoapply.decisions import DecisionLog
from toposcope.advisor.autoapply.loop import AutoApplier
from toposcope.advisor.outcomes import OutcomeLog
from toposcope.report.advisor_api import Verdict
from toposcope.report.recommendation import Report, RunInfo
from toposcope.slurm.localcluster import LocalCluster

NOW = 1_700_000_000.0


def loop(cluster: LocalCluster, db: Path, policy: AutoApplyPolicy) -> AutoApplier:
    """The loop acting through the Slurm backend, its audit log and decisions in ``db``."""
    manager = slurm_backend(cluster)
    acting = Acting(
        manager_factory=lambda nodes, out: manager,
        backend_name="slurm",
        audit=AuditLog(db),
        outcomes=OutcomeLog(db),
        actor="tester@host",
        known_nodes=lambda: cluster.node_names,
        clock=lambda: NOW,
        wait_seconds=5.0,
    )
    return AutoApplier(policy, acting, DecisionLog(db), lambda: NOW)


def report(*recs: object) -> Report:
    """A report holding ``recs``."""
    run = RunInfo("2023-11-14T22:13:20Z", "test", "10m", ("gpu-placement",), 0.05)
    return Report(run, tuple(recs))  # type: ignore[arg-type]


def test_the_loop_places_within_partitions_and_accounts(
    slurm: LocalCluster, tmp_path: Path
) -> None:
    node = slurm.node_names[3]
    blockers(slurm, *slurm.node_names)  # the jobs stay pending throughout
    job = slurm.sbatch("-A", "ml", "--gres=gpu:1", "--wrap", "sleep 600")
    other = slurm.sbatch("-A", "web", "--gres=gpu:1", "--wrap", "sleep 600")
    partition, account = job_field(slurm, job, "Partition"), "ml"
    assert partition and job_field(slurm, job, "Account") == account
    wanted, excluded = placement(job, node), placement(other, node)
    db = tmp_path / "audit.sqlite"

    # the account is excluded: nothing is placed, the decision says why
    shut = AutoApplyPolicy(
        kinds=frozenset({"place"}),
        min_confidence=0.5,
        dry_run_first=False,
        exclude=Scope(accounts=frozenset({account})),
    )
    made = loop(slurm, db, shut).tick(report(wanted), None, NOW)
    assert [(d.decision, d.code, d.group) for d in made] == [("skipped", "excluded", account)]
    assert made[0].reason == f"excluded: account {account}"
    assert job_field(slurm, job, "ReqNodeList") == "(null)"

    # only another partition included: still nothing
    elsewhere = AutoApplyPolicy(
        kinds=frozenset({"place"}),
        min_confidence=0.5,
        dry_run_first=False,
        include=Scope(partitions=frozenset({"no-such-partition"})),
    )
    made = loop(slurm, tmp_path / "other.sqlite", elsewhere).tick(report(wanted), None, NOW)
    assert [d.code for d in made] == ["scope"]
    assert made[0].reason == f"partition {partition} is not included"

    # its partition included: the best one is placed, the second waits for the node limit
    allowed = AutoApplyPolicy(
        kinds=frozenset({"place"}),
        min_confidence=0.5,
        dry_run_first=False,
        include=Scope(partitions=frozenset({partition})),
        per_node=1,
    )
    auto = loop(slurm, tmp_path / "allowed.sqlite", allowed)
    made = auto.tick(report(wanted, excluded), None, NOW)
    assert [(d.decision, d.code) for d in made] == [("applied", ""), ("skipped", "limit-node")]
    placed = made[0].recommendation_id
    assert job_field(slurm, int(made[0].workload.rsplit("-", 1)[1]), "ReqNodeList") == node
    rows = auto.acting.audit.entries(placed)
    assert [(r.kind, r.state, r.actor) for r in rows] == [
        ("place", "succeeded", "auto-apply via tester@host")
    ]
    verification = auto.acting.outcomes.get(placed)
    assert verification is not None and verification.verdict == Verdict.PENDING
    # undone as the verifier undoes a harmful change
    detail = auto.acting.revert_harmful(placed, "place", "progress fell")
    assert "reverted" in detail
    assert job_field(slurm, job, "ReqNodeList") == "(null)"
    assert job_field(slurm, other, "ReqNodeList") == "(null)"
