"""job-migration's link gain from a job's measured traffic (time per byte over the prices'
bandwidths), the prior where nothing is measured, and the PCIe-path rule lifted by measured
prices.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import permutations
from typing import Any

import pytest

from tests.advisor.builders import cluster, pcie8, workload
from toposcope.advisor.comm_share import measured_share
from toposcope.advisor.gpu_search import GpuSetSearch
from toposcope.advisor.gpu_sets import rank_sets
from toposcope.advisor.link_gain import MEASURED, PRIOR, SAME_BANDWIDTH, link_gain
from toposcope.advisor.link_prices import Measured
from toposcope.advisor.model import ClusterModel, NodeModel, WorkloadModel
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.advisor.policies.job_replace import choice_order
from toposcope.topology.model import LinkType

GB = 1e9
A100 = "NVIDIA A100-PCIE-40GB"
#: what a bandwidth test measured on the machine, GB/s each way, by link
SWITCH_GBPS, BRIDGE_GBPS, SYS_GBPS = 22.0, 16.0, 9.0
TIERS = {"PIX": SWITCH_GBPS, "NODE": BRIDGE_GBPS, "SYS": SYS_GBPS}


def _node(measured: dict[tuple[int, int], float] | None = None, **per_gpu: Any) -> NodeModel:
    """pcie8 with A100 PCIe GPUs, GPUs ``g<i>`` given the fields in ``per_gpu``, and pairs
    measured at the given GB/s (``None``: every pair at :data:`TIERS`; ``{}``: none, the
    topology prices them).
    """
    measured = _all_pairs(TIERS) if measured is None else measured
    node = pcie8()
    gpus = tuple(replace(g, model=A100, **per_gpu.get(f"g{g.index}", {})) for g in node.gpus)
    pairs = {
        p: Measured(gbps, f"p2p:{i}")
        for i, (pair, gbps) in enumerate(sorted(measured.items()))
        for p in (pair, pair[::-1])
    }
    return replace(node, gpus=gpus, measured_bandwidth=pairs)


def _all_pairs(gbps_of: dict[str, float]) -> dict[tuple[int, int], float]:
    """Every pair of pcie8 measured by its link: PIX, NODE or SYS."""
    node = pcie8()
    return {(a, b): gbps_of[str(node.link(a, b))] for a, b in permutations(range(8), 2) if a < b}


def _sets(model: ClusterModel, job: WorkloadModel, to: tuple[int, ...]) -> tuple[Any, Any]:
    node = model.nodes[job.node]
    cells = GpuSetSearch(model, cross_node=False).node_cells(job.node)
    return rank_sets(node, job.gpus, 2, cells)[0], rank_sets(node, to, 2, cells)[0]


def test_a_busy_link_gains_by_the_time_per_byte_of_the_new_pair() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    each_way = 0.75 * SYS_GBPS * GB  # busy 75 % of the time across the sockets
    model = cluster([_node(g0={"pcie_bytes_per_second": 2 * each_way})], [job])
    now, after = _sets(model, job, (0, 1))
    found = link_gain(measured_share(model, job), now, after, 1.0)
    assert found.source == MEASURED
    assert found.share == pytest.approx(0.75)
    ratio = 0.25 + 0.75 * SYS_GBPS / SWITCH_GBPS
    assert found.gain == pytest.approx(1 / ratio - 1)
    assert found.gain > now.factor() / after.factor() - 1  # above the prior: it waits on its link


def test_a_job_that_barely_uses_its_link_gains_little() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    model = cluster([_node(g0={"pcie_bytes_per_second": 0.1 * SYS_GBPS * GB})], [job])
    now, after = _sets(model, job, (0, 1))
    found = link_gain(measured_share(model, job), now, after, 1.0)
    assert found.source == MEASURED and found.share == pytest.approx(0.05)
    assert 0 < found.gain < 0.05


def test_the_share_is_at_most_the_time_the_sms_are_idle() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    busy = {"pcie_bytes_per_second": 2 * SYS_GBPS * GB, "sm_active": 0.7}
    model = cluster([_node(g0=busy)], [job])
    now, after = _sets(model, job, (0, 1))
    assert link_gain(measured_share(model, job), now, after, 1.0).share == pytest.approx(0.3)


def test_without_traffic_or_measured_bandwidth_the_prior_stands_and_says_so() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    model = cluster([_node()], [job])
    now, after = _sets(model, job, (0, 1))
    found = link_gain(measured_share(model, job), now, after, 1.0)
    assert found.source == PRIOR and found.share is None
    assert found.gain == pytest.approx(now.factor() / after.factor() - 1)
    assert "estimate from the prior" in found.text and "no measured link traffic" in found.text
    busy = {"g0": {"pcie_bytes_per_second": SYS_GBPS * GB}}
    topology = cluster([_node({}, **busy)], [job])  # priced from the topology's bandwidths
    now, after = _sets(topology, job, (0, 1))
    assert now.price.source == "topology" and now.price.gbps is not None
    found = link_gain(measured_share(topology, job), now, after, 1.0)
    assert found.source == PRIOR and "pair bandwidths not measured" in found.text
    assert found.gain == pytest.approx(2.0 / 1.0 - 1)


def test_a_move_says_which_estimate_it_used_in_text_and_json() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    model = cluster([_node(g0={"pcie_bytes_per_second": 1.5 * SYS_GBPS * GB})], [job])
    [rec] = JobMigration().evaluate(model).recommendations
    ratio = 0.25 + 0.75 * SYS_GBPS / SWITCH_GBPS
    assert rec.estimated_gain == pytest.approx(1 / ratio - 1, abs=1e-5)
    assert "estimate from the measured link traffic" in rec.gain_model
    assert "(1 - s) + s x B_now / B_after" in rec.gain_model
    state = rec.to_dict()["current"]["communication_share"]
    assert state["estimate"] == "measured" and state["measured"] is not None
    plain = JobMigration().evaluate(cluster([_node({})], [job])).recommendations[0]
    assert plain.current["communication_share"]["estimate"] == "prior"
    assert "estimate from the prior (sensitivity 1)" in plain.gain_model


def test_a_move_that_saves_less_than_its_cost_by_measurement_is_a_note() -> None:
    job = workload("train", node="n8", gpus=[0, 4])
    quiet = {"pcie_bytes_per_second": 0.01 * SYS_GBPS * GB}
    result = JobMigration().evaluate(cluster([_node(g0=quiet)], [job]))
    assert result.recommendations == ()
    assert "less than the checkpoint-restore cost" in result.undecided[0].reason


def test_measured_prices_decide_a_move_between_pcie_paths_of_one_socket() -> None:
    """With every pair measured, NODE to PIX is no platform guess: it moves when the
    switch is faster, and stays when the host bridge is (the case the rule guards).
    """
    job = workload("train", node="n8", gpus=[1, 3])
    traffic = {"g1": {"pcie_bytes_per_second": 2 * 15.0 * GB}}
    faster = _node(_all_pairs({"PIX": 24.0, "NODE": 16.0, "SYS": 9.0}), **traffic)
    [rec] = JobMigration().evaluate(cluster([faster], [job])).recommendations
    assert rec.proposed["worst_link"] == "PIX"
    share = 15.0 / 16.0
    assert rec.estimated_gain == pytest.approx(1 / (1 - share + share * 16.0 / 24.0) - 1, abs=1e-5)
    slower = _node(_all_pairs({"PIX": 16.0, "NODE": 19.0, "SYS": 9.0}), **traffic)
    result = JobMigration().evaluate(cluster([slower], [job]))
    assert result.recommendations == ()
    unmeasured = JobMigration().evaluate(cluster([_node({}, **traffic)], [job]))
    assert unmeasured.recommendations == ()  # topology prices: the note stands
    assert "from NODE to PIX" in unmeasured.undecided[0].reason


def test_a_move_onto_nvlink_is_measured_against_the_nvlinks_bandwidth() -> None:
    """From a measured pair, a move onto NVLink is priced by the job's traffic over the
    NVLinks' bandwidth (the topology's: NV4 of NVLink 3, 100 GB/s each way), not the tier
    prior, which puts NVLink only 1.25 times above a switch; off NVLink the prior stays.
    """
    pcie_only = {p: g for p, g in _all_pairs(TIERS).items() if p != (0, 1)}  # as measured
    node = _node(pcie_only, g0={"pcie_bytes_per_second": 1.5 * SYS_GBPS * GB})
    sxm = tuple(replace(g, model="NVIDIA A100-SXM4-40GB") for g in node.gpus)
    links = {**node.links, (0, 1): "NV4", (1, 0): "NV4"}
    job = workload("train", node="n8", gpus=[0, 4])
    model = cluster([replace(node, gpus=sxm, links=links)], [job])
    now, after = _sets(model, job, (0, 1))
    assert after.worst_link == LinkType.NVLINK and now.worst_link == LinkType.SYS
    assert after.price.source == "topology" and after.price.gbps == pytest.approx(100.0)
    found = link_gain(measured_share(model, job), now, after, 1.0)
    assert found.source == MEASURED
    share = 0.75  # each way 0.75 x 9 GB/s over the measured 9 GB/s
    assert found.gain == pytest.approx(1 / (1 - share + share * SYS_GBPS / 100.0) - 1)
    assert found.gain > now.factor() / after.factor() - 1
    back = link_gain(measured_share(model, job), after, now, 1.0)
    assert "B_after: the NVLinks, from the topology" in found.text
    assert back.source == PRIOR and "off or between NVLinks" in back.text


def test_a_pair_within_the_tests_spread_is_no_faster() -> None:
    measured = {**_all_pairs(TIERS), (2, 3): SWITCH_GBPS * (1 + SAME_BANDWIDTH / 2)}
    job = workload("train", node="n8", gpus=[0, 1])
    busy = {"pcie_bytes_per_second": 2 * 20.0 * GB}
    model = cluster([_node(measured, g0=busy)], [job])
    now, after = _sets(model, job, (2, 3))
    assert after.price.gbps > now.price.gbps  # the test read it a little faster
    found = link_gain(measured_share(model, job), now, after, 1.0)
    assert found.source == MEASURED and found.gain == pytest.approx(0.0)
    assert JobMigration().evaluate(model).recommendations == ()


def test_the_job_gaining_most_per_gpu_chooses_first() -> None:
    """A 4-GPU job gaining 100 % takes twice the GPUs of a 2-GPU job gaining 60 %: the
    2-GPU job chooses first (ties by key).
    """
    node = pcie8()
    quad = workload("quad", node="n8", gpus=[0, 1, 4, 5])
    pair = workload("pair", node="n8", gpus=[2, 6])
    other = workload("other", node="n8", gpus=[3, 7])
    sets = _sets(cluster([node], [quad, pair]), pair, (2, 3))
    options = [(1.0, quad, *sets), (0.6, pair, *sets), (0.6, other, *sets)]
    ordered = [o[1].name for o in sorted(options, key=choice_order)]
    assert ordered == ["other", "pair", "quad"]


def test_the_smaller_pcie_direction_is_the_peer_traffic() -> None:
    """Input copies add to what a GPU receives: the share rests on the smaller direction."""
    job = workload("train", node="n8", gpus=[0, 4])
    copies = {"pcie_bytes_per_second": 2.0 * SYS_GBPS * GB,  # 0.5 sent + 1.5 received
              "pcie_each_way_bytes_per_second": 0.5 * SYS_GBPS * GB}  # fmt: skip
    model = cluster([_node(g0=copies)], [job])
    now, after = _sets(model, job, (0, 1))
    found = link_gain(measured_share(model, job), now, after, 1.0)
    assert found.share == pytest.approx(0.5)  # not 1.0 from half of both directions


def test_a_move_off_nvlink_prices_the_new_pair_at_least_at_its_tier() -> None:
    """A measured cross-socket pair prices below the tier's 2.0 (it is relative to the
    node's fastest measured PCIe pair), the NVLinks at the tier's 0.8 (relative to a
    switch): off NVLink the new pair counts at least at its tier, so leaving the NVLinks for
    a measured SYS pair is the tier prior's loss, not the mixed prices' smaller one.
    """
    pcie_only = {p: g for p, g in _all_pairs(TIERS).items() if p != (0, 1)}
    node = _node(pcie_only, g0={"nvlink_bytes_per_second": 40 * GB})
    sxm = tuple(replace(g, model="NVIDIA A100-SXM4-40GB") for g in node.gpus)
    links = {**node.links, (0, 1): "NV4", (1, 0): "NV4"}
    job = workload("train", node="n8", gpus=[0, 1])
    model = cluster([replace(node, gpus=sxm, links=links)], [job])
    now, after = _sets(model, job, (0, 4))
    assert now.worst_link == LinkType.NVLINK and after.price.source == MEASURED
    assert after.factor() < 2.0  # the measured price alone
    found = link_gain(measured_share(model, job), now, after, 1.0)
    assert found.source == PRIOR and "at least at its tier's 2" in found.text
    assert found.gain == pytest.approx(now.factor() / 2.0 - 1)
    assert link_gain(None, now, after, 1.0).gain == pytest.approx(found.gain)
