"""One round's recommendations against capacity and each other: the three defects an
unfamiliar machine's closed loop found (a moved job pinned onto full CPUs, two policies
pinning two jobs onto the same CPUs, a conflict won on an inflated GPU-job estimate).
"""

from __future__ import annotations

from collections import defaultdict

from tests.advisor.builders import GIB, cluster, pcie4, pcie8, workload
from toposcope.advisor.cpu_ledger import RATE_SLACK
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies import build
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.advisor.recommendations import Recommendation
from toposcope.advisor.runner import advise
from toposcope.resources import ActionKind


def numa_load_after(
    model: ClusterModel, recs: list[Recommendation]
) -> dict[tuple[str, int], float]:
    """Busy cores per NUMA node once every CPU-setting action of ``recs`` is applied."""
    load: dict[tuple[str, int], float] = defaultdict(float)
    moved: dict[str, list[int]] = {}
    for rec in recs:
        for action in rec.actions:
            if action.kind in (ActionKind.PIN, ActionKind.MIGRATE) and action.cpus:
                moved[action.workload] = list(action.cpus)
    for w in model.workloads:
        cores = w.cores_used() or 0.0
        cpus = moved.get(w.name)
        if cpus is None:
            for numa, share in w.cpu_shares().items():
                load[(w.node, numa)] += share * cores
            continue
        for state in model.nodes[w.node].numa_nodes:
            inside = len(set(cpus) & set(state.cpus))
            if inside:
                load[(w.node, state.id)] += cores * inside / len(cpus)
    return load


def test_a_pin_attached_to_a_move_respects_the_target_cpus() -> None:
    hog = workload("hog", node="n8", cpu={0: 8.0, 1: 8.0}, memory={0: GIB, 1: GIB})
    job = workload("train", node="n8", cpu={0: 1.0, 1: 1.0}, gpus=[0, 4])
    model = cluster([pcie8()], [hog, job])
    [rec] = JobMigration().evaluate(model).recommendations
    [action] = rec.actions
    assert action.kind == ActionKind.MIGRATE
    # every NUMA node's CPUs are busy: the job moves to its better GPUs unpinned
    assert (action.cpus, action.mems) == ([], [])
    assert rec.proposed["cpus"] == ""


def test_a_pin_attached_to_a_move_still_pins_where_there_is_room() -> None:
    job = workload("train", node="n8", cpu={0: 1.0, 1: 1.0}, gpus=[0, 4])
    [rec] = JobMigration().evaluate(cluster([pcie8()], [job])).recommendations
    [action] = rec.actions
    assert action.cpus and len(action.mems) == 1


def test_two_policies_do_not_put_two_jobs_on_the_same_cpus() -> None:
    """numa-pinning pins a CPU job onto NUMA node 1 and job-migration moves a GPU job onto
    socket 1's GPUs pinned to the same node; each fits alone, both do not.
    """
    cpu_job = workload("etl", node="n8", cpu={0: 1.0, 1: 5.0}, memory={0: GIB, 1: 4 * GIB})
    gpu_job = workload("train", node="n8", cpu={0: 1.5, 1: 1.5}, gpus=[0, 4])
    holders = [
        workload("x", node="n8", cpu={0: 0.2}, gpus=[1]),
        workload("y", node="n8", cpu={0: 0.2}, gpus=[2, 3]),
    ]
    model = cluster([pcie8()], [cpu_job, gpu_job, *holders])
    policies = build(["numa-pinning", "job-migration"])
    found = [r for p in policies for r in p.evaluate(model).recommendations]
    pinned_to_1 = [
        r for r in found if any(a.cpus and set(a.cpus) <= set(range(8, 16)) for a in r.actions)
    ]
    assert {r.target.workload for r in pinned_to_1} == {"etl", "train"}
    assert max(numa_load_after(model, found).values()) > 8 * (1 + RATE_SLACK)
    report = advise(model, policies, min_gain=0.0)
    kept = list(report.recommendations)
    assert len(kept) == 1
    load = numa_load_after(model, kept)
    assert all(cores <= 8 * (1 + RATE_SLACK) for cores in load.values())
    assert any("no CPU capacity left" in n.reason for n in report.notes)


def test_conflicts_are_resolved_on_a_consistent_estimate_for_gpu_jobs() -> None:
    """A GPU job on a weaker link with its CPUs and memory away from its GPUs: pinning it
    was priced with the CPU-training penalty (57.8 %) and won against the move that fixes
    both its link and its locality; a GPU job pays only part of that penalty.
    """
    job = workload("train", cpu={0: 4.0}, memory={0: 8 * GIB}, gpus=[2, 3])
    model = cluster([pcie4()], [job])
    policies = build(["numa-pinning", "job-migration"])
    found = {str(r.kind): r for p in policies for r in p.evaluate(model).recommendations}
    assert set(found) == {"pin", "migrate-job"}
    assert found["pin"].estimated_gain < 0.5776 / 2
    report = advise(model, policies, min_gain=0.0)
    [kept] = report.recommendations
    assert kept.kind == "migrate-job"
    [move] = kept.actions
    assert move.gpus == [0, 1] and move.mems == [0]
    [note] = [n for n in report.notes if found["pin"].id in n.reason]
    assert "gain x confidence" in note.reason
