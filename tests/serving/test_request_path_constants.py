"""What the request path builds once instead of per request stays right: the exporter's
build-info families (rendered when the application is made) beside ``process_*`` read on
every scrape, and the web configuration's headers (listed once per loaded configuration).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.serving.test_gzip_self_metrics import get, serving
from toposcope import __version__
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.livewebconfig import LiveWebConfig


def samples(text: bytes, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
        if sample.name == name
    ]


def test_build_info_is_the_same_single_sample_on_every_scrape(exporter_port: int) -> None:
    bodies = [get(exporter_port, "/metrics", gzip_ok=False)[2] for _ in range(2)]
    for body in bodies:
        assert samples(body, "toposcope_exporter_build_info") == [
            ({"version": __version__, "hostname": "host-a"}, 1.0)
        ]
        daemon = samples(body, "toposcope_build_info")
        assert len(daemon) == 1 and daemon[0][0]["version"] == __version__
    assert bodies[0].count(b"# TYPE toposcope_build_info gauge") == 1


def test_process_metrics_are_read_again_on_every_scrape(exporter_port: int) -> None:
    def open_fds() -> float:
        body = get(exporter_port, "/metrics?collect[]=topology", gzip_ok=False)[2]
        [(_, value)] = samples(body, "process_open_fds")
        return value

    # Other threads of this process open and close a few descriptors meanwhile (sockets of
    # servers other tests left behind, garbage-collected files), so the step is made large
    # enough that such churn cannot hide it.
    before = open_fds()
    extra = [os.open(os.devnull, os.O_RDONLY) for _ in range(200)]
    try:
        assert open_fds() >= before + 150  # the server runs in this process
    finally:
        for fd in extra:
            os.close(fd)


def hello(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def test_headers_follow_a_reloaded_web_config(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    live = LiveWebConfig(path, 3600)
    server = HttpServer(hello, "127.0.0.1:0", methods=("GET",))
    server.use_web_config(live)
    with serving(server) as port:
        assert get(port, "/", gzip_ok=False)[1]["x-frame-options"] == "deny"
        path.write_text("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n")
        assert live.reload()
        for _ in range(2):
            assert get(port, "/", gzip_ok=False)[1]["x-frame-options"] == "sameorigin"
