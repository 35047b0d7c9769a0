"""One HTTP server for a whole simulated cluster, and the Prometheus file_sd targets file.

Routes of :func:`make_sim_app`:

``GET /nodes/<name>/metrics``
    the node's exporter output (the exporter's collectors over the node's generated tree and
    fake NVML; ``hostname`` is the node's name). ``collect[]`` / ``exclude[]`` work as on the
    exporter. Unknown node: 404.
``GET /truth/metrics``
    ground truth (``toposcope_sim_*``): true and best throughput per workload.
``GET /metrics``
    the simulator process's own ``process_*`` and ``toposcope_build_info``, and the
    simulated scheduler's queue (the catalogue's ``toposcope_queue_*`` families,
    ``scheduler="sim"``: :mod:`toposcope.sim.queue_metrics`), and with a scenario fabric
    the fabric and its multi-node jobs' spread (:mod:`toposcope.sim.fabric`), and every
    running job's step counter (:mod:`toposcope.sim.job_steps`).
``GET /jobs/metrics``
    the jobs' step counters alone, as the jobs' own metrics endpoints would publish them
    (what a ``--progress-metric`` reads; a scrape job of its own).
``GET /targets.json``
    the file_sd targets this server would write (see :func:`file_sd_targets`).
``/api/...``
    every request under ``/api/`` goes, unchanged (``PATH_INFO`` keeps the ``/api`` prefix),
    to the resource-manager API app passed as ``api_app`` (``toposcope.rm.api``'s
    ``make_api_app(cluster, token)``, whose routes live under ``/api/v1``); without one
    the answer is a JSON 404.
``GET /-/healthy``, ``GET /-/ready``, ``GET /``
    liveness, readiness, a landing page listing the nodes.

The file_sd file (:func:`write_file_sd`) has one entry per node with the labels
``__metrics_path__=/nodes/<name>/metrics`` and ``node=<name>``; it is written to a temporary
file in the same directory and renamed over the old one, so Prometheus never reads half of it.
"""

from __future__ import annotations

import html
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from toposcope.exporters.app import render
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.selfmetrics import with_self_metrics
from toposcope.sim.cluster import SimCluster
from toposcope.sim.fabric import SimFabric
from toposcope.sim.job_steps import render_steps, steps_family
from toposcope.sim.nodefs import ExportersClosed, SimExporters
from toposcope.sim.paths import UnsafePathError
from toposcope.sim.queue_metrics import queue_families
from toposcope.sim.truth import render_truth

LOG = logging.getLogger("toposcope.sim")

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

API_MOUNT = "/api/"


def file_sd_targets(node_names: Iterable[str], address: str) -> list[dict[str, Any]]:
    """Prometheus file_sd entries: one target per node, all at ``address`` (``HOST:PORT``)."""
    return [
        {
            "targets": [address],
            "labels": {"__metrics_path__": f"/nodes/{quote(name)}/metrics", "node": name},
        }
        for name in node_names
    ]


def write_file_sd(path: Path | str, entries: list[dict[str, Any]]) -> None:
    """Write a file_sd JSON file atomically (temporary file in the same directory, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(entries, handle, indent=1)
            handle.write("\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body.encode()]


def _landing(cluster: SimCluster) -> bytes:
    items = "".join(
        f'<li><a href="nodes/{quote(n)}/metrics">{html.escape(n)}</a> '
        f"({html.escape(cluster.template_of(n).name)})</li>"
        for n in cluster.node_names()
    )
    return (
        "<!doctype html><html><head><title>toposcope sim</title></head><body>"
        "<h1>toposcope simulated cluster</h1>"
        '<p><a href="truth/metrics">/truth/metrics</a> (ground truth), '
        '<a href="targets.json">/targets.json</a> (file_sd), '
        f"<code>{API_MOUNT}</code> (resource-manager API)</p>"
        f"<p>Nodes:</p><ul>{items}</ul></body></html>"
    ).encode()


def make_sim_app(
    cluster: SimCluster,
    exporters: SimExporters,
    api_app: WsgiApp | None = None,
    address: str = "127.0.0.1:9850",
    fabric: SimFabric | None = None,
) -> WsgiApp:
    """The simulator's WSGI app (routes in the module docstring).

    ``api_app`` serves everything under ``/api/`` (``None``: 404); ``address`` is the
    ``HOST:PORT`` that ``/targets.json`` advertises; ``fabric`` adds the fabric's families to
    ``/metrics``.
    """
    nodes = set(cluster.node_names())

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path: str = environ.get("PATH_INFO", "/") or "/"
        if path.startswith(API_MOUNT) or path == API_MOUNT.rstrip("/"):
            if api_app is None:
                start_response("404 Not Found", [("Content-Type", "application/json")])
                error = {"error": "no resource-manager API is mounted", "field": None}
                return [json.dumps(error).encode()]
            return api_app(environ, start_response)
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _text(start_response, "405 Method Not Allowed", "GET only\n")
        if path.startswith("/nodes/") and path.endswith("/metrics"):
            name = path[len("/nodes/") : -len("/metrics")]
            if name not in nodes:
                return _text(start_response, "404 Not Found", f"unknown node {name!r}\n")
            query = parse_qs(environ.get("QUERY_STRING", ""))
            include, exclude = query.get("collect[]", []), query.get("exclude[]", [])
            try:
                body = _node_metrics(exporters, name, include, exclude)
            except ExportersClosed:
                return _text(start_response, "503 Service Unavailable", "shutting down\n")
            except (UnsafePathError, OSError) as exc:
                LOG.error("node %s: cannot write its tree: %s", name, exc)
                return _text(start_response, "500 Internal Server Error", "node tree failed\n")
            if body is None:
                return _text(start_response, "400 Bad Request", "unknown collector(s)\n")
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [body]
        if path == "/truth/metrics":
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [render_truth(cluster)]
        if path == "/jobs/metrics":
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
            return [render_steps(cluster.job_steps())]
        if path == "/targets.json":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps(file_sd_targets(cluster.node_names(), address)).encode()]
        if path in ("/-/healthy", "/-/ready"):
            return _text(start_response, "200 OK", "OK\n")
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [_landing(cluster)]
        return _text(start_response, "404 Not Found", "not found\n")

    return with_self_metrics(app, QueueCollector(cluster, fabric))


class QueueCollector(Collector):
    """The cluster's queue families, and with a fabric its multi-node jobs' spread, and the
    jobs' step counters, read at each scrape.
    """

    def __init__(self, cluster: SimCluster, fabric: SimFabric | None = None) -> None:
        self.cluster = cluster
        self.fabric = fabric

    def collect(self) -> Iterable[Metric]:
        """The ``toposcope_queue_*`` families (and the fabric's) and the step counters now."""
        families = list(queue_families(self.cluster))
        if self.fabric is not None:
            families.extend(self.fabric.families(self.cluster))
        families.append(steps_family(self.cluster.job_steps()))
        return families


def _node_metrics(
    exporters: SimExporters, name: str, include: list[str], exclude: list[str]
) -> bytes | None:
    """The node's /metrics text, of the ``include``d collectors less the ``exclude``d ones
    (all when both are empty); ``None`` when ``include`` names an unknown collector.
    """
    with exporters.updated(name) as exporter:
        if not include and not exclude:
            return exporter.render()
        if set(include) - set(exporter.runner.names()):
            return None
        return render(exporter.runner.subset(include, exclude), name)


class SimServer(HttpServer):
    """The simulator's HTTP server, stoppable from another thread."""

    def __init__(self, app: WsgiApp, listen: str) -> None:
        super().__init__(app, listen, thread_name="sim-http")
