"""job-migration's exchange: two jobs of one full node that interleave over two switches
trade GPUs at once, each pinned next to its new GPUs; no exchange that leaves a job worse,
none on unmeasured prices between PCIe paths, and the simulator's plan carries the pins.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import permutations
from typing import Any

import pytest

from tests.advisor.builders import cluster, pcie4, pcie8, workload
from toposcope.advisor.gpu_sets import rank_sets
from toposcope.advisor.link_prices import Measured
from toposcope.advisor.model import ClusterModel, NodeModel, WorkloadModel
from toposcope.advisor.policies.job_exchange import neutral
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.advisor.rmclients.joint_plan import joint_plan
from toposcope.advisor.rmclients.plans import ApiPlanner
from toposcope.rm.plan import HttpStep

GB = 1e9
A100 = "NVIDIA A100-PCIE-40GB"
#: a bandwidth test's figures on the machine, GB/s each way, by link
TIERS = {"PIX": 22.0, "NODE": 16.0, "SYS": 9.0}


def measured(node: NodeModel, gbps_of: dict[str, float] | None = None) -> NodeModel:
    """``node`` with A100 PCIe GPUs, every pair measured at its link's figure."""
    figures = TIERS if gbps_of is None else gbps_of
    count = len(node.gpus)
    pairs = {
        (a, b): Measured(figures[str(node.link(a, b))], f"p2p:{a}-{b}")
        for a, b in permutations(range(count), 2)
    }
    gpus = tuple(replace(g, model=A100) for g in node.gpus)
    return replace(node, gpus=gpus, measured_bandwidth=pairs)


def busy(node: NodeModel, each_way: float, *indexes: int) -> NodeModel:
    """``node`` whose GPUs ``indexes`` move ``each_way`` bytes per second each way."""
    gpus = tuple(
        replace(g, pcie_bytes_per_second=2 * each_way) if g.index in indexes else g
        for g in node.gpus
    )
    return replace(node, gpus=gpus)


def interleaved(node: NodeModel) -> tuple[ClusterModel, list[WorkloadModel]]:
    """pcie8 full: f on 4, 7 and h on 5, 6 (each across socket 1's host bridge), two jobs
    on socket 0's switches; f and h move 12 GB/s each way.
    """
    jobs = [
        workload("e", node="n8", gpus=[0, 1], cpu={0: 2.0}),
        workload("a", node="n8", gpus=[2, 3], cpu={0: 2.0}),
        workload("f", node="n8", gpus=[4, 7], cpu={1: 2.0}),
        workload("h", node="n8", gpus=[5, 6], cpu={1: 2.0}),
    ]
    return cluster([busy(node, 12 * GB, 4, 5, 6, 7)], jobs), jobs


def exchange_of(model: ClusterModel) -> Any:
    """The one exchange job-migration recommends on ``model``."""
    recs = [r for r in JobMigration().evaluate(model).recommendations if r.proposed.get("joint")]
    assert len(recs) == 1
    return recs[0]


def test_two_interleaved_jobs_trade_gpus_and_both_end_behind_one_switch() -> None:
    model, _ = interleaved(measured(pcie8()))
    rec = exchange_of(model)
    assert rec.kind == "migrate-job" and rec.actions == ()
    jobs = {j["job"]: j for j in rec.proposed["jobs"]}
    assert set(jobs) == {"f", "h"}
    new = {name: tuple(j["parts"][0]["gpus"]) for name, j in jobs.items()}
    assert sorted(new.values()) == [(4, 5), (6, 7)]
    assert all(j["worst_link_now"] == "NODE" and j["worst_link"] == "PIX" for j in jobs.values())
    socket1 = list(model.nodes["n8"].numa(1).cpus)  # type: ignore[union-attr]
    for job in jobs.values():
        [part] = job["parts"]
        assert part["cpus"] == socket1 and part["mems"] == [1]
        assert job["estimate"] == "measured" and job["gain"] > 0
    share = 12 / 16  # busy 75 % of the time on a 16 GB/s pair
    each = 1 / ((1 - share) + share * 16 / 22) - 1
    assert rec.estimated_gain == pytest.approx(each, rel=1e-3)
    assert set(rec.claims) >= {"workload:n8/f", "workload:n8/h"}


def test_no_exchange_when_the_measured_host_bridge_is_as_fast_as_the_switch() -> None:
    model, _ = interleaved(measured(pcie8(), {"PIX": 16.0, "NODE": 16.3, "SYS": 9.0}))
    recs = JobMigration().evaluate(model).recommendations
    assert not [r for r in recs if r.proposed.get("joint")]


def test_no_exchange_between_pcie_paths_on_the_topology_prices_alone() -> None:
    model, _ = interleaved(pcie8())
    recs = JobMigration().evaluate(model).recommendations
    assert not [r for r in recs if r.proposed.get("joint")]


def test_a_job_across_sockets_trades_with_one_that_only_gains_from_it_on_the_prior() -> None:
    """pcie4 full: a on 0, 2 and b on 1, 3, both across sockets: a takes the switch pair and
    b the host-bridge pair, both better than now; nothing is measured."""
    jobs = [workload("a", gpus=[0, 2]), workload("b", gpus=[1, 3])]
    rec = exchange_of(cluster([pcie4()], jobs))
    new = {j["job"]: (j["worst_link"], j["parts"][0]["gpus"]) for j in rec.proposed["jobs"]}
    assert sorted(new.values()) == [("NODE", [2, 3]), ("PIX", [0, 1])]
    assert all(j["estimate"] == "prior" and j["gain"] > 0 for j in rec.proposed["jobs"])


def test_a_partner_that_would_lose_is_left_alone() -> None:
    """a on the host-bridge pair 2, 3 would gain from b's switch pair 0, 1, which b would
    lose: nothing moves."""
    jobs = [workload("a", gpus=[2, 3]), workload("b", gpus=[0, 1])]
    recs = JobMigration().evaluate(cluster([pcie4()], jobs)).recommendations
    assert not [r for r in recs if r.proposed.get("joint")]


def test_the_simulator_plan_names_each_part_with_its_pin() -> None:
    model, _ = interleaved(measured(pcie8()))
    rec = exchange_of(model)
    plan = joint_plan(rec, "http://sim:8080/api/v1")
    assert not plan.refused
    [step] = plan.steps
    assert isinstance(step, HttpStep)
    body: dict[str, Any] = dict(step.body) if isinstance(step.body, dict) else {}
    parts = {p["part"]: p for j in body["jobs"] for p in j["parts"]}
    assert set(parts) == {"f", "h"}
    assert all(p["mems"] == [1] and p["cpus"] for p in parts.values())
    sim = ApiPlanner("http://sim:8080", "sim", None)
    assert "job-migration" in sim.gang_policies
    assert "job-migration" not in ApiPlanner("http://{node}:9848", "agent", ()).gang_policies


def test_a_malformed_pin_is_refused_before_any_body() -> None:
    model, _ = interleaved(measured(pcie8()))
    rec = exchange_of(model)
    jobs = [dict(j) for j in rec.proposed["jobs"]]
    jobs[0]["parts"] = [{**jobs[0]["parts"][0], "cpus": [-1]}]
    plan = joint_plan(replace(rec, proposed={**rec.proposed, "jobs": jobs}), "http://sim:8080")
    assert plan.refused and plan.steps == ()


def test_a_partner_on_the_same_link_within_a_measurements_spread_counts_as_unchanged() -> None:
    figures = {(0, 2): 16.0, (1, 3): 15.5, (0, 3): 14.0, (0, 1): 22.0}
    node = measured(pcie8())
    pairs = dict(node.measured_bandwidth)
    for (a, b), gbps in figures.items():
        pairs[(a, b)] = pairs[(b, a)] = Measured(gbps, f"p2p:{a}-{b}")
    node = replace(node, measured_bandwidth=pairs)

    def placed(*gpus: int) -> Any:
        return rank_sets(node, gpus, len(gpus))[0]

    assert neutral(placed(0, 2), placed(1, 3))  # NODE, 16.0 and 15.5: within 5 %
    assert not neutral(placed(0, 2), placed(0, 3))  # NODE, 16.0 and 14.0
    assert not neutral(placed(0, 2), placed(0, 1))  # NODE to PIX
    plain = pcie4()
    assert neutral(rank_sets(plain, (0, 2), 2)[0], rank_sets(plain, (1, 3), 2)[0])  # SYS, tier
