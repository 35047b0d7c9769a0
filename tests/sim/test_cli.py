"""``toposcope sim`` as a process: serves, writes file_sd, stops cleanly on SIGTERM (within
5 s, removing its temporary trees, at any moment of its life).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procs import free_port, http_get, poll, terminate_cleanly
from toposcope.sim.cli import main
from toposcope.sim.nodefs import PREPARE_MAX_NODES


def test_sim_process_serves_and_stops(tmp_path: Path) -> None:
    port = free_port()
    targets = tmp_path / "targets.json"
    state = tmp_path / "state"
    argv = [
        sys.executable, "-m", "toposcope.sim.cli", "--scenario", "builtin:cpu-numa",
        "--listen", f"127.0.0.1:{port}", "--speed", "0", "--file-sd", str(targets),
        "--state-dir", str(state),
    ]  # fmt: skip
    with open(tmp_path / "sim.log", "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/ready"))
        entries = json.loads(targets.read_text())
        assert [e["labels"]["node"] for e in entries] == [f"xeon-0{i}" for i in range(1, 5)]
        assert {e["targets"][0] for e in entries} == {f"127.0.0.1:{port}"}
        body = http_get(f"http://127.0.0.1:{port}/nodes/xeon-01/metrics").decode()
        assert 'hostname="xeon-01"' in body
        truth = http_get(f"http://127.0.0.1:{port}/truth/metrics").decode()
        assert "toposcope_sim_workload_throughput" in truth
    finally:
        terminate_cleanly(process)
    assert (state / "nodes" / "xeon-01" / "proc" / "stat").exists()


def test_bad_scenario_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {name: n, template: nope}\n")
    assert main(["--scenario", str(bad)]) == 2


# -- stopping: SIGTERM ends the simulator within 5 s and removes its temporary trees ----------


class Sim:
    """``toposcope sim`` as a child process whose temporary directory is ``tmp``."""

    def __init__(self, tmp_path: Path, scenario: str) -> None:
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.port = free_port()
        argv = [
            sys.executable, "-m", "toposcope.cli", "sim", "--scenario", scenario,
            "--listen", f"127.0.0.1:{self.port}", "--speed", "0",
        ]  # fmt: skip
        env = {**os.environ, "TMPDIR": str(self.tmp)}
        with open(tmp_path / "sim.log", "wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)

    def state_dirs(self) -> list[Path]:
        return sorted(self.tmp.glob("toposcope-sim-*"))

    def node_trees(self) -> list[Path]:
        return sorted(self.tmp.glob("toposcope-sim-*/nodes/*"))

    def terminate_within(self, seconds: float) -> int:
        """Send SIGTERM and return the exit code, failing if it takes longer than ``seconds``."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pytest.fail(f"toposcope sim still running {seconds} s after SIGTERM")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def test_sigterm_when_ready_stops_within_5s_and_removes_the_trees(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "builtin:demo")
    try:
        poll(lambda: http_get(f"http://127.0.0.1:{sim.port}/-/ready"))
        http_get(f"http://127.0.0.1:{sim.port}/nodes/dgx-01/metrics")
        assert len(sim.state_dirs()) == 1
        assert sim.terminate_within(5.0) == 0
    finally:
        sim.kill()
    assert list(sim.tmp.iterdir()) == []


def test_sigterm_while_trees_are_prepared_stops_within_5s(tmp_path: Path) -> None:
    scenario = tmp_path / "many.yaml"
    # the most nodes whose trees are written ahead (a larger cluster writes them on demand)
    scenario.write_text(f"generate: {{nodes: {{dgx-a100: {PREPARE_MAX_NODES}}}, workloads: 0}}\n")
    sim = Sim(tmp_path, str(scenario))
    try:
        poll(sim.node_trees, interval_s=0.02)
        assert len(sim.node_trees()) < PREPARE_MAX_NODES
        assert sim.terminate_within(5.0) == 0
    finally:
        sim.kill()
    assert list(sim.tmp.iterdir()) == []


def test_sigterm_right_after_the_state_directory_appears(tmp_path: Path) -> None:
    """The earliest moment a temporary tree exists: the stop must still remove it."""
    sim = Sim(tmp_path, "builtin:demo")
    try:
        poll(sim.state_dirs, interval_s=0.002)
        assert sim.terminate_within(5.0) == 0
    finally:
        sim.kill()
    assert list(sim.tmp.iterdir()) == []
