"""``toposcope slurm exporter --fabric-...``: the fabric and the spread of each running
multi-node job, from the recorded Slurm outputs of ``tests/fixtures/slurm``.

The recorded cluster runs job 3 on ``n[2-3]`` with GPUs 0-1 on each (a two-node job; jobs 1
and 2 share ``n1``). The fabric is Slurm's documented ``topology.conf`` form, written here
with those node names: once with ``n2`` and ``n3`` under one leaf, once under two. The last
test runs a real two-node job on the local Slurm cluster (real slurmctld and slurmd).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from tests.slurm.conftest import wait_running
from tests.slurm.test_queue_accounts import parse
from tests.slurm.test_queue_time_left import NOW, _commands, _squeue
from toposcope.fabric.slurmconf import parse_topology_conf
from toposcope.fabric.spread import FabricIndex
from toposcope.slurm.commands import SlurmCommands
from toposcope.slurm.exporter import QueueCollector, fabric_exposition, make_app
from toposcope.slurm.localcluster import LocalCluster
from toposcope.slurm.reader import CommandReader

APART = "SwitchName=s0 Nodes=n[1-2]\nSwitchName=s1 Nodes=n[3-4]\nSwitchName=s2 Switches=s[0-1]\n"
TOGETHER = "SwitchName=s0 Nodes=n[1-3]\nSwitchName=s1 Nodes=n4\nSwitchName=s2 Switches=s[0-1]\n"


JOB = {"scheduler": "slurm", "partition": "gpu", "workload": "slurm-job-3"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(tmp_path: Path, conf: str) -> Samples:
    """One ``/metrics`` of the exporter's app with the fabric ``conf``, parsed: the queue
    collector's series and the fabric's, rendered once.
    """
    fabric = FabricIndex(parse_topology_conf(conf, "topology.conf"))
    reader = CommandReader(_commands(tmp_path, _squeue()), clock=lambda: NOW)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(reader, None, fabric=fabric))
    app = make_app(registry, "test", fabric_exposition(fabric))
    body = b"".join(app({"PATH_INFO": "/metrics"}, lambda *_: None))
    return parse(body.decode())


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the series ``name{labels}``, ``None`` when there is none."""
    return samples.get((name, frozenset(labels.items())))


def test_a_job_over_two_leaves_is_spread_beyond_its_need(tmp_path: Path) -> None:
    series = scrape(tmp_path, APART)
    assert value(series, "toposcope_job_fabric_nodes", **JOB) == 2
    assert value(series, "toposcope_job_fabric_gpus", **JOB) == 4
    assert value(series, "toposcope_job_fabric_domains", **JOB, level="leaf") == 2
    assert value(series, "toposcope_job_fabric_domains_needed", **JOB, level="leaf") == 1
    assert value(series, "toposcope_job_fabric_top_level", **JOB) == 1
    assert value(series, "toposcope_job_fabric_top_level_needed", **JOB) == 0
    assert value(series, "toposcope_job_fabric_rail_aligned", **JOB) == 1
    assert value(series, "toposcope_job_fabric_node_gpus", **JOB, node="n3") == 2
    # jobs 1 and 2 run on one node each: no per-job fabric series
    per_job = {dict(labels)["workload"] for name, labels in series if "job_fabric" in name}
    assert per_job == {"slurm-job-3"}
    assert value(series, "toposcope_scrape_collector_success", collector="slurm_fabric") == 1
    switch = {"switch": "s1", "level": "leaf", "parent": "s2"}
    assert value(series, "toposcope_fabric_switch_info", **switch) == 1
    node = {"node": "n3", "nic": "", "leaf": "s1", "block": ""}
    assert value(series, "toposcope_fabric_node_info", **node) == 1


def test_a_job_under_one_leaf_needs_no_more(tmp_path: Path) -> None:
    series = scrape(tmp_path, TOGETHER)
    assert value(series, "toposcope_job_fabric_domains", **JOB, level="leaf") == 1
    assert value(series, "toposcope_job_fabric_top_level", **JOB) == 0


def test_without_a_fabric_no_fabric_series_and_no_collector(tmp_path: Path) -> None:
    reader = CommandReader(_commands(tmp_path, _squeue()), clock=lambda: NOW)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(reader, None))
    text = generate_latest(registry).decode()
    assert "fabric" not in text


def test_the_command_prints_the_spread_and_refuses_a_bad_fabric_with_its_line(
    tmp_path: Path,
) -> None:
    _commands(tmp_path, _squeue())
    conf = tmp_path / "topology.conf"
    conf.write_text(APART)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    command = [sys.executable, "-m", "toposcope.cli", "slurm", "exporter", "--print"]
    done = subprocess.run(
        [*command, "--fabric-slurm-topology", str(conf)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert 'toposcope_job_fabric_top_level{partition="gpu",scheduler="slurm",' in done.stdout
    assert 'toposcope_fabric_switch_info{level="leaf",parent="s2",switch="s0"} 1.0' in done.stdout
    conf.write_text(APART + "SwitchName=s3 Switches=nowhere\n")
    bad = subprocess.run(
        [*command, "--fabric-slurm-topology", str(conf)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 2
    assert f"{conf}:4" in bad.stderr and "nowhere" in bad.stderr


def test_a_real_two_node_job_on_the_local_slurm_cluster(slurm: LocalCluster) -> None:
    """A job Slurm really runs on two nodes, read through squeue and scontrol, measured on a
    fabric of two leaves that each hold two of the cluster's four nodes.
    """
    first, second, third, fourth = slurm.node_names
    conf = (
        f"SwitchName=s0 Nodes={first},{third}\n"
        f"SwitchName=s1 Nodes={second},{fourth}\n"
        "SwitchName=s2 Switches=s[0-1]\n"
    )
    job = slurm.sbatch("-N", "2", "--gres=gpu:2", "--wrap", "sleep 600")
    wait_running(slurm, job)
    fabric = FabricIndex(parse_topology_conf(conf, "topology.conf"))
    reader = CommandReader(SlurmCommands(slurm.layout.slurm_conf))
    state = reader.read()
    (running,) = [r for r in state.running if r.job_id == job]
    leaf = {first: "s0", third: "s0", second: "s1", fourth: "s1"}
    spanned = len({leaf[node] for node in running.nodes})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(reader, None, fabric=fabric))
    series = parse(generate_latest(registry).decode())
    key = {"scheduler": "slurm", "partition": running.partition, "workload": f"slurm-job-{job}"}
    assert value(series, "toposcope_job_fabric_nodes", **key) == 2
    assert value(series, "toposcope_job_fabric_gpus", **key) == 4
    assert value(series, "toposcope_job_fabric_domains", **key, level="leaf") == spanned
    assert value(series, "toposcope_job_fabric_domains_needed", **key, level="leaf") == 1
    assert value(series, "toposcope_job_fabric_top_level", **key) == spanned - 1
    indices = {tuple(a.gpus) for a in running.allocations}
    aligned = value(series, "toposcope_job_fabric_rail_aligned", **key)
    assert aligned == (1 if len(indices) == 1 else 0)
