"""A real Prometheus scrapes the exporter's gzip answer, whose workload text is a gzip member
kept from the sample (RFC 1952 multi-member file), and sees every series an identity client
gets.
"""

from __future__ import annotations

import gzip
import sys
import urllib.request
import zlib
from pathlib import Path

import pytest

from tests.procs import Prometheus, free_port, http_get, poll, running
from toposcope.serving.httpgzip import GZIP_WBITS
from toposcope.sim.fsgen import write_workload_tree

pytestmark = pytest.mark.integration

WORKLOADS = 40
#: samples whose value changes from one answer to the next (time, the process's own figures)
MOVING = (b"process_", b"toposcope_workload_sample_age_seconds ", b"toposcope_scrape_collector_du")


def fetch(url: str, encoding: str) -> tuple[str | None, bytes]:
    """``Content-Encoding`` and body of a GET sending ``Accept-Encoding: encoding``."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": encoding})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers["Content-Encoding"], response.read()


def steady(text: bytes) -> list[bytes]:
    """The lines of ``text`` but the samples of :data:`MOVING`."""
    return [line for line in text.splitlines() if not line.startswith(MOVING)]


def test_prometheus_reads_every_series_of_a_multi_member_gzip_answer(tmp_path: Path) -> None:
    root = tmp_path / "host"
    tree = write_workload_tree(root, workloads=WORKLOADS, threads_per_workload=2, seed=5)
    port = free_port()
    argv = [
        sys.executable, "-m", "toposcope.cli", "exporter", "--root", str(root),
        "--nvml", "off", "--listen", f"127.0.0.1:{port}",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    with running(argv, tmp_path / "exporter.log"):
        poll(lambda: http_get(f"http://127.0.0.1:{port}/-/healthy"))
        encoding, packed = fetch(url, "gzip")
        plain_encoding, plain = fetch(url, "identity")
        assert encoding == "gzip" and plain_encoding is None
        assert steady(gzip.decompress(packed)) == steady(plain)
        first = zlib.decompressobj(GZIP_WBITS)
        first.decompress(packed)
        assert first.eof and first.unused_data  # more than one member
        series = sum(1 for line in plain.splitlines() if line and not line.startswith(b"#"))
        prometheus = Prometheus(
            tmp_path,
            [{"job_name": "toposcope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}],
        )
        with prometheus.run() as prom:
            scraped = poll(lambda: prom.query('scrape_samples_scraped{job="toposcope"} > 0'))
            assert float(scraped[0]["value"][1]) == series
            up = prom.query('up{job="toposcope"}')
            assert float(up[0]["value"][1]) == 1
            names = {s["metric"]["workload"] for s in prom.query("toposcope_workload_info")}
            assert names == {w.name for w in tree.workloads}
