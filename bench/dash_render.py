"""Benchmark the Dash app's cluster page on ``builtin:large`` (1,000 nodes, 8,000 GPUs).

Starts the simulator (time frozen) and a real Prometheus scraping every simulated node, waits
until every node's GPU series are in, then times, on the same data the page reads:

* the queries (``load_cluster``: the Prometheus HTTP API answers, shaped with pandas);
* the render after data arrives: the page's components and figures built from the loaded
  data (``render_cluster``) and serialised to the JSON that the Dash callback sends to the
  browser, repeated ``--repeat`` times.

Target: the render after data arrives under 3 s. Prints a table, or ``--json``.
The advisor is not started: the page's recommendation list is empty, which costs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import plotly.io

from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.cluster_data import load_cluster
from toposcope.dashboards.app.cluster_page import render_cluster
from toposcope.dashboards.app.promclient import PromClient, PrometheusError
from toposcope.devtools.procs import MissingBinaryError, Prometheus, free_port, running
from toposcope.waiting import NotReadyError, wait_until

TARGET_SECONDS = 3.0


def wait(check: Callable[[], Any], deadline_s: float, what: str) -> Any:
    """Call ``check`` every second until it answers; exit naming ``what`` at the deadline."""
    try:
        return wait_until(
            check, deadline_s, interval_s=1.0, what=what,
            errors=(OSError, ValueError, PrometheusError),
        )  # fmt: skip
    except NotReadyError as exc:
        raise SystemExit(f"dash_render: {exc}") from exc


def measure(scenario: str, repeat: int, range_: str, workdir: Path) -> dict[str, Any]:
    sim_port = free_port()
    targets = workdir / "targets.json"
    sim = [
        sys.executable, "-m", "toposcope.cli", "sim", "--scenario", scenario,
        "--listen", f"127.0.0.1:{sim_port}", "--speed", "0", "--file-sd", str(targets),
        "--state-dir", str(workdir / "state"),
    ]  # fmt: skip
    scrape_configs = [
        {
            "job_name": "toposcope-sim",
            "file_sd_configs": [{"files": [str(targets)]}],
            "relabel_configs": [{"source_labels": ["node"], "target_label": "instance"}],
        }
    ]
    try:
        prometheus = Prometheus(workdir, scrape_configs, interval="60s", scrape_timeout="55s")
    except MissingBinaryError as exc:
        raise SystemExit(f"dash_render: {exc}") from exc
    client = PromClient(prometheus.url, timeout=60)
    with running(sim, workdir / "sim.log", stop_timeout_s=20):
        wait(targets.exists, 300, "the simulator's targets file")
        nodes = len(json.loads(targets.read_text()))
        with prometheus.run(ready_deadline_s=60, stop_timeout_s=20):
            started = time.monotonic()
            wait(
                lambda: len(client.query(q.BUILD_INFO).samples) == nodes,
                600,
                f"all {nodes} nodes scraped",
            )
            scraped_s = time.monotonic() - started
            loads: list[float] = []
            renders: list[float] = []
            sizes: list[int] = []
            cluster = None
            for _ in range(repeat):
                begin = time.perf_counter()
                cluster = load_cluster(client, range_)
                loads.append(time.perf_counter() - begin)
                begin = time.perf_counter()
                parts = render_cluster(cluster, (), None)
                payload = plotly.io.json.to_json_plotly(list(parts))
                renders.append(time.perf_counter() - begin)
                sizes.append(len(payload))
    assert cluster is not None
    return {
        "scenario": scenario,
        "nodes": len(cluster.nodes),
        "gpus": len(cluster.gpus),
        "range": range_,
        "repeat": repeat,
        "first_full_scrape_s": round(scraped_s, 1),
        "queries_s": {"median": statistics.median(loads), "max": max(loads)},
        "render_s": {"median": statistics.median(renders), "max": max(renders)},
        "payload_bytes": max(sizes),
        "target_s": TARGET_SECONDS,
        "met": max(renders) < TARGET_SECONDS,
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--scenario", default="builtin:large")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--range", default="1h", dest="range_")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dash-render-") as tmp:
        result = measure(args.scenario, args.repeat, args.range_, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"cluster page, {result['scenario']}: {result['nodes']} nodes, {result['gpus']} GPUs")
    print(f"  first full scrape by Prometheus   {result['first_full_scrape_s']:.1f} s")
    for key, label in (("queries_s", "queries (data arrives)"), ("render_s", "render after data")):
        print(f"  {label:<33} median {result[key]['median']:.3f} s, max {result[key]['max']:.3f} s")
    print(f"  callback payload                  {result['payload_bytes'] / 1024:.0f} KiB")
    verdict = "met" if result["met"] else "NOT met"
    print(f"  target: render < {TARGET_SECONDS:.0f} s: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
