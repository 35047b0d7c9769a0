"""``toposcope sim`` as a process: serves, writes file_sd, stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from tests.procs import free_port, http_get, poll
from toposcope.sim.cli import main


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
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
    assert (state / "nodes" / "xeon-01" / "proc" / "stat").exists()


def test_bad_scenario_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {name: n, template: nope}\n")
    assert main(["--scenario", str(bad)]) == 2
