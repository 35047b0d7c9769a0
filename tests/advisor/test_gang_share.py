"""A multi-node job's move priced from its own NIC load: the per-level slowdown follows the
busiest NIC that serves the job alone, the prior stands (and says why) without one, and the
joint re-placement and the single moves of fabric-placement say which priced them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from tests.advisor.builders import cluster, pcie8
from tests.advisor.test_fabric_swaps import LONG, SPREAD, joint, model, policy
from toposcope.advisor.calibration_cells import estimate_basis
from toposcope.advisor.fabric_wait import LEVEL_SLOWDOWN_PRIOR
from toposcope.advisor.gang_share import MAX_PER_LEVEL, gang_share
from toposcope.advisor.model import ClusterModel, WorkloadModel
from toposcope.advisor.nic_state import NicState, NodeNics

#: one HDR port: 200 Gb/s in bytes per second
LINE_RATE = 25e9
NICS = tuple(f"mlx5_{i}" for i in range(4))


def node_nics(load: Mapping[str, float]) -> NodeNics:
    """An 8-GPU node's four NICs, ``mlx5_k`` nearest to GPUs 2k and 2k+1, each NIC's load
    (share of line rate) as given (a NIC not named publishes no traffic).
    """
    links = {
        (g, nic): "PIX" if nic == f"mlx5_{g // 2}" else "SYS" for g in range(8) for nic in NICS
    }
    return NodeNics(
        links,
        bytes_per_second={nic: share * LINE_RATE for nic, share in load.items()},
        port_rate=dict.fromkeys(NICS, LINE_RATE),
    )


def with_nics(base: ClusterModel, loads: Mapping[str, Mapping[str, float]]) -> ClusterModel:
    """``base`` with NIC figures on the nodes of ``loads``."""
    return replace(base, nics=NicState({n: node_nics(load) for n, load in loads.items()}))


def two_nodes(others: tuple[WorkloadModel, ...] = ()) -> ClusterModel:
    """A job holding GPUs 0-3 of n1 and n2, ``others`` beside it."""
    parts = tuple(WorkloadModel("job", n, gpus=(0, 1, 2, 3)) for n in ("n1", "n2"))
    return cluster([pcie8("n1"), pcie8("n2")], parts + others)


JOB = {"n1": (0, 1, 2, 3), "n2": (0, 1, 2, 3)}


def test_the_busiest_nic_of_the_job_sets_its_per_level_slowdown() -> None:
    loads = {"n1": {"mlx5_0": 0.2, "mlx5_1": 0.24}, "n2": {"mlx5_0": 0.1, "mlx5_1": 0.1}}
    found = gang_share(with_nics(two_nodes(), loads), JOB, 1.0, LEVEL_SLOWDOWN_PRIOR)
    # sending at line rate 24 % of a step that one level stretched to 1 + c: c = u / (1 - u)
    assert found.measured and found.nic == "n1/mlx5_1"
    assert found.load == pytest.approx(0.24)
    assert found.per_level == pytest.approx(0.24 / 0.76)
    # two weighted levels above its tightest: c = u / (1 - 2u)
    assert gang_share(
        with_nics(two_nodes(), loads), JOB, 2.0, LEVEL_SLOWDOWN_PRIOR
    ).per_level == pytest.approx(0.24 / 0.52)
    assert "measured NIC load 0.240" in found.describe()
    assert found.as_json()["estimate"] == "measured"


def test_nics_near_other_workloads_gpus_are_not_the_jobs_measurement() -> None:
    # GPU 4 of n1 belongs to another job: mlx5_2 carries its traffic too, so the busy
    # mlx5_2 is left out and the job's own NICs price it
    other = (WorkloadModel("other", "n1", gpus=(4,)),)
    loads = {"n1": {"mlx5_0": 0.1, "mlx5_1": 0.1, "mlx5_2": 0.9}, "n2": {"mlx5_0": 0.1}}
    found = gang_share(
        with_nics(two_nodes(other), loads), {"n1": (0, 1, 2, 3, 5), "n2": JOB["n2"]}, 1.0, 0.125
    )
    assert found.measured and found.load == pytest.approx(0.1)
    # every NIC of the job shared: no measurement, and the prior says so
    shared = (WorkloadModel("other", "n1", gpus=(1,)), WorkloadModel("other", "n2", gpus=(3,)))
    prior = gang_share(
        with_nics(two_nodes(shared), {"n1": {"mlx5_0": 0.5}, "n2": {"mlx5_1": 0.5}}),
        {"n1": (0,), "n2": (2,)},
        1.0,
        0.125,
    )
    assert not prior.measured and prior.per_level == 0.125
    assert "other workloads" in prior.reason and "the prior" in prior.describe()


def test_without_nic_figures_or_with_a_counter_total_the_prior_stands() -> None:
    assert gang_share(two_nodes(), JOB, 1.0, 0.125).source == "prior"
    total = gang_share(with_nics(two_nodes(), {"n1": {"mlx5_0": 40.0}}), JOB, 1.0, 0.125)
    assert total.source == "prior" and total.load == pytest.approx(40.0)
    assert "above line rate" in total.reason
    idle = gang_share(with_nics(two_nodes(), {"n1": {"mlx5_0": 0.0}}), JOB, 1.0, 0.125)
    assert idle.source == "prior" and "no traffic" in idle.reason


def test_a_saturated_nic_is_priced_at_the_cap() -> None:
    found = gang_share(with_nics(two_nodes(), {"n1": {"mlx5_0": 0.6}}), JOB, 2.0, 0.125)
    assert found.measured and found.per_level == MAX_PER_LEVEL


def spread_loads(load: float) -> dict[str, dict[str, float]]:
    """Every NIC of the fabric-spread nodes at ``load`` of line rate."""
    return {f"fs-0{n}": dict.fromkeys(NICS, load) for n in range(1, 7)}


def test_a_joint_move_the_prior_leaves_out_pays_at_the_measured_load() -> None:
    left = dict.fromkeys(SPREAD, 3000.0)
    assert joint(left) == []  # the prior: 3,000 s x 0.2 = 600 s saved, one restart each
    busy = with_nics(model(left), spread_loads(0.3))
    [rec] = [r for r in policy().evaluate(busy).recommendations if r.proposed.get("joint")]
    # each job crosses two uplinks shared by two jobs (extra 2): c = 0.3 / (1 - 0.6) = 0.75,
    # 1 + 0.75 x 2 = 2.5x now, 1x under one leaf: 3,000 x (1 - 1 / 2.5) = 1,800 s each
    assert rec.proposed["saved_s"] == pytest.approx(3 * 1800.0)
    now = rec.current["jobs"]["slurm-job-1"]
    assert now["step_factor"] == pytest.approx(2.5)
    assert now["communication_share"]["estimate"] == "measured"
    assert now["communication_share"]["nic_load"] == pytest.approx(0.3)
    assert rec.current["communication_share"] == {"estimate": "measured"}
    assert estimate_basis(rec) == "measured"  # calibration learns it apart from the prior's
    assert "measured NIC load 0.300" in rec.gain_model
    assert rec.estimated_gain > joint(LONG)[0].estimated_gain


def test_a_single_spread_job_move_is_priced_from_its_nic_load() -> None:
    jobs = {"slurm-job-1": (("fs-01", tuple(range(8))), ("fs-03", tuple(range(8))))}
    left = {"slurm-job-1": 36_000.0}

    def move(m: ClusterModel) -> dict[str, object]:
        [rec] = [r for r in policy().evaluate(m).recommendations if r.kind.value == "migrate-job"]
        return {"saved": rec.proposed["saved_s"], "text": rec.gain_model, "now": rec.current}

    prior = move(model(left, jobs, {}))
    measured = move(with_nics(model(left, jobs, {}), spread_loads(0.2)))
    # the prior: 1.125x -> 1x; measured: c = 0.2 / 0.8 = 0.25, 1.25x -> 1x
    assert prior["saved"] == pytest.approx(36_000 * (1 - 1 / 1.125), abs=0.1)
    assert measured["saved"] == pytest.approx(36_000 * 0.2, abs=0.1)
    assert "the prior" in str(prior["text"]) and "measured NIC load" in str(measured["text"])
    assert measured["now"]["communication_share"]["estimate"] == "measured"  # type: ignore[index]


def test_a_joint_move_whose_restarts_outweigh_its_saving_is_a_note() -> None:
    # 3,100 s left: each job saves 620 s (more than its own 600 s restart), but 620 s x 40
    # GPUs is less than 600 s x 42 GPUs of restarts (the two 1-GPU jobs moved aside too)
    found = policy().evaluate(model(dict.fromkeys(SPREAD, 3100.0)))
    assert not [r for r in found.recommendations if r.proposed.get("joint")]
    [note] = [n for n in found.undecided if "not worth it" in n.reason]
    assert "24800 GPU-s for 25200 GPU-s of restarts" in note.reason
    assert "0.125 per level, the prior" in note.reason
