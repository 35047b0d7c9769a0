"""``bench/closed_loop.py --rm slurm`` on the tree topology: the ``slurm-fabric`` scenario's
two-node gang, one Slurm job, lands on both leaves; one round of the real advisor requeues it
onto one leaf through slurmctld, and Slurm's own records (``scontrol show job``, ``scontrol
show topology``) say where it runs; the ratio is judged against the oracle with its move
costs. The helpers the loop is built from (pairing Slurm's allocations with a gang's parts,
the prefixed fabric, the job record) are checked alone first.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from pathlib import Path

import closed_loop_slurm
import pytest
from closed_loop_slurm_fabric import prefixed_fabric, show_job, topology_conf

from tests.procs import require_binary
from tests.slurm.conftest import require_slurm, state_dir
from toposcope.errors import ConfigError
from toposcope.rm import Allocation
from toposcope.sim.cgroup_paths import workload_cgroup
from toposcope.sim.clock import SimClock
from toposcope.sim.gang_price import FabricPrices, Gang
from toposcope.sim.jobs import JobKind, JobSpec
from toposcope.sim.nicfs import NET_BYTES_PER_GPU, nearest_nics, nic_rates
from toposcope.sim.scenarios import load_scenario
from toposcope.sim.slurm_gangs import GangParts, assign, gang_jobs, part_names, register
from toposcope.sim.slurm_mode import build_mirrored


def test_a_part_that_runs_on_one_of_the_jobs_nodes_keeps_it() -> None:
    parts = part_names("slurm-job-7", 2)
    assert parts == ("slurm-job-7-part0", "slurm-job-7-part1")
    given = [Allocation("n1", [0], [], [0]), Allocation("n2", [0], [], [0])]
    # part1 ran on n2 before the move: it stays there, part0 takes the other node
    now = {"slurm-job-7-part0": Allocation("n4", [0], [], [0]), "slurm-job-7-part1": given[1]}
    assert assign(parts, given, now) == {parts[0]: given[0], parts[1]: given[1]}
    with pytest.raises(ValueError, match="1 allocations for 2 parts"):
        assign(parts, given[:1], {})
    # every part lives in the job's cgroup, so each node's exporter names it slurm-job-7
    assert {workload_cgroup(p) for p in parts} == {"system.slice/slurmstepd.scope/job_7"}


def test_a_gang_whose_parts_differ_cannot_be_one_slurm_job() -> None:
    specs = {
        "a": JobSpec("a", JobKind.GPU_TRAIN, gpus=8, threads=8),
        "b": JobSpec("b", JobKind.GPU_TRAIN, gpus=4, threads=8),
    }
    with pytest.raises(ConfigError, match="same share"):
        gang_jobs([Gang("g", ("a", "b"), "data-parallel")], specs)
    with pytest.raises(ConfigError, match="lacks"):
        gang_jobs([Gang("g", ("a", "c"), "data-parallel")], specs)


def test_a_slurm_gangs_parts_send_through_their_nics_once_it_is_submitted() -> None:
    scenario = load_scenario("builtin:slurm-fabric")
    declared = scenario.fabric
    assert declared is not None
    cluster = build_mirrored(scenario, SimClock(seed=0, speed=0))
    network = GangParts(cluster)
    assert "slurm-job-7-part0" not in network  # Slurm has not numbered the job yet
    specs = {j.spec.name: j.spec for j in scenario.jobs}
    [job] = set(gang_jobs(declared.gangs, specs).values())
    parts = register(cluster, FabricPrices(declared.fabric), job, "slurm-job-7")
    assert all(p in network for p in parts) and "slurm-job-7" not in network
    template = cluster.template_of("sf-01")
    for part in parts:
        cluster.submit(replace(job.spec, name=part, submit_time=0.0))
    assert cluster.run_on(
        parts[0], Allocation("sf-01", list(range(256)), [0, 1, 2, 3], list(range(8)))
    )
    [running] = [w for w in cluster.node_snapshot("sf-01").workloads if w.name == parts[0]]
    rates = nic_rates(nearest_nics(template), [running], network)
    assert sum(rates.values()) == pytest.approx(8 * NET_BYTES_PER_GPU * job.spec.comm_intensity)
    assert nic_rates(nearest_nics(template), [running], frozenset()) == {}


def test_slurms_tree_is_written_from_the_scenarios_fabric_with_the_loops_names(
    tmp_path: Path,
) -> None:
    declared = load_scenario("builtin:slurm-fabric").fabric
    assert declared is not None
    written = topology_conf(prefixed_fabric(declared.fabric, "b1-", tmp_path / "fabric.json"))
    lines = [line for line in written.splitlines() if not line.startswith("#")]
    assert lines == [
        "SwitchName=spine-1 Switches=leaf-[1-2]",
        "SwitchName=leaf-1 Nodes=b1-sf-[01-02]",
        "SwitchName=leaf-2 Nodes=b1-sf-[03-04]",
    ]
    shown = show_job("JobId=3 JobState=RUNNING NodeList=a[1-2] Switches=1@00:00:00 Other=x")
    assert shown == {"JobState": "RUNNING", "NodeList": "a[1-2]", "Switches": "1@00:00:00"}


@pytest.mark.integration
def test_one_round_requeues_the_spread_gang_onto_one_leaf_as_slurm_records_it() -> None:
    require_slurm()
    args = argparse.Namespace(
        scenario="builtin:slurm-fabric",
        window=5,
        settle=8.0,
        speed=20.0,
        rounds=1,
        announce=60.0,
        horizon=3600.0,
        oracle_budget=2.0,
        slurm_max_migrations=1,
        perturb=0.0,
        prometheus_binary=require_binary("prometheus"),
    )
    workdir = state_dir("loop")
    try:
        result = closed_loop_slurm.run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert result["topology_plugin"] == "topology/tree"
    [record] = result["slurm_records"]
    first, moved = record["nodes_in_order"]

    def suffixes(nodes: str) -> list[str]:
        return sorted(n.rsplit("-", 1)[1] for n in nodes.split(","))

    # Slurm gave the gang one node of each leaf; the advisor's requeue put it under leaf-1
    assert suffixes(first) == ["02", "04"] and suffixes(moved) == ["01", "02"]
    [[applied]] = [r["applied"] for r in result["rounds"]]
    assert applied.startswith(f"migrate-job slurm-job-{record['job']} -> ")
    assert record["leaves_now"] == ["leaf-1"] and record["restarts"] == 1
    assert record["confirmed"], record  # Slurm's NodeList is where the simulator runs it
    fields = record["scontrol"]
    assert fields["JobState"] == "RUNNING" and fields["Restarts"] == "1"
    assert fields["Switches"].startswith("1") and fields["NumNodes"] == "2"
    assert suffixes(fields["ReqNodeList"]) == ["01", "02"]
    # judged against the oracle with its move costs: every rank of the gang restarts
    assert "checkpoint-restore" in result["oracle_basis"]
    assert len(result["oracle_move_costs_s"]) == 2
    assert all(v > 0 for v in result["advisor_paused_s"].values())
    assert result["harmful_actions"] == 0 and result["collateral_harm"] == 0
    assert result["applied_actions"] == 1 and result["useless_actions"] == 0
    assert result["ratio"] >= 0.9, json.dumps(result)[:2000]
