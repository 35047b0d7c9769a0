"""Benchmark the host exporter against node_exporter on the same sysfs/procfs tree.

The tree is hwloc's 64-CPU, 8-NUMA-node fixture ``64amd64-4s2n4ca2co`` plus generated
processes and cgroups for N synthetic workloads of 8 threads (``sim.fsgen``), for each N of
``--workloads`` (500 and 1,000 by default, so that the growth of the cost shows). Both
exporters run as real processes on loopback and are scraped over HTTP in alternation, so
that they see the same machine load:

* ours, full scrape (every host collector) and the NUMA part only
  (``collect[]=numa_memory&collect[]=numa_cpu``);
* ``prometheus-node-exporter`` (the OS package) with only ``meminfo_numa`` and ``cpu``.

Prints p50/p95 latencies, the NUMA-part ratio ours/theirs, our serving process's peak RSS
(VmHWM after all scrapes), and its CPU seconds per hour at a 15 s scrape interval: the CPU
it burns idle (the background workload sampler, on its default interval) over
``--idle-seconds`` (a whole number of sample intervals), plus 240 scrapes' worth of the CPU a
full scrape costs. The peak RSS comes after the timed scrapes and a few more that ask for
gzip, as Prometheus does. It also prints the time of an empty answer (our ``/-/healthy``,
node_exporter's landing page): the HTTP servers' own cost per request, and times, in this
process, rendering one sample's workload families straight to bytes (as the sampler does) and
through client_python families. ``--json`` for machine-readable output; the load average
before and after is printed, since the machine is shared. Targets (docs/benchmarks.md):
full p50 <= 25 ms, NUMA-part ratio <= 1.0, peak RSS <= 40 MB, each printed as met or MISSED.
Never used as a timed assertion in tests.
"""

from __future__ import annotations

import argparse
import json
import os
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
from toposcope.config import ExporterConfig, HostPaths, WorkloadSettings  # noqa: E402
from toposcope.devtools.procs import free_port, stop, wait_http  # noqa: E402
from toposcope.exporters.collectors.workloads import (  # noqa: E402
    rendered_workload_families,
    workload_families,
)
from toposcope.exporters.context import HostTopology  # noqa: E402
from toposcope.exporters.exposition import render_families  # noqa: E402
from toposcope.exporters.workload_snapshot import WorkloadSnapshotter  # noqa: E402
from toposcope.sim.fsgen import write_workload_tree  # noqa: E402

FIXTURE = "64amd64-4s2n4ca2co"
TARGET_FULL_P50_MS = 25.0
TARGET_NUMA_RATIO = 1.0
TARGET_RSS_MB = 40.0
SCRAPE_INTERVAL_S = 15.0
GZIP_SCRAPES = 10


def scrape_ms(url: str, gzip: bool = False) -> float:
    """Wall-clock milliseconds of one full GET of ``url`` (asking for gzip, as Prometheus
    does, when ``gzip``).
    """
    headers = {"Accept-Encoding": "gzip"} if gzip else {}
    started = time.perf_counter()
    with urllib.request.urlopen(
        urllib.request.Request(url, headers=headers), timeout=30
    ) as response:
        response.read()
    return (time.perf_counter() - started) * 1000


def status_mb(pid: int, key: str) -> float:
    """A ``/proc/PID/status`` memory figure (``VmHWM``: peak RSS, ``VmRSS``) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def verdict(value: float, target: float) -> str:
    """``met`` or ``MISSED`` for a figure whose target is an upper bound."""
    return "met" if value <= target else "MISSED"


def workload_render_ms(base: Path, workloads: int, rounds: int = 5) -> dict[str, float]:
    """Median ms to render one sample's workload families in this process: straight to bytes
    as the sampler does (``rendered_workload_families``), and through client_python families
    (``workload_families`` + ``render_families``, what the sampler did before).
    """
    config = ExporterConfig(
        paths=HostPaths.under(base), workloads=WorkloadSettings(max_workloads=workloads + 100)
    )
    snapshotter = WorkloadSnapshotter(config.workloads, config.paths, HostTopology(config).get)
    snapshot = snapshotter.take()
    timings: dict[str, float] = {}
    for name, render in (
        ("bytes_writer", lambda: rendered_workload_families(snapshot)),
        ("client_python_families", lambda: render_families(workload_families(snapshot))),
    ):
        runs = []
        for _ in range(rounds):
            started = time.perf_counter()
            render()
            runs.append((time.perf_counter() - started) * 1000)
        timings[name] = round(statistics.median(runs), 1)
    return timings


def percentiles(values: list[float]) -> dict[str, float]:
    """p50 and p95 of a list of milliseconds, rounded."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 2), "p95_ms": round(p95, 2)}


def run(workloads: int, rounds: int, idle_seconds: float) -> dict[str, Any]:
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
            ours_healthy = f"http://127.0.0.1:{ours_port}/-/healthy"
            for url in (ours_full, theirs_url):
                if url and not wait_http(url):
                    raise RuntimeError(f"{url} did not answer within 30s")
            with urllib.request.urlopen(ours_full) as response:
                body = response.read().decode()
            series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
            for _ in range(3):  # warm-up
                scrape_ms(ours_full)
            idle_from = cpu_seconds(ours.pid)
            time.sleep(idle_seconds)  # the background sampler alone, no scrape
            idle_rate = (cpu_seconds(ours.pid) - idle_from) / idle_seconds
            full: list[float] = []
            numa: list[float] = []
            peer_numa: list[float] = []
            ours_empty: list[float] = []
            peer_empty: list[float] = []
            full_cpu = 0.0
            full_wall = 0.0
            for _ in range(rounds):
                before = cpu_seconds(ours.pid)
                started = time.perf_counter()
                full.append(scrape_ms(ours_full))
                full_wall += time.perf_counter() - started
                full_cpu += cpu_seconds(ours.pid) - before
                numa.append(scrape_ms(ours_numa))
                ours_empty.append(scrape_ms(ours_healthy))
                if theirs_url:
                    peer_numa.append(scrape_ms(theirs_url))
                    peer_empty.append(scrape_ms(theirs_url.removesuffix("metrics")))
            gzip_ms = [scrape_ms(ours_full, gzip=True) for _ in range(GZIP_SCRAPES)]
            per_scrape_cpu = max(full_cpu - idle_rate * full_wall, 0.0) / rounds
            cpu_hour = idle_rate * 3600 + per_scrape_cpu * 3600 / SCRAPE_INTERVAL_S
            full_p = percentiles(full)
            rss = status_mb(ours.pid, "VmHWM")
            result: dict[str, Any] = {
                "fixture": FIXTURE,
                "workloads": workloads,
                "rounds": rounds,
                "series_per_scrape": series,
                "ours_full": full_p,
                "ours_full_target": f"p50 <= {TARGET_FULL_P50_MS:g} ms: "
                + verdict(full_p["p50_ms"], TARGET_FULL_P50_MS),
                "ours_full_gzip": percentiles(gzip_ms),
                "ours_numa_part": percentiles(numa),
                "ours_empty_answer": percentiles(ours_empty),
                "ours_peak_rss_mb": round(rss, 1),
                "ours_rss_now_mb": round(status_mb(ours.pid, "VmRSS"), 1),
                "ours_rss_target": f"<= {TARGET_RSS_MB:g} MB: {verdict(rss, TARGET_RSS_MB)}",
                "ours_idle_cpu_s_per_hour": round(idle_rate * 3600, 1),
                "ours_cpu_ms_per_full_scrape": round(per_scrape_cpu * 1000, 2),
                "ours_cpu_s_per_hour_at_15s": round(cpu_hour, 1),
                "render_workload_families_ms": workload_render_ms(base, workloads),
            }
            if peer_numa:
                ratio = statistics.median(numa) / statistics.median(peer_numa)
                result["node_exporter_numa_part"] = percentiles(peer_numa)
                result["node_exporter_empty_answer"] = percentiles(peer_empty)
                result["numa_part_ratio_p50"] = round(ratio, 2)
                result["numa_part_target"] = (
                    f"<= {TARGET_NUMA_RATIO:g}: {verdict(ratio, TARGET_NUMA_RATIO)}"
                )
            else:
                result["node_exporter_numa_part"] = "prometheus-node-exporter not installed"
            return result
        finally:
            for proc in procs:
                stop(proc)


def main() -> int:
    """Parse options, run each tree size, print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--workloads", type=int, nargs="+", default=[500, 1000])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=45.0,
        help="idle window for the sampler's CPU (three 15 s sample intervals by default)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = [run(n, args.rounds, args.idle_seconds) for n in args.workloads]
    for result in results:
        result["load_average_1m_before_after"] = [
            round(load_before[0], 2),
            round(os.getloadavg()[0], 2),
        ]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            for key, value in result.items():
                print(f"{key:30} {value}")
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
