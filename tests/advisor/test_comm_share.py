"""A workload's measured communication share (link traffic against the capacity of the links
its GPU set crosses, with SM activity) and how job-migration reports it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.advisor.builders import cluster, gpu, numa_nodes, pcie8, workload
from toposcope.advisor.comm_share import (
    NVLINK_GBPS,
    PCIE_CAPACITY_GBPS,
    measured_share,
)
from toposcope.advisor.model import ClusterModel, NodeModel, WorkloadModel
from toposcope.advisor.policies.job_migration import JobMigration
from toposcope.topology.model import LinkType

GB = 1e9


def _with_activity(node: NodeModel, **per_gpu: dict[str, Any]) -> NodeModel:
    """``node`` with the given fields set on GPUs named ``g<index>``."""
    gpus = tuple(replace(g, **per_gpu.get(f"g{g.index}", {})) for g in node.gpus)
    return replace(node, gpus=gpus)


def _sys_job(**per_gpu: dict[str, Any]) -> tuple[ClusterModel, WorkloadModel]:
    job = workload("train", node="n8", gpus=[0, 4])
    return cluster([_with_activity(pcie8(), **per_gpu)], [job]), job


def test_busy_pcie_links_and_idle_sms_are_communication_bound() -> None:
    half = 0.5 * PCIE_CAPACITY_GBPS[LinkType.SYS] * GB
    model, job = _sys_job(
        g0={"pcie_bytes_per_second": half, "sm_active": 0.3},
        g4={"pcie_bytes_per_second": half / 2, "sm_active": 0.3},
    )
    share = measured_share(model, job)
    assert share is not None
    assert share.worst_link == LinkType.SYS
    assert share.link_utilisation == pytest.approx(0.5)  # the busiest GPU
    assert share.share == pytest.approx(0.5)  # min(links busy, SMs idle 0.7)
    assert share.bound
    assert share.sm_active == pytest.approx(0.3)


def test_the_share_is_at_most_the_time_the_sms_were_idle() -> None:
    model, job = _sys_job(
        g0={"pcie_bytes_per_second": 0.9 * PCIE_CAPACITY_GBPS[LinkType.SYS] * GB,
            "sm_active": 0.8},
    )  # fmt: skip
    share = measured_share(model, job)
    assert share is not None
    assert share.share == pytest.approx(0.2)
    assert not share.bound  # busy links, but SMs mostly busy too


def test_without_sm_activity_the_share_is_the_link_utilisation_and_not_bound() -> None:
    model, job = _sys_job(g0={"pcie_bytes_per_second": 0.8 * PCIE_CAPACITY_GBPS[LinkType.SYS] * GB})
    share = measured_share(model, job)
    assert share is not None
    assert share.share == pytest.approx(0.8)
    assert share.sm_active is None and not share.bound


def test_nvlink_traffic_counts_against_the_bond_to_a_peer() -> None:
    node = NodeModel(
        "dgx",
        numa_nodes(),
        (
            gpu(0, 0, nvlink_bytes_per_second=3 * NVLINK_GBPS * GB, sm_active=0.2),
            gpu(1, 0, nvlink_bytes_per_second=0.0, sm_active=0.2),
        ),
        {(0, 1): "NV12", (1, 0): "NV12"},
    )
    job = workload("train", node="dgx", gpus=[0, 1])
    share = measured_share(cluster([node], [job]), job)
    assert share is not None
    assert share.worst_link == LinkType.NVLINK
    assert share.nvlink_capacity_gbps == 12 * NVLINK_GBPS
    assert "NVLink 150.0 of 600 GB/s; SM active 0.20" in share.text()
    assert share.link_utilisation == pytest.approx(3 / 12)


def test_the_workloads_own_figures_win_and_a_shared_gpu_says_so() -> None:
    model, job = _sys_job(g0={"pcie_bytes_per_second": 1.0})
    own = replace(
        job,
        gpu_pcie_bytes_per_second={0: 0.25 * PCIE_CAPACITY_GBPS[LinkType.SYS] * GB},
        gpus_shared=True,
    )
    share = measured_share(replace(model, workloads=(own,)), own)
    assert share is not None
    assert share.link_utilisation == pytest.approx(0.25)
    assert share.shared


def test_no_traffic_series_means_no_measured_share() -> None:
    model, job = _sys_job(g0={"sm_active": 0.1})
    assert measured_share(model, job) is None


def test_a_move_reports_the_measured_share_and_that_the_prior_made_the_estimate() -> None:
    model, _ = _sys_job(
        g0={"pcie_bytes_per_second": 0.5 * PCIE_CAPACITY_GBPS[LinkType.SYS] * GB,
            "sm_active": 0.3},
    )  # fmt: skip
    model = replace(model, gpu_activity_source="dcgm")
    [rec] = JobMigration().evaluate(model).recommendations
    assert rec.estimated_gain == pytest.approx(2.0 / 1.0 - 1)  # the prior's, unchanged
    shares = [e for e in rec.evidence if e.series == "measured_communication_share"]
    assert [dict(e.labels) for e in shares] == [
        {"node": "n8", "workload": "train", "link": "SYS", "source": "dcgm"}
    ]
    assert shares[0].value == pytest.approx(0.5)
    assert "estimate from the prior (sensitivity 1); measured communication share 0.50" in (
        rec.gain_model
    )
    assert "communication-bound" in rec.gain_model
    assert "PCIe 12.0 of 24 GB/s over SYS; SM active 0.30" in rec.gain_model  # no NVLink
    state = rec.current["communication_share"]
    assert state["estimate"] == "prior"
    assert state["measured"]["share"] == pytest.approx(0.5) and state["measured"]["bound"]
    assert rec.to_dict()["current"]["communication_share"]["measured"]["source"] == "dcgm"


def test_a_move_without_traffic_series_says_the_prior_stands_alone() -> None:
    model, _ = _sys_job()
    [rec] = JobMigration().evaluate(model).recommendations
    assert rec.gain_model.endswith(
        "estimate from the prior (sensitivity 1); no measured link traffic"
    )
    assert rec.current["communication_share"]["measured"] is None
    assert not [e for e in rec.evidence if e.series.startswith("measured_")]


def test_a_defragmentation_reports_the_large_jobs_measured_share() -> None:
    quad = workload("quad", node="n8", gpus=[0, 1, 4, 5])
    singles = [workload("s2", node="n8", gpus=[2]), workload("s6", node="n8", gpus=[6])]
    busy = {"pcie_bytes_per_second": 0.25 * PCIE_CAPACITY_GBPS[LinkType.SYS] * GB}
    node = _with_activity(pcie8(), g0=busy, g2=busy)
    [rec] = JobMigration().evaluate(cluster([node], [quad, *singles])).recommendations
    assert rec.proposed["defragment"]  # small jobs move first
    assert rec.estimated_gain == pytest.approx(2.0 / 1.4 - 1 - 600 / 21600, abs=1e-6)
    assert "estimate from the prior (sensitivity 1); measured communication share 0.25" in (
        rec.gain_model
    )
    [share] = [e for e in rec.evidence if e.series == "measured_communication_share"]
    assert share.labels["workload"] == "quad" and share.value == pytest.approx(0.25)
    assert rec.current["communication_share"]["measured"]["link_utilisation"] == 0.25
