"""Slurm 22.05's JSON and ``scontrol -d show job`` text, decoded into records.

The samples in tests/fixtures/slurm are real outputs (see its README); the REST/``squeue``
path (cores per socket) and the ``scontrol`` path (``CPU_IDs``) must give the same CPUs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import FIXTURES
from toposcope.slurm.decode import decode_node, decode_running, records_of
from toposcope.slurm.errors import SlurmFormatError
from toposcope.slurm.gres import Gres
from toposcope.slurm.reader import build_state
from toposcope.slurm.records import JobAllocation, SlurmNode
from toposcope.slurm.scontrol import parse_job_details

SAMPLES = FIXTURES / "slurm"
#: squeue.json's job 1 started at this Unix time, with a 90-minute limit.
STARTED = 1795451462


def _load(name: str) -> Any:
    return json.loads((SAMPLES / name).read_text())


def _state(details: bool) -> Any:
    jobs = records_of(_load("squeue.json"), "jobs", "squeue")
    nodes = records_of(_load("sinfo.json"), "nodes", "sinfo")
    parsed = parse_job_details((SAMPLES / "scontrol-show-job-d.txt").read_text())
    return build_state(
        nodes,
        jobs,
        now=STARTED + 600,
        source="sample",
        details={k: v for k, (_, v) in parsed.items()} if details else None,
    )


def test_nodes_with_their_shape_and_gpus() -> None:
    state = _state(details=False)
    assert [n.name for n in state.nodes] == ["n1", "n2", "n3"]
    n1 = state.nodes[0]
    assert (n1.sockets, n1.cores_per_socket, n1.threads_per_core, n1.cpus) == (2, 4, 2, 16)
    assert n1.gres == (Gres("gpu", "a100", 4, sockets=(0, 1)),)
    assert n1.gpus == 4 and n1.gpu_types == ("a100",)
    assert n1.gpus_used == (0, 1, 2)
    assert n1.state == "mixed" and n1.partitions == ("gpu",)


def test_running_jobs_with_cpus_from_sockets_and_cores() -> None:
    state = _state(details=False)
    jobs = {j.job_id: j for j in state.running}
    assert sorted(jobs) == [1, 2, 3]
    # -c 3 on 2 threads per core: cores 0-1 of socket 0, so CPUs 0-3, with GPUs 0-1
    assert jobs[1].allocations == (JobAllocation("n1", (0, 1, 2, 3), (0, 1)),)
    # socket 1, core 0 is node-wide core 4: CPUs 8-9, next to GPU 2
    assert jobs[2].allocations == (JobAllocation("n1", (8, 9), (2,)),)
    assert jobs[3].allocations == (
        JobAllocation("n2", (0, 1), (0, 1)),
        JobAllocation("n3", (0, 1), (0, 1)),
    )
    assert jobs[1].name == "train-a" and jobs[1].user == "root" and jobs[1].partition == "gpu"
    assert jobs[1].time_limit_s == 90 * 60
    assert jobs[1].time_left_s == pytest.approx(90 * 60 - 600)
    assert jobs[2].time_left_s is None and jobs[3].time_limit_s == 24 * 3600


def test_the_scontrol_path_gives_the_same_allocations() -> None:
    from_rest, from_commands = _state(details=False), _state(details=True)
    assert from_commands.running == from_rest.running
    assert from_commands.pending == from_rest.pending


def test_pending_jobs_with_their_request_reason_and_wait() -> None:
    pending = {j.job_id: j for j in _state(details=False).pending}
    assert sorted(pending) == [4, 5, 6]
    big, pinned, per_job = pending[4], pending[5], pending[6]
    assert (big.reason, big.nodes, big.cpus, big.gpus_per_node) == ("Resources", 2, 8, 4)
    assert big.wait_s == pytest.approx(STARTED + 600 - big.submit_time)
    assert (pinned.reason, pinned.required_nodes, pinned.gpus_per_node) == ("Priority", ("n1",), 1)
    assert (per_job.gpus_per_job, per_job.gpus_per_node, per_job.excluded_nodes) == (3, 0, ("n3",))


def test_a_rest_job_answer_on_a_node_without_threads() -> None:
    job = records_of(_load("rest-job12.json"), "jobs", "job 12")[0]
    n1 = SlurmNode("n1", "mixed", sockets=2, cores_per_socket=4, threads_per_core=1, cpus=8)
    decoded = decode_running(job, {"n1": n1}, now=0.0)
    # scontrol showed "Nodes=n1 CPU_IDs=4-5 Mem=0 GRES=gpu:2(IDX:2-3)" for this job
    assert decoded.allocations == (JobAllocation("n1", (4, 5), (2, 3)),)


@pytest.mark.parametrize(
    ("minutes", "limit_s"),
    [
        (90, 5400),
        (0xFFFFFFFF, None),
        (0xFFFFFFFE, None),
        (365 * 24 * 60, None),
        (2 * 525600, 63072000),
    ],
)
def test_a_time_limit_and_slurms_ways_of_saying_none(minutes: int, limit_s: int | None) -> None:
    """INFINITE, NO_VAL and the year sched/backfill writes into a job it started without a
    limit (whether the main scheduler or backfill started it must not matter) are no limit.
    """
    decoded = decode_running(_job(time_limit=minutes), N1, now=0.0)
    assert decoded.time_limit_s == limit_s
    assert (decoded.time_left_s is None) == (limit_s is None)


def test_other_states_are_only_counted() -> None:
    jobs = records_of(_load("squeue-10jobs.json"), "jobs", "squeue")
    nodes = [
        {"name": f"n{i}", "sockets": 2, "cores": 4, "threads": 1, "cpus": 8} for i in range(1, 5)
    ]
    state = build_state(nodes, jobs, now=0.0, source="sample")
    assert len(state.running) == 8 and state.other_jobs == 1
    (pending,) = state.pending
    assert (pending.job_id, pending.reason, pending.gpus_per_node, pending.cpus) == (
        9,
        "Resources",
        4,
        4,
    )
    assert {a.gpus for j in state.running for a in j.allocations} == {(0, 1), (2, 3)}


def _job(**changes: Any) -> dict[str, Any]:
    job: dict[str, Any] = _load("rest-job12.json")["jobs"][0]
    return {**job, **changes}


N1 = {"n1": SlurmNode("n1", "mixed", 2, 4, 1, 8)}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"job_id": None}, "a job: job_id is not a whole number"),
        ({"name": 5}, "job 12: name is not a string"),
        ({"gres_detail": "gpu:2"}, "job 12: gres_detail is not a list of strings"),
        ({"gres_detail": ["gpu:2(IDX:2-)"]}, "index list"),
        ({"nodes": "n[1-"}, "leaves a [ open"),
        (
            {
                "job_resources": {
                    "allocated_nodes": [
                        {"nodename": "n1", "sockets": {"5": {"cores": {"0": "allocated"}}}}
                    ]
                }
            },
            "socket 5 core 0 is outside node n1",
        ),
        (
            {
                "job_resources": {
                    "allocated_nodes": [
                        {"nodename": "n1", "sockets": {"x": {"cores": {"0": "allocated"}}}}
                    ]
                }
            },
            "is not a number",
        ),
    ],
)
def test_malformed_jobs_are_refused_naming_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SlurmFormatError, match=message.replace("[", r"\[")):
        decode_running(_job(**changes), N1, now=0.0)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"name": "a b"}, "is no host name"),
        ({"name": "n1", "sockets": 0}, "must be positive"),
        ({"name": "n1", "cores": "4"}, "cores is not a whole number"),
        ({"name": "n1", "gres": "gpu:x:y:z"}, "more than name, type and count"),
        ("n1", "a node is not a JSON object"),
    ],
)
def test_malformed_nodes_are_refused(node: object, message: str) -> None:
    with pytest.raises(SlurmFormatError, match=message):
        decode_node(node)


def test_answers_without_their_list_are_refused() -> None:
    with pytest.raises(SlurmFormatError, match="has no 'jobs' list"):
        records_of({"errors": []}, "jobs", "slurmrestd /jobs")
    with pytest.raises(SlurmFormatError, match="is not a JSON object"):
        records_of([], "jobs", "slurmrestd /jobs")


def test_scontrol_text() -> None:
    details = parse_job_details((SAMPLES / "scontrol-show-job-d.txt").read_text())
    assert sorted(details) == [1, 2, 3, 4, 5, 6]
    assert details[3] == (
        "RUNNING",
        (JobAllocation("n2", (0, 1), (0, 1)), JobAllocation("n3", (0, 1), (0, 1))),
    )
    assert details[4] == ("PENDING", ())
    assert parse_job_details("No jobs in the system\n") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Hello\n", "does not start with JobId="),
        ("JobId=1 JobName=x\n     Nodes=n1 CPU_IDs=0-1\n", "malformed detail line"),
        ("JobId=1 JobName=x\n     Nodes=n1 CPU_IDs=0-z Mem=0 GRES=\n", "CPU_IDs of job 1"),
    ],
)
def test_bad_scontrol_text_is_refused(text: str, message: str) -> None:
    with pytest.raises(SlurmFormatError, match=message):
        parse_job_details(text)


def test_samples_name_no_path_of_the_recording_host() -> None:
    for sample in SAMPLES.iterdir():
        text = sample.read_text().replace("\\/", "/")
        assert "toposcope-slurm-" not in text and "slurm-demo" not in text, sample.name
