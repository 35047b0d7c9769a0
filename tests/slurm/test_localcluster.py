"""The local cluster: its files, a whole start-to-stop cycle, and failing cleanly."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.slurm.conftest import require_slurm, state_dir, wait_running
from toposcope.slurm.clusterfiles import (
    ClusterLayout,
    ClusterSpec,
    NodeShape,
    Ports,
    gres_conf_text,
    slurm_conf_text,
)
from toposcope.slurm.daemons import ClusterError
from toposcope.slurm.localcluster import LocalCluster

SPEC = ClusterSpec(nodes=2, shape=NodeShape(gpus=4, gpu_type="a100"), node_prefix="x")
PORTS = Ports(ctld=7000, nodes=(7001, 7002), rest=7003)


def test_slurm_conf_keeps_every_daemon_on_loopback(tmp_path: Path) -> None:
    text = slurm_conf_text(SPEC, ClusterLayout(tmp_path), PORTS, cgroups=True)
    lines = text.splitlines()
    assert "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny" in lines
    assert "SlurmctldHost=localhost(127.0.0.1)" in lines and "SlurmctldPort=7000" in lines
    assert f"AuthInfo=socket={tmp_path}/munge/munge.socket" in lines
    assert f"AuthAltParameters=jwt_key={tmp_path}/etc/jwt_hs256.key" in lines
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert nodes == [
        f"NodeName=x{i} NodeHostname=localhost NodeAddr=127.0.0.1 Port={7000 + i} Sockets=2 "
        f"CoresPerSocket=4 ThreadsPerCore=1 RealMemory=4000 Gres=gpu:a100:4 State=UNKNOWN"
        for i in (1, 2)
    ]
    assert "ProctrackType=proctrack/cgroup" in lines
    without = slurm_conf_text(SPEC, ClusterLayout(tmp_path), PORTS, cgroups=False)
    assert "ProctrackType=proctrack/linuxproc" in without.splitlines()


def test_gres_conf_gives_each_socket_its_gpus_and_cores(tmp_path: Path) -> None:
    lines = gres_conf_text(SPEC, ClusterLayout(tmp_path)).splitlines()
    assert lines == [
        "AutoDetect=off",
        f"NodeName=x1 Name=gpu Type=a100 File={tmp_path}/dev/nvidia[0-1] Cores=0-3",
        f"NodeName=x2 Name=gpu Type=a100 File={tmp_path}/dev/nvidia[0-1] Cores=0-3",
        f"NodeName=x1 Name=gpu Type=a100 File={tmp_path}/dev/nvidia[2-3] Cores=4-7",
        f"NodeName=x2 Name=gpu Type=a100 File={tmp_path}/dev/nvidia[2-3] Cores=4-7",
    ]
    odd = ClusterSpec(nodes=1, shape=NodeShape(sockets=2, gpus=1), node_prefix="y")
    assert gres_conf_text(odd, ClusterLayout(tmp_path)).splitlines()[1:] == [
        f"NodeName=y1 Name=gpu File={tmp_path}/dev/nvidia0 Cores=0-3"
    ]


def test_a_whole_cycle_leaves_nothing_behind() -> None:
    """Start, run a job on a fake GPU, stop: no process, cgroup directory or state is left."""
    require_slurm()
    root = state_dir("cycle")
    cluster = LocalCluster(
        root, ClusterSpec(nodes=2, shape=NodeShape(gpus=2), node_prefix=f"c{os.getpid()}n")
    )
    with cluster:
        assert cluster.started_in_s is not None and cluster.started_in_s < 30
        daemons = cluster.pids()
        assert set(daemons) == {"munged", "slurmctld", "slurmrestd"} | {
            f"slurmd {n}" for n in cluster.node_names
        }
        rss = cluster.rss_kib()
        assert set(rss) == set(daemons) and all(0 < kib < 128 * 1024 for kib in rss.values())
        job = cluster.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
        wait_running(cluster, job)
        assert (root / "dev" / "nvidia0").is_char_device()
        assert oct((root / "etc" / "jwt_hs256.key").stat().st_mode & 0o777) == "0o600"
        if cluster.cgroups:
            assert cluster.cgroup_dirs(), "a running job has cgroup directories"
    assert cluster.pids() == {}
    assert cluster.cgroup_dirs() == []
    assert not root.exists()
    assert cluster.stopped_in_s is not None and cluster.stopped_in_s < 30
    for pid in daemons.values():
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_a_failed_start_says_why_and_stops_what_it_started() -> None:
    require_slurm()
    root = state_dir("broken")
    cluster = LocalCluster(root, ClusterSpec(nodes=1, node_prefix=f"b{os.getpid()}n", rest=False))
    broken = f"Name=gpu File={root}/dev/nvidia0 Bogus=1\n"
    with pytest.raises(
        ClusterError, match=r"(?s)slurmd b\d+n1 did not start; its log ends:\n.*Bogus"
    ):
        cluster.start(timeout_s=20, gres_conf=broken)
    assert cluster.pids() == {}
    assert not root.exists()


def test_a_state_directory_nobody_can_reach_is_refused(tmp_path: Path) -> None:
    require_slurm()
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    cluster = LocalCluster(closed / "state", ClusterSpec(nodes=1, node_prefix="z"))
    with pytest.raises(ClusterError, match=f"{closed} is closed to other users"):
        cluster.start()
    assert cluster.pids() == {}
    shutil.rmtree(closed)
