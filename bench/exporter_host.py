"""Benchmark the host exporter against node_exporter on the same sysfs/procfs tree.

The tree is hwloc's 64-CPU, 8-NUMA-node fixture ``64amd64-4s2n4ca2co`` plus generated
processes and cgroups for N synthetic workloads (``sim.fsgen``). Both exporters run as real
processes on loopback and are scraped over HTTP in alternation, so that they see the same
machine load:

* ours, full scrape (every host collector) and the NUMA part only
  (``collect[]=numa_memory&collect[]=numa_cpu``);
* ``prometheus-node-exporter`` (the OS package) with only ``meminfo_numa`` and ``cpu``.

Prints p50/p95 latencies, our peak RSS and the NUMA-part ratio ours/theirs; ``--json`` for
machine-readable output. Targets (docs/benchmarks.md): full p50 <= 25 ms, RSS <= 60 MB,
NUMA-part ratio <= 1.0. Never used as a timed assertion in tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import HWLOC_LINUX, extract_snapshot  # noqa: E402
from toposcope.procs import free_port, stop, wait_http  # noqa: E402
from toposcope.sim.fsgen import write_workload_tree  # noqa: E402

FIXTURE = "64amd64-4s2n4ca2co"


def scrape_ms(url: str) -> float:
    """Wall-clock milliseconds of one full GET of ``url``."""
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()
    return (time.perf_counter() - started) * 1000


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size (VmHWM) of a process in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentiles(values: list[float]) -> dict[str, float]:
    """p50 and p95 of a list of milliseconds, rounded."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 2), "p95_ms": round(p95, 2)}


def run(workloads: int, rounds: int) -> dict[str, Any]:
    """Build the tree, start both exporters, scrape them ``rounds`` times each."""
    peer = shutil.which("prometheus-node-exporter")
    with tempfile.TemporaryDirectory(prefix="toposcope-bench-") as tmp:
        base = extract_snapshot(HWLOC_LINUX / f"{FIXTURE}.tar.bz2", Path(tmp))
        write_workload_tree(
            base,
            topology_root=None,
            workloads=workloads,
            threads_per_workload=8,
            cgroup_version=2,
            seed=1,
        )
        ours_port = free_port()
        ours = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "toposcope.cli",
                "--log-level",
                "error",
                "exporter",
                "--root",
                str(base),
                "--nvml",
                "off",
                "--listen",
                f"127.0.0.1:{ours_port}",
                "--workloads.max",
                str(workloads + 100),
            ],
            stdout=subprocess.DEVNULL,
        )
        procs = [ours]
        theirs_url = None
        if peer:
            peer_port = free_port()
            theirs = subprocess.Popen(
                [
                    peer,
                    f"--path.sysfs={base / 'sys'}",
                    f"--path.procfs={base / 'proc'}",
                    "--collector.disable-defaults",
                    "--collector.meminfo_numa",
                    "--collector.cpu",
                    f"--web.listen-address=127.0.0.1:{peer_port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(theirs)
            theirs_url = f"http://127.0.0.1:{peer_port}/metrics"
        try:
            ours_full = f"http://127.0.0.1:{ours_port}/metrics"
            ours_numa = f"{ours_full}?collect[]=numa_memory&collect[]=numa_cpu"
            for url in (ours_full, theirs_url):
                if url and not wait_http(url):
                    raise RuntimeError(f"{url} did not answer within 30s")
            with urllib.request.urlopen(ours_full) as response:
                body = response.read().decode()
            series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
            full: list[float] = []
            numa: list[float] = []
            peer_numa: list[float] = []
            for _ in range(3):  # warm-up
                scrape_ms(ours_full)
            for _ in range(rounds):
                full.append(scrape_ms(ours_full))
                numa.append(scrape_ms(ours_numa))
                if theirs_url:
                    peer_numa.append(scrape_ms(theirs_url))
            result: dict[str, Any] = {
                "fixture": FIXTURE,
                "workloads": workloads,
                "rounds": rounds,
                "series_per_scrape": series,
                "ours_full": percentiles(full),
                "ours_numa_part": percentiles(numa),
                "ours_peak_rss_mb": round(peak_rss_mb(ours.pid), 1),
            }
            if peer_numa:
                result["node_exporter_numa_part"] = percentiles(peer_numa)
                result["numa_part_ratio_p50"] = round(
                    statistics.median(numa) / statistics.median(peer_numa), 2
                )
            else:
                result["node_exporter_numa_part"] = "prometheus-node-exporter not installed"
            return result
        finally:
            for proc in procs:
                stop(proc)


def main() -> int:
    """Parse options, run, print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--workloads", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    result = run(args.workloads, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
