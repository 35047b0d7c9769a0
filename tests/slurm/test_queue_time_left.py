"""``toposcope_queue_job_time_left_seconds``: how long until Slurm ends each running job.

The exporter reads stand-in ``sinfo``/``squeue``/``scontrol`` printing the recorded outputs of
``tests/fixtures/slurm`` (jobs 1-3 running: job 1 with a 90-minute limit, job 2 UNLIMITED,
job 3 with a day; jobs 4-6 pending), or a stand-in slurmrestd answering the same JSON, as
slurmrestd did at that moment. The series' ``workload`` label must be the name the node
exporter gives the job's cgroup, since the advisor joins the two on it: one test scrapes
both exporters on the same job.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporters.test_slurm_identity import environ, slurm_v2_host
from tests.helpers import FIXTURES
from tests.slurm.test_queue_accounts import parse
from tests.slurm.test_rest_client import FRESH, StandIn
from tests.workloads.helpers import V1HOST, build, copy_host
from tests.workloads.helpers import scrape as scrape_node
from toposcope.identity.workload import INVALID_LABEL_VALUE
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.exporter import QueueCollector
from toposcope.slurm.jwt import parse_jwt
from toposcope.slurm.reader import CommandReader, RestReader, SlurmReader
from toposcope.slurm.rest import SlurmRestClient

SAMPLES = FIXTURES / "slurm"
FAMILY = "toposcope_queue_job_time_left_seconds"
#: the moment of the scrapes: 538 s after the recorded jobs started
NOW = 1795452000.0
#: squeue.json's end times of job 1 (90 min) and job 3 (a day); job 2's is a year on
END_1 = 1795456862
END_3 = 1795537862
ANSI = "\x1b[31mred\x1b[0m"


def _squeue() -> dict[str, Any]:
    answer: dict[str, Any] = json.loads((SAMPLES / "squeue.json").read_text())
    return answer


def _jobs(answer: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {job["job_id"]: job for job in answer["jobs"]}


def _commands(tmp_path: Path, squeue: dict[str, Any]) -> SlurmCommands:
    """Stand-in Slurm commands printing the recorded sinfo and scontrol, and ``squeue``."""
    directory = tmp_path / "bin"
    directory.mkdir()
    (tmp_path / "squeue.json").write_text(json.dumps(squeue))
    scripts = {
        "sinfo": f"cat {SAMPLES / 'sinfo.json'}",
        "squeue": f"cat {tmp_path / 'squeue.json'}",
        "scontrol": f"cat {SAMPLES / 'scontrol-show-job-d.txt'}",
    }
    for name, body in scripts.items():
        script = directory / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return SlurmCommands(bin_dir=directory)


def _scrape(reader: SlurmReader) -> str:
    """One scrape of the queue collector alone (no accounting, no priorities)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(reader, None))
    return generate_latest(registry).decode()


def time_left(text: str) -> dict[tuple[str, str], float]:
    """``(partition, workload) -> seconds`` of every time-left series of ``text``."""
    found = {}
    for (name, labels), value in parse(text).items():
        if name == FAMILY:
            found_labels = dict(labels)
            assert found_labels.pop("scheduler") == "slurm"
            assert set(found_labels) == {"partition", "workload"}
            found[(found_labels["partition"], found_labels["workload"])] = value
    return found


def from_commands(tmp_path: Path, squeue: dict[str, Any]) -> str:
    """One scrape through ``squeue --json`` and ``scontrol -d show job``."""
    return _scrape(CommandReader(_commands(tmp_path, squeue), clock=lambda: NOW))


@pytest.fixture
def slurmrestd() -> Iterator[StandIn]:
    """A stand-in slurmrestd answering the recorded ``/nodes`` and ``/jobs``."""
    server = StandIn()
    server.answer("nodes", 200, json.loads((SAMPLES / "sinfo.json").read_text()))
    server.answer("jobs", 200, _squeue())
    yield server
    server.close()


def test_every_running_job_with_a_limit_has_its_time_left(tmp_path: Path) -> None:
    text = from_commands(tmp_path, _squeue())
    # job 2 (UNLIMITED) and the pending jobs 4-6 have none
    assert time_left(text) == {
        ("gpu", "slurm-job-1"): END_1 - NOW,
        ("gpu", "slurm-job-3"): END_3 - NOW,
    }
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == FAMILY]
    assert family.type == "gauge" and "time limit" in family.documentation


def test_slurmrestd_and_the_commands_publish_the_same_time_left(
    tmp_path: Path, slurmrestd: StandIn
) -> None:
    client = SlurmRestClient(slurmrestd.url, parse_jwt(FRESH, "the test"))
    by_rest = time_left(_scrape(RestReader(client, clock=lambda: NOW)))
    assert by_rest == time_left(from_commands(tmp_path, _squeue()))
    assert set(by_rest) == {("gpu", "slurm-job-1"), ("gpu", "slurm-job-3")}


def test_a_resumed_job_ends_when_slurm_says_and_an_overdue_one_reads_zero(
    tmp_path: Path,
) -> None:
    squeue = _squeue()
    jobs = _jobs(squeue)
    # job 1 was suspended for 10 minutes: Slurm moved its end on, its start stays
    jobs[1].update(end_time=END_1 + 600, pre_sus_time=120, suspend_time=int(NOW) - 60)
    # job 3 is past its end (Slurm's OverTimeLimit grace, or being killed)
    jobs[3]["end_time"] = int(NOW) - 5
    found = time_left(from_commands(tmp_path, squeue))
    assert found == {("gpu", "slurm-job-1"): END_1 + 600 - NOW, ("gpu", "slurm-job-3"): 0.0}


def test_a_record_without_an_end_time_counts_from_start_and_limit(tmp_path: Path) -> None:
    squeue = _squeue()
    _jobs(squeue)[1]["end_time"] = 0
    found = time_left(from_commands(tmp_path, squeue))
    assert found[("gpu", "slurm-job-1")] == 1795451462 + 90 * 60 - NOW


def test_the_partition_label_is_bounded(tmp_path: Path) -> None:
    squeue = _squeue()
    jobs = _jobs(squeue)
    jobs[1]["partition"] = ANSI
    jobs[3]["partition"] = "p" * 129
    text = from_commands(tmp_path, squeue)
    assert "\x1b" not in text
    assert set(time_left(text)) == {
        (INVALID_LABEL_VALUE, "slurm-job-1"),
        (INVALID_LABEL_VALUE, "slurm-job-3"),
    }


def _v2_node(tmp_path: Path) -> Path:
    """A cgroup v2 node where process 3001 runs in job 77 (``<node>_slurmstepd.scope``)."""
    return slurm_v2_host(tmp_path, env=environ(SLURM_JOB_ID="77", SLURM_JOB_PARTITION="gpu"))


def _v1_node(tmp_path: Path) -> Path:
    """A cgroup v1 node running job 42 (``/slurm/uid_1000/job_42``)."""
    return copy_host(V1HOST, tmp_path)


@pytest.mark.parametrize(("node", "job_id"), [(_v2_node, 77), (_v1_node, 42)])
def test_the_node_exporter_and_the_slurm_exporter_name_a_job_alike(
    tmp_path: Path, node: Callable[[Path], Path], job_id: int
) -> None:
    host = node(tmp_path / "node")
    named_by_node = {
        s.labels["workload"]
        for f in scrape_node(build(host)).collect()
        for s in f.samples
        if s.name == "toposcope_workload_info" and s.labels["slurm_job_id"] == str(job_id)
    }
    squeue = _squeue()
    _jobs(squeue)[1]["job_id"] = job_id  # the recorded job 1, under the node's job id
    (tmp_path / "slurm").mkdir()
    named_by_slurm = {w for _, w in time_left(from_commands(tmp_path / "slurm", squeue))}
    assert len(named_by_node) == 1
    assert named_by_node <= named_by_slurm
    assert named_by_slurm == named_by_node | {"slurm-job-3"}
