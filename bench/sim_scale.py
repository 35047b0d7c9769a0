"""Benchmark the simulator at scale: one full scrape round of every node of a scenario.

Builds ``builtin:large`` (1,000 nodes, 4,000 workloads), then scrapes every node's
``/metrics`` in-process (the same collectors a real node runs, over each node's generated
tree and fake NVML) twice: the first round also writes the trees (cold), the second only
updates them (warm, what Prometheus sees on every later scrape). A third round goes through
the simulator's HTTP server with ``--clients`` concurrent loopback clients in another
process, as Prometheus scrapes. Prints the time of each round, peak RSS, series per node and
the trees' disk use; ``--json`` for machine-readable output. Targets: a scrape round of all
nodes <= 15 s on 2 cores, peak RSS <= 2 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from toposcope.sim.clock import SimClock
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario
from toposcope.sim.server import SimServer, make_sim_app


def scrape_round(exporters: SimExporters, nodes: list[str]) -> tuple[float, list[int]]:
    """Seconds for one scrape of every node, and the series count of each."""
    series: list[int] = []
    started = time.perf_counter()
    for node in nodes:
        text = exporters.scrape(node)
        series.append(sum(1 for line in text.splitlines() if line and not line.startswith(b"#")))
    return time.perf_counter() - started, series


def http_round(port: int, nodes: list[str], clients: int) -> float:
    """Seconds for one scrape of every node over HTTP by ``clients`` concurrent clients,
    which run in a separate process, as Prometheus does.
    """
    script = (
        "import http.client, sys, threading, time\n"
        "port, clients, nodes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]\n"
        "queue, lock, bad = list(reversed(nodes)), threading.Lock(), []\n"
        "def client():\n"
        "    while True:\n"
        "        with lock:\n"
        "            if not queue: return\n"
        "            node = queue.pop()\n"
        "        c = http.client.HTTPConnection('127.0.0.1', port, timeout=60)\n"
        "        c.request('GET', f'/nodes/{node}/metrics')\n"
        "        r = c.getresponse(); r.read(); c.close()\n"
        "        if r.status != 200: bad.append(node)\n"
        "threads = [threading.Thread(target=client) for _ in range(clients)]\n"
        "t = time.perf_counter()\n"
        "[x.start() for x in threads]; [x.join() for x in threads]\n"
        "print(time.perf_counter() - t, len(bad))\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", script, str(port), str(clients), *nodes],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout.split()
    if int(output[1]):
        raise RuntimeError(f"{output[1]} scrapes failed")
    return float(output[0])


def disk_bytes(root: Path) -> int:
    """Bytes of every file under ``root`` (allocated blocks)."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                total += os.lstat(path).st_blocks * 512
    return total


def run(scenario_ref: str, clients: int) -> dict[str, Any]:
    """Build the scenario and time a cold, a warm and an HTTP scrape round."""
    started = time.perf_counter()
    scenario = load_scenario(scenario_ref)
    cluster = build_cluster(scenario, SimClock(seed=scenario.seed, speed=0))
    build = time.perf_counter() - started
    nodes = cluster.node_names()
    with tempfile.TemporaryDirectory(prefix="toposcope-sim-bench-") as state:
        exporters = SimExporters(cluster, Path(state), background=False)
        server = SimServer(make_sim_app(cluster, exporters), "127.0.0.1:0")
        server.start()
        try:
            cold, _ = scrape_round(exporters, nodes)
            cluster.clock.advance(60.0)
            warm, series = scrape_round(exporters, nodes)
            cluster.clock.advance(60.0)
            over_http = http_round(server.port, nodes, clients)
            disk = disk_bytes(Path(state))
        finally:
            server.shutdown()
            exporters.close()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "scenario": scenario.name,
        "nodes": len(nodes),
        "workloads": len(scenario.jobs),
        "cpus": os.cpu_count(),
        "build_seconds": round(build, 2),
        "cold_round_seconds": round(cold, 2),
        "warm_round_seconds": round(warm, 2),
        "http_round_seconds": round(over_http, 2),
        "http_clients": clients,
        "peak_rss_mb": round(peak_mb, 1),
        "series_per_node_median": statistics.median(series),
        "series_per_node_max": max(series),
        "series_total": sum(series),
        "trees_disk_mb": round(disk / 2**20, 1),
    }


def main() -> int:
    """Parse options, run, print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--scenario", default="builtin:large")
    parser.add_argument("--clients", type=int, default=2, help="concurrent HTTP clients")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    result = run(args.scenario, args.clients)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:26} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
