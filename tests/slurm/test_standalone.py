"""The long-running local cluster of the stack: built from a node description, stopped clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.conftest import require_slurm, state_dir
from toposcope.errors import ConfigError
from toposcope.sim.clock import SimClock
from toposcope.sim.scenarios import load_scenario
from toposcope.sim.slurm_description import write_description
from toposcope.sim.slurm_mode import build_mirrored
from toposcope.slurm.clusterfiles import ClusterLayout
from toposcope.slurm.daemons import CGROUP_ROOT, is_running, wait_for
from toposcope.slurm.standalone import spec_from_description

PREFIX = f"s{os.getpid()}-"


def _description(tmp_path: Path) -> Path:
    scenario = tmp_path / "four.yaml"
    scenario.write_text(
        f"name: four\nnodes:\n  - {{name: {PREFIX}n, template: pcie-4gpu, count: 4}}\njobs: []\n"
    )
    path = tmp_path / "nodes.json"
    write_description(build_mirrored(load_scenario(str(scenario)), SimClock()), path)
    return path


def test_stopping_leaves_no_process_cgroup_or_state_behind(tmp_path: Path) -> None:
    require_slurm()
    root = state_dir("standalone")
    info, token = tmp_path / "info.json", tmp_path / "slurm.jwt"
    process = subprocess.Popen(
        [sys.executable, "-m", "toposcope.slurm.standalone", "--description",
         str(_description(tmp_path)), "--state-dir", str(root), "--info", str(info),
         "--token-file", str(token)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: info.exists() or process.poll() is not None, "the info file", 60)
        assert process.poll() is None, process.communicate()[0].decode()
        published = json.loads(info.read_text())
        assert published["rest_url"].startswith("http://127.0.0.1:")
        assert len(published["nodes"]) == 4 and token.stat().st_mode & 0o077 == 0
        env = {**os.environ, "SLURM_CONF": published["slurm_conf"]}
        subprocess.run(
            ["sbatch", "--gres=gpu:1", "--output=/dev/null", "--wrap", "sleep 600"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        pids = {path.name: int(path.read_text()) for path in (root / "run").glob("*.pid")} | {
            "munged": int((root / "munge" / "munged.pid").read_text())
        }
        assert len(pids) == 6  # slurmctld, 4 slurmd, munged
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0].decode()
    assert process.returncode == 0, output
    binaries = {name: name.split("-")[0].removesuffix(".pid") for name in pids}
    assert not [name for name, pid in pids.items() if is_running(pid, binaries[name])]
    assert not list(CGROUP_ROOT.glob(f"*/slurm_{PREFIX}*"))
    assert not root.exists() and not info.exists()


def test_a_bad_description_is_refused_naming_what_is_wrong(tmp_path: Path) -> None:
    layout = ClusterLayout(tmp_path)
    good = json.loads(_description(tmp_path).read_text())
    bad_name = json.loads(json.dumps(good))
    bad_name["nodes"][0]["name"] = "a/../b"
    with pytest.raises(ConfigError, match=r"nodes\[0\]\.name .* is not a host name"):
        spec_from_description(bad_name, layout)
    bad_cpu = json.loads(json.dumps(good))
    bad_cpu["nodes"][1]["cpus"][3] = [3, "x", 0, 0]
    with pytest.raises(ConfigError, match=r"nodes\[1\].*cpus\[3\]\[1\] must be a whole number"):
        spec_from_description(bad_cpu, layout)
    with pytest.raises(ConfigError, match="format"):
        spec_from_description({"format": "other", "nodes": []}, layout)
    spec = spec_from_description(good, layout)
    assert spec.node_names == tuple(f"{PREFIX}n-0{i}" for i in range(1, 5))
    assert spec.max_gpus == 4 and spec.shapes[0].cpus == 96
