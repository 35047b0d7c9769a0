"""Benchmark the HTTP server under a burst of scrapes: the standard library's ``wsgiref``
(a thread per request, the server toposcope used before) against cheroot (the server every
daemon runs on now), in plain HTTP and over TLS.

Each server runs the exporter's application (every default host collector over hwloc's
``16amd64-8n2c`` fixture, no GPUs) in its own process on loopback; this process fires
``--clients`` scrapes at once (one thread and one fresh connection each), ``--rounds`` times,
and prints per-scrape p50/p99 latency and the errors. ``--json`` for machine-readable output.
Never used as a timed assertion in tests; docs/serving.md records a run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socketserver
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import HWLOC_LINUX, extract_snapshot  # noqa: E402
from toposcope.config import ExporterConfig, HostPaths  # noqa: E402
from toposcope.devtools.procs import free_port, stop, wait_http  # noqa: E402
from toposcope.exporters.app import ExporterServer, build_runner, make_wsgi_app  # noqa: E402
from toposcope.exporters.collectors import default_table  # noqa: E402
from toposcope.serving.livewebconfig import LiveWebConfig  # noqa: E402

FIXTURE = "16amd64-8n2c"
SERVERS = ("wsgiref", "cheroot", "cheroot-tls")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on standard error."""


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 1024


def serve(kind: str, root: Path, port: int, web_config: Path | None) -> None:
    """Serve the exporter's app with ``kind`` on 127.0.0.1:``port`` until killed."""
    config = ExporterConfig(paths=HostPaths.under(root), nvml="off")
    runner = build_runner(config, list(default_table()))
    if kind == "wsgiref":
        app = make_wsgi_app(runner, "bench")
        httpd = make_server(
            "127.0.0.1", port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
        httpd.serve_forever()
        return
    server = ExporterServer(runner, "bench", f"127.0.0.1:{port}")
    if web_config is not None:
        server.use_web_config(LiveWebConfig(web_config))
    server.serve_forever()


def make_certificate(folder: Path) -> Path:
    """A self-signed certificate for 127.0.0.1 and the web config that serves it."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    names = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        ["openssl", "req", "-x509", *key, "-keyout", "server.key", "-out", "server.crt", *names],
        check=True,
        capture_output=True,
        cwd=folder,
    )
    config = folder / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    return config


def burst(port: int, clients: int, context: ssl.SSLContext | None) -> tuple[list[float], int]:
    """``clients`` scrapes at once: their latencies (ms) and how many failed."""
    start = threading.Barrier(clients)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def scrape() -> None:
        start.wait()
        began = time.perf_counter()
        try:
            if context is None:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            else:
                connection = http.client.HTTPSConnection(
                    "127.0.0.1", port, timeout=60, context=context
                )
            connection.request("GET", "/metrics")
            answer = connection.getresponse()
            answer.read()
            connection.close()
            ok = answer.status == 200
        except (OSError, http.client.HTTPException) as exc:
            ok, reason = False, repr(exc)
        else:
            reason = f"status {answer.status}"
        with lock:
            if ok:
                latencies.append((time.perf_counter() - began) * 1000)
            else:
                errors.append(reason)

    threads = [threading.Thread(target=scrape) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, len(errors)


def measure(kind: str, root: Path, folder: Path, clients: int, rounds: int) -> dict[str, Any]:
    """Start a ``kind`` server process, fire the bursts, stop it."""
    port = free_port()
    config = make_certificate(folder) if kind == "cheroot-tls" else None
    command = [sys.executable, __file__, "--serve", kind, "--root", str(root), "--port", str(port)]
    if config is not None:
        command += ["--web-config", str(config)]
    process = subprocess.Popen(command)
    context = None
    try:
        if config is None:
            wait_http(f"http://127.0.0.1:{port}/-/healthy", 60)
        else:
            context = ssl.create_default_context(cafile=folder / "server.crt")
            deadline = time.monotonic() + 60
            while burst(port, 1, context)[1] and time.monotonic() < deadline:
                time.sleep(0.1)
        burst(port, 10, context)  # warm up
        latencies: list[float] = []
        failed = 0
        for _ in range(rounds):
            got, errors = burst(port, clients, context)
            latencies += got
            failed += errors
    finally:
        stop(process)
    ordered = sorted(latencies) or [float("nan")]
    return {
        "server": kind,
        "scrapes": clients * rounds,
        "errors": failed,
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))], 1),
        "max_ms": round(ordered[-1], 1),
    }


def main() -> int:
    """Run the comparison (or, with ``--serve``, be one of the servers)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--clients", type=int, default=200, help="scrapes at once (200)")
    parser.add_argument("--rounds", type=int, default=5, help="bursts per server (5)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--web-config", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.root, args.port, args.web_config)
        return 0
    with tempfile.TemporaryDirectory(prefix="toposcope-bench-") as tmp:
        root = extract_snapshot(HWLOC_LINUX / f"{FIXTURE}.tar.bz2", Path(tmp))
        results = [measure(kind, root, Path(tmp), args.clients, args.rounds) for kind in SERVERS]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{args.clients} concurrent scrapes x {args.rounds} rounds of the exporter ({FIXTURE})")
    print(f"{'server':<12} {'scrapes':>8} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for row in results:
        print(
            f"{row['server']:<12} {row['scrapes']:>8} {row['errors']:>7} {row['p50_ms']:>8} "
            f"{row['p99_ms']:>8} {row['max_ms']:>8}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
