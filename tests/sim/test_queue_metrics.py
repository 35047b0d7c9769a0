"""The simulated scheduler's queue as the catalogue's ``toposcope_queue_*`` families, with
exact values for a small scenario, served on the simulator's ``/metrics``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from toposcope.catalogue import CATALOGUE
from toposcope.queue.fairshare import fair_shares
from toposcope.rm import Allocation
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.jobs import JobKind, make_job
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.queue_metrics import account_of, queue_families
from toposcope.sim.server import make_sim_app
from toposcope.sim.templates import builtin_template

Values = dict[tuple[str, tuple[tuple[str, str], ...]], float]
BASE = (("partition", "sim"), ("scheduler", "sim"))


@pytest.fixture(scope="module")
def cluster() -> SimCluster:
    """Two 4-GPU nodes with one GPU free each; a 2-GPU job waits on topology (2 GPUs free
    but split), a 4-GPU job on resources; the clock at 100 s.
    """
    sim = SimCluster(SimClock(speed=0))
    sim.add_node("n1", builtin_template("pcie-4gpu"))
    sim.add_node("n2", builtin_template("pcie-4gpu"))
    placed = {"alpha-a": ("n1", [0, 1]), "alpha-b": ("n1", [2]),
              "beta-a": ("n2", [0, 1]), "beta-b": ("n2", [2])}  # fmt: skip
    for name, (node, gpus) in placed.items():
        job = make_job(name, JobKind.GPU_TRAIN, gpus=len(gpus), duration=10_000)
        sim.submit(job, Allocation(node, [], [], gpus))
    sim.submit(make_job("beta-c", JobKind.GPU_TRAIN, gpus=2, submit_time=10, duration=500))
    sim.submit(make_job("gamma-a", JobKind.GPU_TRAIN, gpus=4, submit_time=40, duration=500))
    sim.submit(make_job("gamma-b", JobKind.GPU_TRAIN, gpus=1, submit_time=500, duration=500))
    sim.advance(100)
    return sim


def values(cluster: SimCluster) -> Values:
    """(family, sorted labels) -> value of every queue sample now."""
    return {
        (family.name, tuple(sorted(labels.items()))): value
        for family in queue_families(cluster)
        for _, labels, value, *_ in family.samples
    }


def key(family: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A sample's key in :func:`values`: the family and its labels with the base ones."""
    return (f"toposcope_queue_{family}", tuple(sorted((*BASE, *labels.items()))))


def test_pending_jobs_by_reason_with_waits(cluster: SimCluster) -> None:
    found = values(cluster)
    split = {"scheduler_reason": "GpusSplitAcrossNodes"}
    assert found[key("pending_jobs", reason="topology", **split)] == 1
    assert found[key("pending_jobs", reason="resources", scheduler_reason="NoFreeGpus")] == 1
    assert found[key("pending_gpus", reason="topology")] == 2
    assert found[key("pending_gpus", reason="resources")] == 4
    assert found[key("pending_oldest_wait_seconds", reason="topology")] == 90
    assert found[key("pending_mean_wait_seconds", reason="resources")] == 60
    reasons = {dict(k[1]).get("reason") for k in found if k[0].endswith("pending_jobs")}
    assert reasons == {"topology", "resources"}


def test_gpus_and_fragmentation(cluster: SimCluster) -> None:
    found = values(cluster)
    assert found[key("gpus", state="free")] == 2
    assert found[key("gpus", state="allocated")] == 6
    assert found[key("gpus", state="unavailable")] == 0
    assert found[key("largest_free_gpu_block")] == 1
    assert found[key("fragmented_gpus")] == 2


def test_accounts_hold_wait_and_fair_share(cluster: SimCluster) -> None:
    found = values(cluster)

    def account(family: str, name: str, **extra: str) -> float:
        return found[key(f"account_{family}", account=name, **extra)]

    assert account("jobs", "beta", state="running") == 2
    assert account("jobs", "beta", state="pending") == 1
    assert account("jobs", "gamma", state="pending") == 1  # gamma-b has not arrived
    assert account("allocated_gpus", "alpha") == 3
    assert account("allocated_cpus", "alpha") == 16
    assert account("pending_gpus", "gamma") == 4
    assert account("oldest_wait_seconds", "beta") == 90
    # demands alpha 3, beta 5, gamma 4 over 8 GPUs: nobody is satisfied by 8/3
    assert account("fair_share_gpus", "gamma") == pytest.approx(8 / 3)
    assert key("account_oldest_wait_seconds", account="alpha") not in found


def test_max_min_shares_hand_back_what_a_small_demand_leaves() -> None:
    assert fair_shares(8, {"a": 1, "b": 10, "c": 10, "d": 0}) == {
        "a": 1,
        "b": 3.5,
        "c": 3.5,
        "d": 0,
    }
    assert account_of("team-a-train.service") == "team"
    assert account_of("-odd") == "default"


def test_served_on_the_simulators_metrics_with_catalogue_labels(
    cluster: SimCluster, tmp_path: Path
) -> None:
    exporters = SimExporters(cluster, tmp_path, background=False)
    app = make_sim_app(cluster, exporters)
    seen: dict[str, str] = {}
    body = b"".join(
        app(
            {"PATH_INFO": "/metrics", "REQUEST_METHOD": "GET", "QUERY_STRING": ""},
            lambda status, headers: seen.setdefault("status", status),
        )
    )
    assert seen["status"].startswith("200")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert "process_cpu_seconds" in families
    rows = CATALOGUE
    for name in ("toposcope_queue_pending_jobs", "toposcope_queue_account_fair_share_gpus"):
        assert set(families[name].samples[0].labels) == set(rows[name].labels)


def test_accounts_beyond_the_limit_are_summed_under_other(cluster: SimCluster) -> None:
    """The simulator bounds its accounts as the Slurm exporter does: beta wants 6 GPUs,
    gamma 4, alpha 3, so a limit of 1 keeps beta and sums alpha and gamma, totals unchanged.
    """

    def sampled(max_accounts: int) -> Values:
        return {
            (family.name, tuple(sorted(labels.items()))): value
            for family in queue_families(cluster, max_accounts)
            for _, labels, value, *_ in family.samples
        }

    folded, whole = sampled(1), sampled(100)
    assert folded[key("accounts_folded")] == 2 and whole[key("accounts_folded")] == 0
    for family in ("allocated_gpus", "pending_gpus", "allocated_cpus", "fair_share_gpus"):
        name = f"toposcope_queue_account_{family}"
        accounts = {dict(k[1])["account"]: v for k, v in folded.items() if k[0] == name}
        assert set(accounts) == {"beta", "(other)"}, family
        assert sum(accounts.values()) == pytest.approx(
            sum(v for k, v in whole.items() if k[0] == name)
        )
    assert folded[key("account_pending_gpus", account="(other)")] == 4  # gamma's
    assert folded[key("account_oldest_wait_seconds", account="(other)")] == 60  # gamma-a
