"""One round's recommendations against capacity and each other: the three defects an
unfamiliar machine's closed loop found (a moved job pinned onto full CPUs, two policies
pinning two jobs onto the same CPUs, a conflict won on an inflated GPU-job estimate).
"""

from __future__ import annotations

from collections import defaultdict

from tests.advisor.builders import GIB, cluster, pcie4, pcie8, workload
from toposcope.advisor.capacity_ledger import RATE_SLACK, CapacityLedger
from toposcope.advisor.model import ClusterModel
from toposcope.advisor.policies import build, parse_overrides
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.advisor.recommendations import make_recommendation, resolve_conflicts
from toposcope.advisor.runner import advise
from toposcope.report.recommendation import Recommendation, RecommendationKind, Risk, Target
from toposcope.rm import ActionKind, ActionRequest


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
    assert any("no capacity left" in n.reason for n in report.notes)


def test_conflicts_are_resolved_on_a_consistent_estimate_for_gpu_jobs() -> None:
    """A GPU job on a weaker link with its CPUs and memory away from its GPUs: pinning it
    was priced with the CPU-training penalty (57.8 %) and won against the move that fixes
    both its link and its locality; a GPU job pays only part of that penalty.
    """
    job = workload("train", cpu={0: 4.0}, memory={0: 8 * GIB}, gpus=[2, 3])
    model = cluster([pcie4()], [job])
    opt_in = parse_overrides(["job-migration.move_between_pcie_tiers=true"])
    policies = build(["numa-pinning", "job-migration"], opt_in)
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


def claimless(
    kind: RecommendationKind, name: str, action: ActionRequest, gain: float = 0.3
) -> Recommendation:
    """A recommendation that declares no claims: only the ledger can stop it."""
    return make_recommendation(
        kind=kind,
        policy="test",
        target=Target("n1", name),
        summary=f"{kind} {name}",
        current={},
        proposed={"name": name},
        evidence=[],
        estimated_gain=gain,
        gain_model="test",
        confidence=0.8,
        risk=Risk.LOW,
        actions=[action],
    )


def test_two_recommendations_never_take_the_same_gpu() -> None:
    model = cluster([pcie4()], [workload("holder", gpus=[0])])
    a = claimless(
        RecommendationKind.PLACE, "a", ActionRequest("", ActionKind.PLACE, "a", "n1", gpus=[1])
    )
    b = claimless(
        RecommendationKind.PLACE,
        "b",
        ActionRequest("", ActionKind.PLACE, "b", "n1", gpus=[1, 2]),
        gain=0.2,
    )
    kept, notes = resolve_conflicts([a, b], CapacityLedger(model))
    assert [r.target.workload for r in kept] == ["a"]
    assert "GPU 1 of n1" in notes[0].reason


def test_a_gpu_freed_in_the_same_round_can_be_taken() -> None:
    model = cluster([pcie4()], [workload("notebook", gpus=[0])])
    take = claimless(
        RecommendationKind.PLACE, "job", ActionRequest("", ActionKind.PLACE, "job", "n1", gpus=[0])
    )
    alone, notes = resolve_conflicts([take], CapacityLedger(model))
    assert alone == [] and "GPU 0 of n1" in notes[0].reason
    free = claimless(
        RecommendationKind.RELEASE_IDLE,
        "notebook",
        ActionRequest("", ActionKind.RELEASE, "notebook", "n1", gpus=[0]),
    )
    kept, _ = resolve_conflicts([take, free], CapacityLedger(model))
    assert {r.target.workload for r in kept} == {"job", "notebook"}


def test_two_page_moves_do_not_overfill_a_numa_node() -> None:
    """NUMA node 1 has 64 GiB free: one 40 GiB workload's pages fit, two do not."""
    a = workload("a", cpu={0: 1.0}, memory={0: 40 * GIB})
    b = workload("b", cpu={0: 1.0}, memory={0: 40 * GIB})
    model = cluster([pcie4()], [a, b])

    def to_node_1(name: str, gain: float) -> Recommendation:
        move = ActionRequest("", ActionKind.MIGRATE_MEMORY, name, "n1", mems=[1])
        return claimless(RecommendationKind.MIGRATE_MEMORY, name, move, gain)

    kept, notes = resolve_conflicts(
        [to_node_1("a", 0.3), to_node_1("b", 0.2)], CapacityLedger(model)
    )
    assert [r.target.workload for r in kept] == ["a"]
    assert "NUMA node 1 of n1" in notes[0].reason and "GiB in use" in notes[0].reason
