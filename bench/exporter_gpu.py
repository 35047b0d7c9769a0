"""Benchmark the gpu collector on the fake NVML: 8 GPUs (DGX A100) with 64 processes each.

One measured scrape is what the exporter does per /metrics request for GPUs: the ``gpu``
collector rendered to the text format (through the runner, as served), plus the
``gpu_processes()`` call the workloads collector makes on the shared NVML layer. Locality
is cross-checked against this host's sysfs, as in the exporter. The background PCIe sampler
and XID watcher are not running (their cost is not part of a scrape).

Prints p50/p95 latency of each part and the process CPU time per scrape extrapolated to one
hour at a 1 s scrape interval (``time.process_time`` over all measured scrapes); ``--json``
for machine-readable output. Never used as a timed assertion in tests.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

from toposcope.config import ExporterConfig
from toposcope.exporters.app import render
from toposcope.exporters.collectors.gpu import GpuCollector
from toposcope.exporters.context import HostTopology
from toposcope.exporters.gpu_source import open_gpu_source
from toposcope.exporters.runner import NamedCollector, ScrapeRunner
from toposcope.fake_nvml import FakeProcess, load_fake_nvml


def percentiles(values: list[float]) -> dict[str, float]:
    """p50 and p95 of a list of milliseconds, rounded."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 3), "p95_ms": round(p95, 3)}


def run(processes: int, scrapes: int, warmup: int) -> dict[str, Any]:
    """Build the fake machine and the collector, then time ``scrapes`` scrapes."""
    fake = load_fake_nvml("fake:dgx-a100")
    gpus = len(fake.spec.gpus)
    for gpu in range(gpus):
        fake.set_processes(
            gpu,
            [FakeProcess(100000 + gpu * 1000 + i, 256 * 1024 * 1024) for i in range(processes)],
        )
    topology = HostTopology(ExporterConfig())
    source = open_gpu_source("fake", backend=fake, topology=topology.get)
    runner = ScrapeRunner([NamedCollector("gpu", GpuCollector(source))])
    try:
        for _ in range(warmup):
            render(runner, "bench")
            source.gpu_processes()
        scrape_ms: list[float] = []
        process_ms: list[float] = []
        total_ms: list[float] = []
        size = 0
        cpu_started = time.process_time()
        for _ in range(scrapes):
            started = time.perf_counter()
            text = render(runner, "bench")
            middle = time.perf_counter()
            found = source.gpu_processes()
            ended = time.perf_counter()
            scrape_ms.append((middle - started) * 1000)
            process_ms.append((ended - middle) * 1000)
            total_ms.append((ended - started) * 1000)
            size = len(text)
        cpu_per_scrape = (time.process_time() - cpu_started) / scrapes
    finally:
        source.close()
    if len(found) != gpus * processes:
        raise RuntimeError(f"expected {gpus * processes} GPU processes, got {len(found)}")
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    return {
        "gpus": gpus,
        "processes_per_gpu": processes,
        "scrapes": scrapes,
        "gpu_scrape": percentiles(scrape_ms),
        "gpu_processes": percentiles(process_ms),
        "total": percentiles(total_ms),
        "cpu_seconds_per_hour_at_1s": round(cpu_per_scrape * 3600, 2),
        "series_per_scrape": series,
        "bytes_per_scrape": size,
        "background_threads": "excluded (PCIe sampler, XID watcher)",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--processes", type=int, default=64, help="processes per GPU")
    parser.add_argument("--scrapes", type=int, default=300, help="measured scrapes")
    parser.add_argument("--warmup", type=int, default=20, help="scrapes before measuring")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    result = run(args.processes, args.scrapes, args.warmup)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(
        f"gpu collector, fake NVML, {result['gpus']} GPUs x {result['processes_per_gpu']} "
        f"processes, {result['scrapes']} scrapes ({result['background_threads']})"
    )
    for part in ("gpu_scrape", "gpu_processes", "total"):
        figures = result[part]
        print(f"  {part:<14} p50 {figures['p50_ms']:8.3f} ms   p95 {figures['p95_ms']:8.3f} ms")
    print(f"  CPU at a 1 s scrape interval: {result['cpu_seconds_per_hour_at_1s']} s per hour")
    print(f"  {result['series_per_scrape']} series, {result['bytes_per_scrape']} bytes per scrape")
    return 0


if __name__ == "__main__":
    sys.exit(main())
