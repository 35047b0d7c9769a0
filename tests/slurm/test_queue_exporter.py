"""``toposcope slurm exporter`` against the real cluster: exact queue metrics for real jobs.

The shared cluster has 4 nodes of 4 GPUs in one partition ``gpu``. Four 3-GPU jobs of
account ``teama`` fill one node each, leaving one free GPU per node: 4 free GPUs, all
fragmented for a 2-GPU job of account ``teamb``, which Slurm keeps waiting on ``Resources``
and toposcope classifies as ``topology``. A held 1-GPU job of ``teamb`` counts as ``held``.
The cluster has no accounting, so the fair-share collector is left out, with its reason.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.slurm.conftest import wait_running
from toposcope.host.processes import ProcFs
from toposcope.host.workload_identity import classify_cgroup
from toposcope.serving.httpserver import HttpServer
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.daemons import wait_for
from toposcope.slurm.exporter import QueueCollector, exporter_registry, make_app
from toposcope.slurm.jwt import parse_jwt
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.reader import CommandReader, RestReader
from toposcope.slurm.rest import SlurmRestClient

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition, keyed by name and label set."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample ``name{labels}``; KeyError naming it when absent."""
    return samples[(name, frozenset(labels.items()))]


def slurm_reason(cluster: LocalCluster, job: int) -> str:
    """Slurm's pending reason of ``job`` now."""
    return cluster.command("squeue", "-h", "-j", str(job), "-o", "%r").strip()


@pytest.fixture
def fragmented(slurm: LocalCluster) -> Iterator[tuple[LocalCluster, int, int, float]]:
    """The cluster with one free GPU per node, a 2-GPU job pending on it and a held job."""
    fillers = [
        slurm.sbatch("-A", "teama", "--gres=gpu:3", "-c", "2", "--wrap", "sleep 600")
        for _ in slurm.node_names
    ]
    wait_running(slurm, *fillers)
    submitted = time.time()
    waiting = slurm.sbatch("-A", "teamb", "--gres=gpu:2", "-c", "2", "--wrap", "sleep 600")
    held = slurm.sbatch("-A", "teamb", "-H", "--gres=gpu:1", "--wrap", "sleep 600")
    wait_for(lambda: slurm_reason(slurm, waiting) == "Resources", "job pending on Resources", 60)
    assert slurm_reason(slurm, held) == "JobHeldUser"
    yield slurm, waiting, held, submitted


def test_exporter_serves_exact_queue_metrics_from_slurmrestd(
    fragmented: tuple[LocalCluster, int, int, float],
) -> None:
    cluster, _, _, submitted = fragmented
    client = SlurmRestClient(cluster.rest_url, parse_jwt(cluster.token(), "scontrol token"))
    collector = QueueCollector(RestReader(client), SlurmCommands(cluster.layout.slurm_conf))
    registry = exporter_registry(collector)
    server = HttpServer(make_app(registry, "test"), "127.0.0.1:0", methods=("GET", "HEAD"))
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
    scraped = time.time()
    samples = parse(text)
    where = {"scheduler": "slurm", "partition": "gpu"}
    assert value(samples, "toposcope_scrape_collector_success", collector="slurm_queue") == 1
    assert not [k for k in samples if ("collector", "slurm_fairshare") in k[1]]
    pending = {
        (dict(k[1])["reason"], dict(k[1])["scheduler_reason"]): v
        for k, v in samples.items()
        if k[0] == "toposcope_queue_pending_jobs"
    }
    assert pending == {("topology", "Resources"): 1, ("held", "JobHeldUser"): 1}
    gpus = {
        reason: value(samples, "toposcope_queue_pending_gpus", **where, reason=reason)
        for reason in ("topology", "held", "resources")
    }
    assert gpus == {"topology": 2, "held": 1, "resources": 0}
    for state, expected in (("free", 4), ("allocated", 12), ("unavailable", 0)):
        assert value(samples, "toposcope_queue_gpus", **where, state=state) == expected
    assert value(samples, "toposcope_queue_largest_free_gpu_block", **where) == 1
    assert value(samples, "toposcope_queue_fragmented_gpus", **where) == 4
    oldest = value(
        samples, "toposcope_queue_pending_oldest_wait_seconds", **where, reason="topology"
    )
    assert 0 <= oldest <= scraped - submitted + 1
    team_a = {**where, "account": "teama"}
    team_b = {**where, "account": "teamb"}
    assert value(samples, "toposcope_queue_account_jobs", **team_a, state="running") == 4
    assert value(samples, "toposcope_queue_account_jobs", **team_a, state="pending") == 0
    assert value(samples, "toposcope_queue_account_jobs", **team_b, state="pending") == 2
    assert value(samples, "toposcope_queue_account_allocated_gpus", **team_a) == 12
    assert value(samples, "toposcope_queue_account_allocated_cpus", **team_a) == 8
    assert value(samples, "toposcope_queue_account_allocated_gpus", **team_b) == 0
    assert value(samples, "toposcope_queue_account_pending_gpus", **team_b) == 3
    # 16 GPUs split max-min: teamb wants 2 (its held job does not count), teama the rest
    assert value(samples, "toposcope_queue_account_fair_share_gpus", **team_b) == 2
    assert value(samples, "toposcope_queue_account_fair_share_gpus", **team_a) == 12
    assert value(samples, "toposcope_queue_account_oldest_wait_seconds", **team_b) == oldest
    assert ("toposcope_queue_account_oldest_wait_seconds", frozenset(team_a.items())) not in samples
    assert value(samples, "toposcope_build_info", **_build_labels(samples)) == 1


def _build_labels(samples: Samples) -> dict[str, str]:
    (labels,) = [dict(k[1]) for k in samples if k[0] == "toposcope_build_info"]
    return labels


def test_cli_prints_one_scrape_and_says_why_fairshare_is_skipped(
    fragmented: tuple[LocalCluster, int, int, float],
) -> None:
    cluster = fragmented[0]
    done = subprocess.run(
        [sys.executable, "-m", "toposcope.cli", "slurm", "exporter", "--print"],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    samples = parse(done.stdout)
    assert value(samples, "toposcope_scrape_collector_success", collector="slurm_queue") == 1
    where = {"scheduler": "slurm", "partition": "gpu"}
    assert value(samples, "toposcope_queue_fragmented_gpus", **where) == 4
    assert "collector=slurm_fairshare skipped: needs AccountingStorageType=" in done.stderr
    assert "(this cluster: accounting_storage/none)" in done.stderr


def test_unreachable_slurmrestd_gives_success_zero_and_keeps_serving(
    shared_cluster: LocalCluster,
) -> None:
    token = parse_jwt(shared_cluster.token(), "scontrol token")
    collector = QueueCollector(RestReader(SlurmRestClient("http://127.0.0.1:9", token)), None)
    text = parse_text(collector)
    samples = parse(text)
    assert value(samples, "toposcope_scrape_collector_success", collector="slurm_queue") == 0
    assert not [k for k in samples if k[0].startswith("toposcope_queue_")]


def parse_text(collector: QueueCollector) -> str:
    """One scrape of ``collector`` alone, in the text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def test_a_real_jobs_time_left_is_published_under_its_cgroups_workload_name(
    slurm: LocalCluster,
) -> None:
    limited = slurm.sbatch("-t", "30", "--wrap", "sleep 600")
    unlimited = slurm.sbatch("--wrap", "sleep 600")
    wait_running(slurm, limited, unlimited)
    collector = QueueCollector(CommandReader(SlurmCommands(slurm.layout.slurm_conf)), None)
    samples = parse(parse_text(collector))
    left = {
        dict(labels)["workload"]: v
        for (name, labels), v in samples.items()
        if name == "toposcope_queue_job_time_left_seconds"
    }
    assert set(left) == {f"slurm-job-{limited}"}  # the UNLIMITED job has none
    assert 1800 - 120 < left[f"slurm-job-{limited}"] <= 1800
    # where Slurm tracks jobs in cgroups, the node exporter's namer reads the same name off
    # the job's processes
    pids = [
        int(pid)
        for directory in slurm.cgroup_dirs()
        for procs in directory.glob(f"uid_*/job_{limited}/**/cgroup.procs")
        for pid in procs.read_text().split()
    ]
    named = {classify_cgroup(path).name for pid in pids for path in _job_cgroups(pid)}
    assert named == ({f"slurm-job-{limited}"} if slurm.cgroups else set())


def _job_cgroups(pid: int) -> list[str]:
    """The Slurm job cgroup paths of ``pid`` in ``/proc/PID/cgroup`` (none once it exited)."""
    try:
        lines = ProcFs().cgroups(pid)
    except FileNotFoundError:
        return []
    return [line.path for line in lines if "/job_" in line.path]
