"""A real Slurm cluster for the tests of this folder, started once and always stopped.

The cluster (4 nodes of 2 sockets x 4 cores x 2 threads with 4 fake GPUs each, slurmrestd
with JWT) runs from a state directory under the system's temporary directory, which other
users can enter as slurmrestd (running as ``nobody``) must. Its node names carry this
process's id, so a second test run or a local stack on the same host uses other cgroup
directories. Tests that need it are skipped, with the reason, only where Slurm's packages are
missing or the tests do not run as root; ``make test`` installs the packages.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from toposcope.slurm.clusterfiles import ClusterSpec, NodeShape
from toposcope.slurm.daemons import missing_requirements, wait_for
from toposcope.slurm.localcluster import LocalCluster

#: Figures about the shared cluster, shown at the end of the test run.
FIGURES: dict[str, str] = {}
#: The shape of every node of the shared cluster.
SHAPE = NodeShape(sockets=2, cores_per_socket=4, threads_per_core=2, gpus=4)


def require_slurm() -> None:
    """Skip the calling test when this host cannot run a local Slurm cluster."""
    missing = missing_requirements()
    if missing:
        pytest.skip(
            "a local Slurm cluster needs " + "; ".join(missing) + " (`make test` installs "
            "slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge)"
        )


def state_dir(tag: str) -> Path:
    """A fresh state directory others can enter (slurmrestd runs as nobody)."""
    path = Path(tempfile.mkdtemp(prefix=f"toposcope-slurm-{tag}-"))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def shared_cluster() -> Iterator[LocalCluster]:
    """The shared cluster, started on first use and stopped when the test run ends."""
    require_slurm()
    cluster = LocalCluster(
        state_dir("shared"),
        ClusterSpec(nodes=4, shape=SHAPE, node_prefix=f"t{os.getpid()}n"),
    )
    cluster.start()
    try:
        yield cluster
    finally:
        rss = cluster.rss_kib()
        cluster.stop()
        FIGURES["local Slurm cluster"] = (
            f"{len(cluster.node_names)} nodes started in {cluster.started_in_s:.2f} s, stopped in "
            f"{cluster.stopped_in_s:.2f} s; RSS at the end (MiB): "
            + ", ".join(f"{name} {kib / 1024:.1f}" for name, kib in sorted(rss.items()))
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Report how long the shared cluster took to start and stop, and its daemons' memory."""
    for name, line in FIGURES.items():
        terminalreporter.write_line(f"{name}: {line}")


@pytest.fixture
def slurm(shared_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The shared cluster with no job in it, before and after the test."""
    _cancel_all(shared_cluster)
    yield shared_cluster
    _cancel_all(shared_cluster)


def _cancel_all(cluster: LocalCluster) -> None:
    jobs = cluster.job_ids()
    if jobs:
        cluster.command("scancel", *map(str, jobs))
        wait_for(lambda: not cluster.job_ids(), "every job cancelled", 60)
    wait_for(
        lambda: all(cluster.node_states().get(n) == "idle" for n in cluster.node_names),
        "every node idle again",
        60,
    )


def wait_running(cluster: LocalCluster, *job_ids: int, timeout_s: float = 60) -> None:
    """Wait until every one of ``job_ids`` runs."""

    def running() -> bool:
        text = cluster.command("squeue", "-h", "-o", "%A %T")
        states = dict(line.split() for line in text.splitlines() if line.strip())
        return all(states.get(str(j)) == "RUNNING" for j in job_ids)

    wait_for(running, f"jobs {job_ids} running", timeout_s)
