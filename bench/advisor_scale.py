"""The advisor at scale: 1,000 nodes x 4,000 workloads x 1 h of history in one analysis.

What is measured, each in a fresh interpreter (a subprocess, so that its peak RSS is its
own), against a PromQL API on loopback:

* the **analysis** (the target): the 24 queries over HTTP, JSON decoding, building the
  model, all six policies and conflict resolution (``load_model`` + ``advise``, the code
  behind ``toposcope advise``);
* the **CLI** end to end, ``toposcope advise --prometheus URL --window 1h --format json``:
  the same plus interpreter start-up, option parsing and rendering the JSON report of every
  recommendation.

The API answers what a Prometheus holding one hour of ``builtin:large`` would: the series are
the simulated nodes' real exporter output (1,000 nodes, 4,000 workloads, each node scraped
through the exporter's collectors after one simulated hour, so counters hold an hour of CPU
time), reduced over the window as PromQL would (``rate``: counter / 3600 s;
``*_over_time``: the value; ``count_over_time``: 60 samples), and the one range query (GPU
utilization) with 60 points per GPU over the hour. The answers are encoded before the clock
starts, so the server's own time is small. ``--repeat`` runs each several times and reports
the median. Targets: analysis <= 10 s and <= 2 GB; a miss prints MISSED (exit status 0:
benchmarks print figures).
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import defaultdict
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from toposcope.advisor.loaders import Window
from toposcope.advisor.loaders.queries import queries
from toposcope.sim.clock import SimClock
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario

TARGET_SECONDS = 10.0
TARGET_RSS_MB = 2048.0
HOUR = 3600.0
POINTS = 60
_METRIC = re.compile(r"toposcope_[a-z0-9_]+")


def collect(scenario_ref: str) -> tuple[dict[str, list[tuple[dict[str, str], float]]], int, int]:
    """Every node's exporter output after one simulated hour, as metric -> samples (with
    the ``job``, ``instance`` and ``node`` labels a Prometheus scrape would add).
    """
    scenario = load_scenario(scenario_ref)
    cluster = build_cluster(scenario, SimClock(seed=scenario.seed, speed=0))
    by_metric: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="toposcope-advisor-scale-") as state:
        exporters = SimExporters(cluster, Path(state), background=False)
        try:
            nodes = cluster.node_names()
            for node in nodes:
                exporters.scrape(node)  # writes the trees at t=0
            cluster.advance(HOUR)
            for node in nodes:
                text = exporters.scrape(node).decode()
                extra = {"job": "toposcope-sim", "instance": f"sim:9850/{node}", "node": node}
                for family in text_string_to_metric_families(text):
                    for sample in family.samples:
                        by_metric[sample.name].append(({**sample.labels, **extra}, sample.value))
        finally:
            exporters.close()
    return by_metric, len(cluster.node_names()), len(scenario.jobs)


class Answers:
    """Pre-encoded PromQL answers for the advisor's queries."""

    def __init__(self, data: dict[str, list[tuple[dict[str, str], float]]], end: float) -> None:
        self.data = data
        self.end = end
        self.cache: dict[tuple[str, str], bytes] = {}

    def answer(self, path: str, query: str) -> bytes:
        """The JSON body for ``query`` on ``path`` (``/api/v1/query`` or ``query_range``)."""
        key = (path, query)
        if key not in self.cache:
            self.cache[key] = self._encode(path, query)
        return self.cache[key]

    def _encode(self, path: str, query: str) -> bytes:
        found = _METRIC.search(query)
        samples = self.data.get(found.group(0), []) if found else []
        if path.endswith("query_range"):
            step = HOUR / POINTS
            result: list[dict[str, Any]] = [
                {
                    "metric": {"__name__": found.group(0) if found else ""} | labels,
                    "values": [
                        [self.end - HOUR + i * step, f"{value:g}"] for i in range(POINTS + 1)
                    ],
                }
                for labels, value in samples
            ]
            body: dict[str, Any] = {
                "status": "success",
                "data": {"resultType": "matrix", "result": result},
            }
        else:
            if query.startswith("rate("):
                values = [(labels, value / HOUR) for labels, value in samples]
            elif query.startswith("count_over_time("):
                values = [(labels, float(POINTS)) for labels, _ in samples]
            else:
                values = samples
            result = [
                {"metric": labels, "value": [self.end, f"{value:g}"]} for labels, value in values
            ]
            body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return json.dumps(body).encode()


def serve(answers: Answers) -> http.server.ThreadingHTTPServer:
    """A loopback PromQL API (``/api/v1/query`` and ``/api/v1/query_range``) in a thread."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parsed = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(parsed.query).get("query", [""])[0]
            body = answers.answer(parsed.path, query)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def warm(answers: Answers) -> None:
    """Encode every answer the advisor will ask for before timing it."""
    window = Window.parse("1h")
    for q in queries():
        path = "/api/v1/query_range" if q.query_type == "range" else "/api/v1/query"
        answers.answer(path, q.promql(window))


ANALYSIS = """
import json, resource, sys, time
from toposcope.advisor.loaders import PrometheusLoader, Window
from toposcope.advisor.policies import build
from toposcope.advisor.runner import advise, load_model
started = time.perf_counter()
model = load_model(PrometheusLoader(sys.argv[1], timeout=120), Window.parse("1h"))
loaded = time.perf_counter()
report = advise(model, build())
done = time.perf_counter()
print(json.dumps({"load": loaded - started, "policies": done - loaded,
                  "recommendations": len(report.recommendations),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_analysis(url: str) -> dict[str, float]:
    """The analysis alone, in a fresh interpreter: queries over HTTP, JSON decoding and the
    model (``load``), then every policy and conflict resolution (``policies``), with the
    process's peak RSS; no argument parsing, no report rendering.
    """
    done = subprocess.run(
        [sys.executable, "-c", ANALYSIS, url],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def run_advisor(url: str) -> tuple[float, float, int]:
    """One ``toposcope advise`` run: (wall seconds, peak RSS in MB, recommendations)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "toposcope.cli", "advise", "--prometheus", url),
            *("--window", "1h", "--format", "json", "--timeout", "120"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"toposcope advise exited {done.returncode}: {done.stderr[-2000:]}")
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return seconds, peak, len(json.loads(done.stdout)["recommendations"])


def main() -> int:
    """Parse options, synthesise the history, time the advisor, print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--scenario", default="builtin:large")
    parser.add_argument("--repeat", type=int, default=3, help="advisor runs (median reported)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    started = time.perf_counter()
    data, nodes, workloads = collect(args.scenario)
    answers = Answers(data, time.time())
    warm(answers)
    prepare = time.perf_counter() - started
    server = serve(answers)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        analyses = [run_analysis(url) for _ in range(max(1, args.repeat))]
        runs = [run_advisor(url) for _ in range(max(1, args.repeat))]
    finally:
        server.shutdown()
    totals = [a["load"] + a["policies"] for a in analyses]
    seconds = statistics.median(totals)
    peak = max(*(a["rss_mb"] for a in analyses), *(r[1] for r in runs))
    result = {
        "scenario": args.scenario,
        "nodes": nodes,
        "workloads": workloads,
        "history": "1h (reductions over 1h; GPU utilization range query, 60 points per GPU)",
        "series_served": sum(len(v) for v in data.values()),
        "response_bytes": sum(len(v) for v in answers.cache.values()),
        "prepare_seconds": round(prepare, 1),
        "analysis_seconds_median": round(seconds, 2),
        "analysis_seconds_all": [round(t, 2) for t in totals],
        "analysis_load_model_seconds": round(statistics.median(a["load"] for a in analyses), 2),
        "analysis_policies_seconds": round(statistics.median(a["policies"] for a in analyses), 2),
        "cli_seconds_median": round(statistics.median(r[0] for r in runs), 2),
        "cli_seconds_all": [round(r[0], 2) for r in runs],
        "peak_rss_mb": round(peak, 1),
        "recommendations": runs[0][2],
        "targets": {"seconds": TARGET_SECONDS, "rss_mb": TARGET_RSS_MB},
        "met": seconds <= TARGET_SECONDS and peak <= TARGET_RSS_MB,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:24} {value}")
        if not result["met"]:
            print("MISSED: analysis <= 10 s and <= 2 GB on 1,000 nodes x 4,000 workloads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
