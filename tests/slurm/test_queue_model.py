"""The queue model, reason taxonomy and accounting parsers on hand-built cluster states.

The live tests (test_queue_exporter.py) check the same figures on a real cluster; these cover
what that cluster cannot show cheaply: drained nodes, required and excluded nodes, jobs in
two partitions, weighted fair shares, limit reasons, and sshare's output.
"""

from __future__ import annotations

import pytest

from toposcope.catalogue.queue_metrics import PENDING_REASONS
from toposcope.queue.fairshare import fair_shares
from toposcope.slurm.accounting import accounting_gap, parse_config, parse_sshare
from toposcope.slurm.errors import SlurmFormatError
from toposcope.slurm.gres import parse_gres
from toposcope.slurm.queue import queue_snapshot
from toposcope.slurm.queue_reasons import categorize
from toposcope.slurm.records import ClusterState, JobAllocation, PendingJob, RunningJob, SlurmNode


def node(
    name: str, used: str = "", *, flags: tuple[str, ...] = (), parts: str = "gpu"
) -> SlurmNode:
    """A 4-GPU node with the GPU indices ``used`` taken."""
    return SlurmNode(
        name=name,
        state="mixed" if used else "idle",
        sockets=2,
        cores_per_socket=4,
        threads_per_core=2,
        cpus=16,
        gres=parse_gres("gpu:4(S:0-1)"),
        gres_used=parse_gres(f"gpu:(null):{len(used.split(','))}(IDX:{used})" if used else ""),
        flags=flags,
        partitions=tuple(parts.split(",")),
    )


def pending(job_id: int, gpus: int, reason: str = "Resources", **fields: object) -> PendingJob:
    """A pending job of account ``b`` asking ``gpus`` GPUs per node."""
    values: dict[str, object] = {
        "job_id": job_id,
        "name": "p",
        "user": "u",
        "account": "b",
        "partition": "gpu",
        "reason": reason,
        "submit_time": 0.0,
        "wait_s": 100.0 * job_id,
        "nodes": 1,
        "cpus": 1,
        "gpus_per_node": gpus,
    }
    values.update(fields)
    return PendingJob(**values)  # type: ignore[arg-type]


def running(job_id: int, on: str, gpus: tuple[int, ...], account: str = "a") -> RunningJob:
    """A running job holding ``gpus`` and two CPUs on node ``on``."""
    return RunningJob(
        job_id, "r", "u", account, "gpu", (JobAllocation(on, (0, 1), gpus),), start_time=0.0
    )


def state(nodes: list[SlurmNode], jobs: list[PendingJob], run: list[RunningJob]) -> ClusterState:
    """A cluster state of these nodes and jobs."""
    return ClusterState(tuple(nodes), tuple(run), tuple(jobs), read_at=0.0, source="test")


@pytest.mark.parametrize(
    ("slurm", "expected"),
    [
        ("Resources", ("resources", "Resources")),
        ("Priority", ("priority", "Priority")),
        ("Dependency", ("dependency", "Dependency")),
        ("JobHeldAdmin", ("held", "JobHeldAdmin")),
        ("QOSMaxGRESPerUser", ("quota", "QOSMaxGRESPerUser")),
        ("AssocGrpGRES", ("quota", "AssocGrpGRES")),
        ("Something new", ("other", "other")),
        ("x" * 500, ("other", "other")),
    ],
)
def test_slurm_reasons_map_to_bounded_labels(slurm: str, expected: tuple[str, str]) -> None:
    assert categorize(slurm) == expected
    assert expected[0] in PENDING_REASONS


def test_free_gpus_split_across_nodes_make_a_topology_wait() -> None:
    nodes = [node("n1", "0,1,2"), node("n2", "0,1,2"), node("n3", "0,1,2,3")]
    snap = queue_snapshot(state(nodes, [pending(1, 2), pending(2, 3)], []))
    (queue,) = snap.partitions
    assert {c.job.job_id: c.reason for c in queue.pending} == {1: "topology", 2: "resources"}
    assert (queue.free_gpus, queue.allocated_gpus, queue.unavailable_gpus) == (2, 10, 0)
    assert queue.fragmented_gpus == 2 and queue.largest_free_block == 1


def test_drained_nodes_are_unavailable_and_required_nodes_narrow_the_choice() -> None:
    nodes = [node("n1"), node("n2", flags=("DRAIN",)), node("n3", "0,1,2")]
    jobs = [
        pending(1, 2, required_nodes=("n3",)),  # 1 free on n3: not enough in total
        pending(2, 4, excluded_nodes=("n1",)),  # n2 drained, n3 has 1 free
        pending(3, 2, nodes=2, account="c"),  # n1 has 4 free, n3 1: topology
    ]
    (queue,) = queue_snapshot(state(nodes, jobs, [])).partitions
    assert (queue.free_gpus, queue.allocated_gpus, queue.unavailable_gpus) == (5, 3, 4)
    assert [c.reason for c in queue.pending] == ["resources", "resources", "topology"]
    assert [c.gpus for c in queue.pending] == [2, 4, 4]
    assert queue.fragmented_gpus == 1  # n3's one free GPU; n1's four fit every request


def test_a_job_for_two_partitions_counts_in_each_and_held_jobs_set_no_demand() -> None:
    nodes = [node("n1", parts="gpu,big"), node("n2", "0,1,2,3", parts="gpu")]
    jobs = [pending(1, 2, partition="gpu,big"), pending(2, 1, "JobHeldUser", account="c")]
    snap = queue_snapshot(state(nodes, jobs, [running(9, "n2", (0, 1, 2, 3))]))
    assert [q.name for q in snap.partitions] == ["big", "gpu"]
    assert [len(q.pending) for q in snap.partitions] == [1, 2]
    accounts = {(u.partition, u.account): u for u in snap.accounts}
    assert accounts[("gpu", "a")].allocated_gpus == 4
    assert accounts[("gpu", "c")].pending_gpus == 1
    assert accounts[("gpu", "c")].fair_share_gpus == 0  # held: no demand
    assert accounts[("gpu", "c")].oldest_wait_s is None
    assert accounts[("gpu", "b")].oldest_wait_s == 100.0


def test_fair_shares_are_max_min_and_follow_weights() -> None:
    assert fair_shares(16, {"a": 12, "b": 2}, {}) == {"a": 12, "b": 2}
    assert fair_shares(12, {"a": 12, "b": 12, "c": 2}, {}) == {"a": 5, "b": 5, "c": 2}
    weighted = fair_shares(12, {"a": 12, "b": 12}, {"a": 0.75, "b": 0.25})
    assert weighted == pytest.approx({"a": 9, "b": 3})
    assert fair_shares(8, {"a": 0, "b": 3}, {}) == {"a": 0, "b": 3}


def test_accounting_gap_names_what_is_missing() -> None:
    config = parse_config(
        "Configuration data as of 2024-01-01T00:00:00\n"
        "AccountingStorageType   = accounting_storage/none\n"
        "PriorityType            = priority/multifactor\n"
    )
    assert accounting_gap(config) == (
        "needs AccountingStorageType=accounting_storage/slurmdbd "
        "(this cluster: accounting_storage/none)"
    )
    config["AccountingStorageType"] = "accounting_storage/slurmdbd"
    assert accounting_gap(config) is None
    assert "PriorityType=priority/multifactor (this cluster: unset)" in str(accounting_gap({}))


def test_sshare_rows_of_accounts_are_read_and_bad_numbers_refused() -> None:
    text = (
        "root||1.000000|1.000000|0.500000\n"
        "  teama||0.750000|0.900000|0.200000\n"
        "   teama|alice|0.500000|0.600000|0.100000\n"
        "  teamb||0.250000|0.100000|0.800000\n"
    )
    assert parse_sshare(text) == {
        "root": (0.5, 1.0, 1.0),
        "teama": (0.2, 0.75, 0.9),
        "teamb": (0.8, 0.25, 0.1),
    }
    with pytest.raises(SlurmFormatError, match="FairShare 'high' is not a number"):
        parse_sshare("teamc||0.1|0.1|high\n")
    with pytest.raises(SlurmFormatError, match="not 5 cells"):
        parse_sshare("teamc|0.1\n")
