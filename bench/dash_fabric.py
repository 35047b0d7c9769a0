"""Benchmark the Dash app's fabric page on a 10,000-node, 80,000-GPU fabric.

The fabric is ``bench/fabric_scale.py``'s rail-optimised three-level one (2,680 switches:
313 units of 32 nodes with 8 rail leaves each, pods of 16 units under 8 spines, 16 cores),
with each unit also a block. Prometheus is stood in for by a loopback HTTP server answering
the page's queries with prepared answers: every node with 8 GPUs, most of them held, and
``--jobs`` running multi-node jobs of 2 to 16 nodes (every other one packed into as few units
as it needs, the rest scattered), with their ``toposcope_job_fabric_*`` figures. Timed:

* the fabric index and the overview's layout, once at app start;
* the queries (``load_fabric_data``: HTTP, JSON parsing, the join to the fabric's nodes);
* the render after data arrives (``render_fabric``: summary, tree and blocks figures, job
  path and table, serialised to the JSON the Dash callback sends), for the overview, the
  overview with a job chosen, and the drill-down to each of ``--spines`` spines (the first
  drill-down to a switch computes its layout, as the app does on first use).

Target: the overview's render under 1 s. Prints a table, or ``--json``. Run from the
repository root::

    .venv/bin/python bench/dash_fabric.py [--nodes 10000] [--jobs 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import plotly.io
from fabric_scale import NODES_PER_UNIT, generate

from toposcope.dashboards.app import queries as q
from toposcope.dashboards.app.fabric_data import (
    GPUS_HELD,
    GPUS_UP,
    JOB_DOMAINS,
    JOB_DOMAINS_NEEDED,
    JOB_FIGURES,
    JOB_NODE_GPUS,
    JOB_TRAFFIC,
    load_fabric_data,
)
from toposcope.dashboards.app.fabric_layout import FabricIndex, index_fabric
from toposcope.dashboards.app.fabric_page import render_fabric
from toposcope.dashboards.app.promclient import PromClient
from toposcope.fabric.model import Block, Fabric

TARGET_SECONDS = 1.0
GPUS_PER_NODE = 8

Answer = dict[str, Any]


def with_blocks(fabric: Fabric) -> Fabric:
    """``fabric`` with each unit of :data:`NODES_PER_UNIT` nodes as a block."""
    names = [node.name for node in fabric.nodes]
    blocks = [
        Block(f"block{i // NODES_PER_UNIT:03d}", tuple(names[i : i + NODES_PER_UNIT]))
        for i in range(0, len(names), NODES_PER_UNIT)
    ]
    return Fabric(fabric.switches, tuple(blocks), fabric.nodes)


def _vector(samples: list[tuple[dict[str, str], float]]) -> Answer:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1.7e9, str(v)]} for m, v in samples],
        },
    }


def prepared_answers(names: list[str], jobs: int, seed: int = 28) -> dict[str, Answer]:
    """The page's queries and what Prometheus would answer them for this cluster."""
    rng = random.Random(seed)
    target = [{"job": "node", "instance": f"{n}:9847", "node": n} for n in names]
    held = [rng.choice((0, 4, 8, 8, 8)) for _ in names]
    job_nodes: list[tuple[dict[str, str], float]] = []
    per_job: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in JOB_FIGURES}
    domains: list[tuple[dict[str, str], float]] = []
    needed: list[tuple[dict[str, str], float]] = []
    traffic: list[tuple[dict[str, str], float]] = []
    free = list(range(len(names)))
    for number in range(jobs):
        size = rng.randint(2, 16)
        if number % 2 == 0:
            start = rng.randrange(0, len(names) - size)
            chosen = list(range(start, start + size))
        else:
            chosen = rng.sample(free, size)
        key = {"scheduler": "slurm", "partition": "gpu", "workload": f"slurm-job-{number}"}
        for at in chosen:
            job_nodes.append(({**key, "node": names[at]}, GPUS_PER_NODE))
        units = len({at // NODES_PER_UNIT for at in chosen})
        least = -(-size // NODES_PER_UNIT)
        for level in ("leaf", "block"):
            domains.append(({**key, "level": level}, units))
            needed.append(({**key, "level": level}, least))
        for name, value in (
            ("nodes", size),
            ("gpus", size * GPUS_PER_NODE),
            ("top_level", 0 if units == 1 else 1),
            ("top_level_needed", 0),
            ("rail_aligned", 1),
        ):
            per_job[name].append((key, value))
        for direction in ("rx", "tx"):
            traffic.append(({**key, "direction": direction}, rng.uniform(1e8, 5e10)))
    answers = {
        q.BUILD_INFO: _vector([(t, 1) for t in target]),
        GPUS_UP: _vector([(t, GPUS_PER_NODE) for t in target]),
        GPUS_HELD: _vector([(t, h) for t, h in zip(target, held, strict=True) if h]),
        JOB_NODE_GPUS: _vector(job_nodes),
        JOB_DOMAINS: _vector(domains),
        JOB_DOMAINS_NEEDED: _vector(needed),
        JOB_TRAFFIC: _vector(traffic),
    }
    answers.update({JOB_FIGURES[name]: _vector(found) for name, found in per_job.items()})
    return answers


@contextmanager
def fake_prometheus(answers: dict[str, Answer]) -> Iterator[str]:
    """A loopback PromQL API answering ``answers`` (an unknown query: an empty vector)."""
    bodies = {query: json.dumps(answer).encode() for query, answer in answers.items()}
    empty = json.dumps(_vector([])).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            form = self.rfile.read(length).decode() if length else ""
            query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            query.update(urllib.parse.parse_qs(form))
            body = bodies.get(query.get("query", [""])[0], empty)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def timed(action: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    """Run ``action`` ``repeat`` times; answer each wall time and the last result."""
    times: list[float] = []
    result: Any = None
    for _ in range(repeat):
        begin = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - begin)
    return times, result


def render_json(index: FabricIndex, data: Any, switch: str | None, job: str | None) -> int:
    """Render the page's components and serialise them as the callback does; answer bytes."""
    return len(plotly.io.json.to_json_plotly(list(render_fabric(index, data, switch, job))))


def measure(nodes: int, jobs: int, repeat: int, spines: int) -> dict[str, Any]:
    fabric = with_blocks(generate(nodes))
    begin = time.perf_counter()
    index = index_fabric(fabric)
    index.view()
    start_s = time.perf_counter() - begin
    names = list(index.node_names)
    with fake_prometheus(prepared_answers(names, jobs)) as url:
        client = PromClient(url, timeout=60)
        loads, data = timed(lambda: load_fabric_data(client, index), repeat)
    chosen = data.jobs[0].workload
    overview, size = timed(lambda: render_json(index, data, None, None), repeat)
    with_job, _ = timed(lambda: render_json(index, data, None, chosen), repeat)
    spine_names = [s.name for s in fabric.switches if s.level == 1][:spines]
    first: list[float] = []
    again: list[float] = []
    drill_size = 0
    for spine in spine_names:
        times, drill_size = timed(partial(render_json, index, data, spine, chosen), repeat)
        first.append(times[0])
        again.extend(times[1:])
    gpus = float(data.up.sum())
    return {
        "nodes": len(names),
        "gpus": int(gpus),
        "switches": len(fabric.switches),
        "blocks": len(fabric.blocks),
        "jobs": len(data.jobs),
        "spread_jobs": sum(1 for j in data.jobs if j.spread),
        "repeat": repeat,
        "start_s": start_s,
        "queries_s": _stats(loads),
        "overview_s": _stats(overview),
        "overview_with_job_s": _stats(with_job),
        "spine_first_s": _stats(first),
        "spine_again_s": _stats(again or first),
        "overview_bytes": size,
        "spine_bytes": drill_size,
        "target_s": TARGET_SECONDS,
        "met": max(overview + with_job) < TARGET_SECONDS,
        "cpus": os.cpu_count(),
    }


def _stats(times: list[float]) -> dict[str, float]:
    return {"median": statistics.median(times), "max": max(times)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--spines", type=int, default=4, help="spines to drill down to")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    result = measure(args.nodes, args.jobs, args.repeat, args.spines)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"fabric page: {result['nodes']:,} nodes, {result['gpus']:,} GPUs, "
        f"{result['switches']:,} switches, {result['blocks']:,} blocks, {result['jobs']:,} "
        f"multi-node jobs ({result['spread_jobs']:,} spread beyond need)"
    )
    print(f"  index and overview layout, at start      {result['start_s']:.3f} s")
    for key, label in (
        ("queries_s", "queries (data arrives)"),
        ("overview_s", "overview render after data"),
        ("overview_with_job_s", "overview with a job chosen"),
        ("spine_first_s", "drill-down to a spine, first"),
        ("spine_again_s", "drill-down to a spine, again"),
    ):
        print(f"  {label:<40} median {result[key]['median']:.3f} s, max {result[key]['max']:.3f} s")
    print(
        f"  callback payload                         overview "
        f"{result['overview_bytes'] / 1024:.0f} KiB, spine {result['spine_bytes'] / 1024:.0f} KiB"
    )
    verdict = "met" if result["met"] else "NOT met"
    print(f"  target: overview render < {TARGET_SECONDS:.0f} s: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
