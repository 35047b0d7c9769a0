"""``/metrics`` over real loopback HTTP: gzip for clients that accept it (and only for
metrics answers), and every daemon's own ``process_*`` and ``toposcope_build_info``.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import platform
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from toposcope import __version__
from toposcope.agent import cli as agent_cli
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.selfmetrics import build_labels, daemon_registry, installed_revision

TIMEOUT = 10.0
METRICS_TYPE = prometheus_client.CONTENT_TYPE_LATEST


@contextmanager
def serving(server: HttpServer) -> Iterator[int]:
    server.start()
    try:
        yield server.port
    finally:
        server.shutdown()


def get(port: int, path: str, gzip_ok: bool) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    headers = {"Accept-Encoding": "gzip"} if gzip_ok else {"Accept-Encoding": "identity"}
    try:
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        got = {name.lower(): value for name, value in answer.getheaders()}
        return answer.status, got, answer.read()
    finally:
        connection.close()


def names(text: bytes) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text.decode())}


def build_info(text: bytes) -> dict[str, str]:
    for family in text_string_to_metric_families(text.decode()):
        if family.name == "toposcope_build_info":
            [sample] = family.samples
            return dict(sample.labels)
    raise AssertionError("no toposcope_build_info")


def test_the_exporter_gzips_metrics_for_a_client_that_accepts_it(exporter_port: int) -> None:
    status, headers, body = get(exporter_port, "/metrics", gzip_ok=True)
    assert status == 200
    assert headers["content-encoding"] == "gzip"
    assert headers["vary"] == "Accept-Encoding"
    assert headers["content-type"] == METRICS_TYPE
    assert int(headers["content-length"]) == len(body)
    decoded = gzip.decompress(body)
    plain_status, plain_headers, plain = get(exporter_port, "/metrics", gzip_ok=False)
    assert plain_status == 200 and "content-encoding" not in plain_headers
    assert len(body) < len(plain) / 3
    assert names(decoded) == names(plain)
    assert "toposcope_numa_node_info" in names(decoded)


def test_the_exporter_serves_its_process_metrics_and_build_info(exporter_port: int) -> None:
    _, _, body = get(exporter_port, "/metrics?collect[]=topology", gzip_ok=False)
    found = names(body)
    assert {
        "process_resident_memory_bytes", "process_cpu_seconds", "process_open_fds",
        "process_start_time_seconds", "toposcope_build_info", "toposcope_exporter_build_info",
    } <= found  # fmt: skip
    labels = build_info(body)
    assert labels["version"] == __version__
    assert labels["python_version"] == platform.python_version()
    assert set(labels) == {
        "version", "revision", "python_version", "python_implementation", "os", "arch",
    }  # fmt: skip


def test_answers_other_than_metrics_are_never_gzipped(exporter_port: int) -> None:
    status, headers, body = get(exporter_port, "/", gzip_ok=True)
    assert status == 200 and "content-encoding" not in headers
    assert b"toposcope exporter" in body
    status, headers, body = get(exporter_port, "/nope", gzip_ok=True)
    assert status == 404 and "content-encoding" not in headers


def lazy_app(content_type: str) -> Callable[..., Iterator[bytes]]:
    """A WSGI application that starts its answer only when iterated."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
        start_response("200 OK", [("Content-Type", content_type)])
        yield b"# TYPE lazy_metric gauge\n"
        yield b"lazy_metric 1.0\n"

    return app


@pytest.mark.parametrize("content_type", [METRICS_TYPE, "text/plain; charset=utf-8"])
def test_an_answer_started_while_iterated_is_handled(content_type: str) -> None:
    with serving(HttpServer(lazy_app(content_type), "127.0.0.1:0")) as port:
        status, headers, body = get(port, "/", gzip_ok=True)
    assert status == 200
    expected = b"# TYPE lazy_metric gauge\nlazy_metric 1.0\n"
    if content_type == METRICS_TYPE:
        assert headers["content-encoding"] == "gzip"
        assert gzip.decompress(body) == expected
    else:
        assert "content-encoding" not in headers and body == expected


def test_the_agent_serves_its_process_metrics_beside_its_api() -> None:
    parser = argparse.ArgumentParser()
    agent_cli.add_arguments(parser)
    args = parser.parse_args(["--listen", "127.0.0.1:0", "--hostname", "n1"])
    server, _ = agent_cli.build_server(args)
    with serving(server) as port:
        status, headers, body = get(port, "/metrics", gzip_ok=True)
        api_status, api_headers, nodes = get(port, "/api/v1/nodes", gzip_ok=True)
    assert status == 200 and headers["content-encoding"] == "gzip"
    found = names(gzip.decompress(body))
    assert {"process_resident_memory_bytes", "toposcope_build_info"} <= found
    assert api_status == 200 and "content-encoding" not in api_headers
    assert [node["name"] for node in json.loads(nodes)] == ["n1"]


def test_a_daemon_registry_leaves_the_default_registry_alone() -> None:
    before = set(prometheus_client.REGISTRY._names_to_collectors)
    first, second = daemon_registry(), daemon_registry()
    assert set(prometheus_client.REGISTRY._names_to_collectors) == before
    assert first.get_sample_value("process_resident_memory_bytes", {}) is not None
    assert second.get_sample_value("toposcope_build_info", build_labels()) == 1.0


def test_the_revision_is_the_commit_pip_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, url_info in (
        ("from_git", {"vcs_info": {"vcs": "git", "commit_id": "0123abcd"}}),
        ("from_wheel", {"archive_info": {}}),
        ("broken", None),
    ):
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        text = "{not json" if url_info is None else json.dumps({"url": "x", **url_info})
        (info / "direct_url.json").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_revision("from_git") == "0123abcd"
    assert installed_revision("from_wheel") == "unknown"
    assert installed_revision("broken") == "unknown"
    assert installed_revision("no-such-distribution") == "unknown"
