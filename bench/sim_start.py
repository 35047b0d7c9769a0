"""Benchmark the simulator's start at scale: 10,000 nodes, and 100,000 jobs.

Writes two generated scenarios (:mod:`toposcope.sim.scenario_generate`): ``nodes-10k``,
10,000 nodes (2,500 of each built-in template) with the default 4 workloads per node
(40,000), and ``jobs-100k``, the same nodes with 100,000 workloads (10 per node). For each,
starts ``toposcope sim --speed 0 --state-dir DIR`` as its own process, polls ``/-/ready``
until it answers (the HTTP server only starts once the cluster is built, so this is when
every endpoint serves), then times one request to each endpoint (a node's ``/metrics``
cold, the same node warm, ``/metrics``, ``/api/v1/nodes``, ``/api/v1/workloads``, and with
``--truth`` the first ``/truth/metrics``, whose exhaustive search for each job's best
allocation takes about 10 ms per job), scrapes ``--scrape`` more nodes over HTTP, and stops
it with SIGTERM.

Reported per scenario: seconds to serving, peak RSS of the process tree (``VmHWM`` of every
process in it, summed) at serving, after those requests (``/api/v1/nodes`` builds every
node's topology in one answer) and after the scrapes, bytes written to disk
(``write_bytes`` of ``/proc/PID/io``: what the process sent to storage) and the state
directory's allocated bytes, at serving and after the scrapes, how many node trees existed
at serving, and the endpoint times.
Targets on this 2-core machine: 10,000 nodes serving <= 30 s with RSS + disk <= 2 GB;
100,000 jobs serving <= 60 s. A miss prints MISSED (exit status 0: benchmarks print
figures). ``--json`` for machine-readable output.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from toposcope.devtools.procs import free_port, http_get
from toposcope.waiting import wait_until

TEMPLATES = ("dgx-a100", "pcie-8gpu-2sw", "pcie-4gpu", "xeon-2s")
#: name -> (nodes per template, workloads or None for the default 4 per node)
SCENARIOS: dict[str, tuple[int, int | None]] = {
    "nodes-10k": (2_500, None),
    "jobs-100k": (2_500, 100_000),
}
#: (scenario, serving seconds at most, RSS + disk bytes at most or None)
TARGETS = {"nodes-10k": (30.0, 2 * 10**9), "jobs-100k": (60.0, None)}
START_DEADLINE_S = 300.0


def scenario_yaml(name: str, per_template: int, workloads: int | None) -> str:
    """A generated scenario of ``per_template`` nodes of each built-in template."""
    nodes = ", ".join(f"{t}: {per_template}" for t in TEMPLATES)
    lines = [f"name: {name}", "seed: 7", "scheduler: none", "generate:", f"  nodes: {{{nodes}}}"]
    if workloads is not None:
        lines.append(f"  workloads: {workloads}")
    return "\n".join(lines) + "\n"


def process_tree(pid: int) -> list[int]:
    """``pid`` and every descendant still running."""
    found = [pid]
    for current in found:
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            found.extend(int(c) for c in children if int(c) not in found)
    return found


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss_bytes(pid: int) -> int:
    """Peak resident memory (``VmHWM``) of the process tree, summed over its processes."""
    return sum(_status_kib(p, "VmHWM") for p in process_tree(pid)) * 1024


def written_bytes(pid: int) -> int:
    """Bytes the process tree sent to storage (``write_bytes`` of ``/proc/PID/io``)."""
    total = 0
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/io").read_text().splitlines():
                if line.startswith("write_bytes:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def allocated_bytes(root: Path) -> int:
    """Allocated bytes of every file and directory under ``root``."""
    total = 0
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except OSError:
                continue
    return total


def timed_get(url: str, timeout: float = 120.0) -> float:
    """Seconds one GET of ``url`` takes (it must answer 200)."""
    started = time.perf_counter()
    http_get(url, timeout=timeout)
    return time.perf_counter() - started


def run_one(name: str, workdir: Path, scrape: int, truth: bool) -> dict[str, Any]:
    """Start the simulator on scenario ``name``, measure it, stop it."""
    per_template, workloads = SCENARIOS[name]
    scenario = workdir / f"{name}.yaml"
    scenario.write_text(scenario_yaml(name, per_template, workloads), encoding="utf-8")
    state = workdir / f"{name}-state"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable, "-m", "toposcope.sim.cli", "--scenario", str(scenario),
        "--listen", f"127.0.0.1:{port}", "--speed", "0", "--state-dir", str(state),
    ]  # fmt: skip
    with open(workdir / f"{name}.log", "wb") as log:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    result: dict[str, Any] = {"scenario": name, "nodes": per_template * len(TEMPLATES)}
    try:
        wait_until(
            lambda: _answers(f"{base}/-/ready") or process.poll() is not None,
            START_DEADLINE_S,
            what="the simulator serving",
        )
        if process.poll() is not None:
            raise RuntimeError(f"the simulator exited {process.returncode}; see {log.name}")
        serving = time.perf_counter() - started
        nodes_dir = state / "nodes"
        result.update(
            workloads=workloads if workloads is not None else 4 * result["nodes"],
            serving_seconds=round(serving, 2),
            node_trees_at_serving=len(list(nodes_dir.iterdir())) if nodes_dir.is_dir() else 0,
            peak_rss_mb_at_serving=round(peak_rss_bytes(process.pid) / 2**20, 1),
            disk_written_mb_at_serving=round(written_bytes(process.pid) / 2**20, 1),
            state_dir_mb_at_serving=round(allocated_bytes(state) / 2**20, 1),
            node_metrics_cold_seconds=round(timed_get(f"{base}/nodes/node-0001/metrics"), 3),
            node_metrics_warm_seconds=round(timed_get(f"{base}/nodes/node-0001/metrics"), 3),
            own_metrics_seconds=round(timed_get(f"{base}/metrics"), 2),
            api_nodes_seconds=round(timed_get(f"{base}/api/v1/nodes"), 2),
            api_workloads_seconds=round(timed_get(f"{base}/api/v1/workloads"), 2),
        )
        if truth:
            result["truth_metrics_seconds"] = round(timed_get(f"{base}/truth/metrics", 3600), 1)
        result["peak_rss_mb_after_requests"] = round(peak_rss_bytes(process.pid) / 2**20, 1)
        step = max(result["nodes"] // max(scrape, 1), 1)
        picked = [f"node-{i + 1:04d}" for i in range(0, result["nodes"], step)][:scrape]
        scraped = time.perf_counter()
        for node in picked:
            http_get(f"{base}/nodes/{node}/metrics", timeout=120.0)
        result.update(
            scraped_nodes=len(picked),
            scrape_seconds=round(time.perf_counter() - scraped, 2),
            peak_rss_mb_after_scrapes=round(peak_rss_bytes(process.pid) / 2**20, 1),
            disk_written_mb_after_scrapes=round(written_bytes(process.pid) / 2**20, 1),
            state_dir_mb_after_scrapes=round(allocated_bytes(state) / 2**20, 1),
        )
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    seconds, budget = TARGETS[name]
    used = (result["peak_rss_mb_at_serving"] + result["disk_written_mb_at_serving"]) * 2**20
    missed = result["serving_seconds"] > seconds or (budget is not None and used > budget)
    result["target"] = f"serving <= {seconds:g} s" + (
        f", RSS + disk <= {budget / 10**9:g} GB" if budget is not None else ""
    )
    result["verdict"] = "MISSED" if missed else "met"
    return result


def _answers(url: str) -> bool:
    try:
        http_get(url, timeout=2.0)
    except OSError:
        return False
    return True


def main() -> int:
    """Parse options, run each scenario, print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS), action="append", help="default: both"
    )
    parser.add_argument(
        "--scrape", type=int, default=200, help="nodes to scrape after serving (default 200)"
    )
    parser.add_argument(
        "--truth",
        action="store_true",
        help="also time the first /truth/metrics (minutes: each job's best allocation is "
        "searched exhaustively)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="toposcope-sim-start-") as workdir:
        for name in args.scenario or list(SCENARIOS):
            results.append(run_one(name, Path(workdir), args.scrape, args.truth))
            if not args.json:
                for key, value in results[-1].items():
                    print(f"{key:32} {value}")
                print()
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
