"""A stand-in PromQL API with pre-computed answers, for timing the advisor alone.

It answers what a Prometheus holding one hour of a scenario would, without a TSDB: the series
are the simulated nodes' real exporter output after one simulated hour (so counters hold an
hour of CPU time), reduced over the window as PromQL would (a rate: counter / 3600 s;
``*_over_time``: the value; ``count_over_time``: 60 samples), and the one range query (GPU
utilization) with 60 points per GPU. The answers are encoded before the clock starts, so the
server's own time is small: what is left is the advisor's.
"""

from __future__ import annotations

import http.server
import json
import re
import tempfile
import threading
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from toposcope.advisor.loaders import Window
from toposcope.advisor.loaders.queries import queries
from toposcope.sim.clock import SimClock
from toposcope.sim.nodefs import SimExporters
from toposcope.sim.scenarios import build_cluster, load_scenario

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
            if query.startswith(("rate(", "increase(")):
                values = [(labels, value / HOUR) for labels, value in samples]
            elif query.startswith("count_over_time("):
                values = [(labels, float(POINTS)) for labels, _ in samples]
            else:
                values = samples
            if " > 0 or group(" in query:  # only positive values, and the metric's presence
                values = [(labels, v) for labels, v in values if v > 0]
                values += [({}, 1.0)] if samples else []
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


@contextmanager
def serving(scenario_ref: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stand-in API for one hour of ``scenario_ref`` on loopback: its URL and what it
    holds (series, response bytes, the seconds to prepare them).
    """
    started = time.perf_counter()
    data, nodes, workloads = collect(scenario_ref)
    answers = Answers(data, time.time())
    warm(answers)
    facts = {
        "nodes": nodes,
        "workloads": workloads,
        "series": sum(len(v) for v in data.values()),
        "response_bytes": sum(len(v) for v in answers.cache.values()),
        "prepare_seconds": round(time.perf_counter() - started, 1),
    }
    server = serve(answers)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", facts
    finally:
        server.shutdown()
