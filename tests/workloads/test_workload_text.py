"""The workload families written straight to bytes, and served without copies or joins."""

from __future__ import annotations

import gzip
import urllib.request
from pathlib import Path
from typing import Any

from tests.workloads.helpers import V2HOST
from toposcope.config import ExporterConfig, HostPaths, WorkloadSettings
from toposcope.exporters.app import ExporterServer, make_wsgi_app
from toposcope.exporters.collectors import workloads
from toposcope.exporters.collectors.workloads import (
    WorkloadsCollector,
    plain_workload_families,
    rendered_workload_families,
    workload_families,
)
from toposcope.exporters.context import CollectorContext, HostTopology
from toposcope.exporters.exposition import RenderedFamily, render_families
from toposcope.exporters.runner import NamedCollector, ScrapeRunner
from toposcope.exporters.workload_snapshot import (
    WorkloadFigures,
    WorkloadSnapshot,
    WorkloadSnapshotter,
)
from toposcope.serving.httpgzip import UNPACK_PIECE, GzipMember


def _snapshot(root: Path) -> WorkloadSnapshot:
    config = ExporterConfig(paths=HostPaths.under(root))
    return WorkloadSnapshotter(config.workloads, config.paths, HostTopology(config).get).take()


def test_bytes_writer_matches_the_client_python_families_byte_for_byte() -> None:
    snapshot = _snapshot(V2HOST)
    assert snapshot.workloads
    reference = render_families(workload_families(snapshot))
    for written in (rendered_workload_families(snapshot), plain_workload_families(snapshot)):
        assert all(isinstance(f, RenderedFamily) for f in written)
        assert render_families(written) == reference


def test_bytes_writer_escapes_label_values_as_client_python_does() -> None:
    snapshot = _snapshot(V2HOST)
    first = snapshot.workloads[0]
    odd = WorkloadFigures(
        identity=first.identity,
        root_pid=first.root_pid,
        comm='we"ird\\name\nx',
        cpu_seconds={"0": 1e21, "1": float("inf")},
        threads=first.threads,
        memory={"0": 0.5},
        gpus=frozenset({3}),
        gpu_used={3: 2**40},
    )
    changed = WorkloadSnapshot([odd], {3: 0}, dropped_total=7)
    text = render_families(rendered_workload_families(changed))
    assert text == render_families(workload_families(changed))
    assert render_families(plain_workload_families(changed)) == text
    assert b'comm="we\\"ird\\\\name\\nx"' in text and b"+Inf" in text


def _served(root: Path) -> tuple[WorkloadsCollector, CollectorContext, list[RenderedFamily]]:
    config = ExporterConfig(
        paths=HostPaths.under(root), workloads=WorkloadSettings(sample_interval=3600)
    )
    ctx = CollectorContext(config)
    collector = workloads.ENTRY.factory(ctx)
    assert isinstance(collector, WorkloadsCollector) and collector.sampler is not None
    sample = collector.sampler.sample_now()
    assert sample is not None
    assert collector.stop()  # no thread: every scrape serves this very sample
    return collector, ctx, sample.value


#: samples whose value changes from one answer to the next (time, the process's own figures)
MOVING = (b"process_", b"toposcope_workload_sample_age_seconds ", b"toposcope_scrape_collector_du")


def _steady(text: bytes) -> bytes:
    """``text`` without the samples of :data:`MOVING`."""
    return b"".join(line for line in text.splitlines(True) if not line.startswith(MOVING))


def _answer(app: Any, encoding: str) -> tuple[dict[str, str], list[bytes]]:
    headers: dict[str, str] = {}

    def start_response(status: str, answer: list[tuple[str, str]]) -> None:
        assert status == "200 OK"
        headers.update(answer)

    environ = {"PATH_INFO": "/metrics", "HTTP_ACCEPT_ENCODING": encoding}
    return headers, list(app(environ, start_response))


def test_the_sample_is_kept_compressed_and_sent_as_is_to_gzip_clients() -> None:
    collector, ctx, families = _served(V2HOST)
    try:
        assert all(isinstance(f.data, GzipMember) for f in families)
        text = render_families(families)
        assert sum(len(f.data) for f in families) < len(text) / 2
        app = make_wsgi_app(ScrapeRunner([NamedCollector("workloads", collector)]), "h")
        headers, chunks = _answer(app, "gzip")
        assert headers["Content-Encoding"] == "gzip"
        served = [c for c in chunks if any(c is f.data for f in families)]
        assert len(served) == len(families)  # the same objects: neither copied nor joined
        assert int(headers["Content-Length"]) == sum(len(c) for c in chunks)
        plain_headers, plain = _answer(app, "identity")
        assert "Content-Encoding" not in plain_headers
        assert not any(isinstance(c, GzipMember) for c in plain)
        assert max(len(c) for c in plain) <= UNPACK_PIECE
        assert int(plain_headers["Content-Length"]) == sum(len(c) for c in plain)
        assert _steady(gzip.decompress(b"".join(chunks))) == _steady(b"".join(plain))
        assert text in b"".join(plain)
    finally:
        assert ctx.stop_background()


def test_streamed_answer_over_http_is_complete_plain_and_gzipped() -> None:
    collector, ctx, families = _served(V2HOST)
    try:
        runner = ScrapeRunner([NamedCollector("workloads", collector)])
        server = ExporterServer(runner, "h", "127.0.0.1:0")
        server.start()
        try:
            url = f"http://127.0.0.1:{server.port}/metrics"
            with urllib.request.urlopen(url, timeout=30) as response:
                plain = response.read()
                assert int(response.headers["Content-Length"]) == len(plain)
            request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.headers["Content-Encoding"] == "gzip"
                packed = response.read()
                assert int(response.headers["Content-Length"]) == len(packed)
        finally:
            server.shutdown()
        unpacked = gzip.decompress(packed)
        assert _steady(unpacked) == _steady(plain)  # byte for byte, whatever the encoding
        assert render_families(families) in plain
        assert plain.endswith(b"\n") and b"toposcope_build_info" in plain
        assert len(packed) < len(unpacked)
    finally:
        assert ctx.stop_background()
