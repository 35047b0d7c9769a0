"""The harm-free search: the best allocation that slows no job, beside an oracle that may slow
one job to speed up others; and the bench script that reports both per perturbed run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from toposcope.sim.clock import SimClock
from toposcope.sim.cluster import SimCluster
from toposcope.sim.harm_free_oracle import solve_harm_free
from toposcope.sim.oracle import solve
from toposcope.sim.scenarios import build_cluster, parse_scenario

FABRIC = "switches:\n  - {name: leaf-1, nodes: [d-01, d-02, p-01, p-02]}\n"
#: a gang that loses little off NVLink on the DGX nodes; comm-heavy pairs across sockets on
#: the PCIe nodes, whose best is NVLink
JOBS = """
  - {name: dp-a, type: gpu-train, gpus: 8, comm_intensity: 0.05,
     placement: {node: d-01, gpus: [0, 1, 2, 3, 4, 5, 6, 7], cpus: "0-31,128-159", mems: [0]}}
  - {name: dp-b, type: gpu-train, gpus: 8, comm_intensity: 0.05,
     placement: {node: d-02, gpus: [0, 1, 2, 3, 4, 5, 6, 7], cpus: "0-31,128-159", mems: [0]}}
  - {name: pair-a, type: gpu-train, gpus: 2, comm_intensity: 0.9,
     placement: {node: p-01, gpus: [0, 4]}}
  - {name: pair-b, type: gpu-train, gpus: 2, comm_intensity: 0.9,
     placement: {node: p-01, gpus: [2, 6]}}
  - {name: pair-c, type: gpu-train, gpus: 2, comm_intensity: 0.9,
     placement: {node: p-02, gpus: [0, 4]}}
  - {name: pair-d, type: gpu-train, gpus: 2, comm_intensity: 0.9,
     placement: {node: p-02, gpus: [2, 6]}}
"""


def cluster(tmp_path: Path) -> SimCluster:
    """Two DGX A100 and two PCIe 8-GPU nodes under one leaf, settled."""
    (tmp_path / "fabric.yaml").write_text(FABRIC)
    text = (
        "name: trade\nscheduler: none\nnodes:\n"
        "  - {name: d-01, template: dgx-a100}\n  - {name: d-02, template: dgx-a100}\n"
        "  - {name: p-01, template: pcie-8gpu-2sw}\n  - {name: p-02, template: pcie-8gpu-2sw}\n"
        f"jobs:{JOBS}fabric:\n  file: fabric.yaml\n  multi_node_jobs:\n"
        "    - {name: dp, jobs: [dp-a, dp-b], pattern: data-parallel, comm_share: 0.05}\n"
    )
    built = build_cluster(parse_scenario(text, "trade.yaml", tmp_path), SimClock(seed=0, speed=0))
    built.advance(1.0)
    return built


def test_the_harm_free_search_slows_no_job_where_the_oracle_does(tmp_path: Path) -> None:
    sim = cluster(tmp_path)
    oracle = solve(sim, budget_s=5)
    free = solve_harm_free(sim, budget_s=5)
    start = {r.name: r.throughput / r.best_throughput for r in sim.truth()}
    ideal = {s.name: sim.ideal_throughput(s.spec) for s in sim.job_states()}
    now = {r.name: r.throughput / ideal[r.name] for r in sim.truth()}
    assert start  # every job runs
    # the oracle trades the gang's NVLink for the pairs': the gang runs slower than now
    assert any(oracle.efficiencies[n] < now[n] - 1e-6 for n in ("dp-a.service", "dp-b.service"))
    # the harm-free search keeps every job at least as fast, and still gains
    assert all(free.efficiencies[n] >= now[n] - 1e-6 for n in now)
    assert free.baseline < free.total <= oracle.total + 1e-9


def test_the_bench_reports_the_oracle_and_the_harm_free_ceiling(tmp_path: Path) -> None:
    text = (REPO / "sim" / "scenarios" / "fabric-spread.yaml").read_text()
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "fabric-spread.yaml").write_text(
        (REPO / "sim" / "scenarios" / "fabrics" / "fabric-spread.yaml").read_text()
    )
    (tmp_path / "spread.yaml").write_text(text)
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "harm_free_bound.py"), "--scenario",
         str(tmp_path / "spread.yaml"), "--oracle-budget", "5"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    out = json.loads(done.stdout)
    [run] = out["runs"]
    assert run["harm_free_gain"] <= run["oracle_gain"] + 1e-9
    assert 0.0 <= run["harm_free_ceiling"] <= 1.0
    assert run["harm_free_jobs_below_start"] == []
    assert out["worst_harm_free_ceiling"] == pytest.approx(run["harm_free_ceiling"])
