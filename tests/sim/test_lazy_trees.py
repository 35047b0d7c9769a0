"""A cluster larger than ``PREPARE_MAX_NODES`` writes no node tree until that node is
scraped, and the tree it then writes is the one the eager path writes for the same node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.procs import free_port, http_get, poll, terminate_cleanly
from toposcope.sim.clock import SimClock
from toposcope.sim.nodefs import PREPARE_MAX_NODES, SimExporters
from toposcope.sim.scenarios import build_cluster, parse_scenario

#: Two declared nodes with placed jobs; the large scenario adds generated CPU-only nodes
#: after them, which change nothing on these two.
SMALL = """\
name: small
seed: 3
scheduler: none
nodes:
  - {name: dgx-01, template: dgx-a100}
  - {name: cpu-01, template: xeon-2s}
jobs:
  - {name: train, type: gpu-train, gpus: 2, placement: {node: dgx-01, gpus: [0, 5]}}
  - {name: notebook, type: notebook, gpus: 1, placement: {node: dgx-01, gpus: [2]}}
  - name: cnn
    type: cpu-train
    threads: 28
    memory_gb: 40
    placement: {node: cpu-01, cpus: "0-13,28-41", mems: [1]}
"""
LARGE_NODES = 2_000
LARGE = SMALL + f"generate: {{nodes: {{xeon-2s: {LARGE_NODES}}}, workloads: {LARGE_NODES}}}\n"


def tree(root: Path) -> dict[str, str]:
    """Relative path -> file contents (``-> target`` for a link, its last two parts: links
    point into the state directory's shared template folders).
    """
    found: dict[str, str] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            relative = str(path.relative_to(root))
            if path.is_symlink():
                found[relative] = "-> " + "/".join(Path(os.readlink(path)).parts[-2:])
            elif path.is_file():
                found[relative] = path.read_text(encoding="utf-8")
    return found


def without_durations(body: bytes) -> list[str]:
    """A /metrics body without the lines that time the scrape itself."""
    return [line for line in body.decode().splitlines() if "duration_seconds" not in line]


def test_a_large_cluster_writes_only_the_scraped_nodes_tree_and_as_the_eager_path_does(
    tmp_path: Path,
) -> None:
    small = build_cluster(parse_scenario(SMALL, "small", tmp_path), SimClock(seed=3, speed=0))
    large = build_cluster(parse_scenario(LARGE, "large", tmp_path), SimClock(seed=3, speed=0))
    assert len(large.node_names()) > PREPARE_MAX_NODES
    eager = SimExporters(small, tmp_path / "eager", background=False)
    lazy = SimExporters(large, tmp_path / "lazy", background=False)
    try:
        assert eager.eager and not lazy.eager
        assert eager.prepare(threading.Event()) == 2
        assert sorted(p.name for p in (tmp_path / "eager" / "nodes").iterdir()) == [
            "cpu-01",
            "dgx-01",
        ]
        assert lazy.prepare(threading.Event()) == 0
        assert not (tmp_path / "lazy").exists()
        for node in ("dgx-01", "cpu-01"):
            assert without_durations(lazy.scrape(node)) == without_durations(eager.scrape(node))
            written = tree(tmp_path / "lazy" / "nodes" / node)
            assert any("/task/" in name for name in written)
            assert written == tree(tmp_path / "eager" / "nodes" / node)
        assert sorted(p.name for p in (tmp_path / "lazy" / "nodes").iterdir()) == [
            "cpu-01",
            "dgx-01",
        ]
    finally:
        eager.close()
        lazy.close()


def test_the_simulator_serves_a_large_cluster_before_writing_any_tree(tmp_path: Path) -> None:
    scenario = tmp_path / "large.yaml"
    scenario.write_text(LARGE, encoding="utf-8")
    state = tmp_path / "state"
    port = free_port()
    argv = [
        sys.executable, "-m", "toposcope.sim.cli", "--scenario", str(scenario),
        "--listen", f"127.0.0.1:{port}", "--speed", "0", "--state-dir", str(state),
    ]  # fmt: skip
    with open(tmp_path / "sim.log", "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/ready"), what="the simulator serving")
        assert not (state / "nodes").exists()
        body = http_get(f"http://127.0.0.1:{port}/nodes/node-0007/metrics").decode()
        assert 'hostname="node-0007"' in body
        assert [p.name for p in (state / "nodes").iterdir()] == ["node-0007"]
    finally:
        terminate_cleanly(process)
