"""A real Prometheus scrapes the exporter over TLS with basic auth, as an operator's
configuration would (``scheme: https``, ``tls_config``, ``basic_auth``): ``up`` is 1, the
scrape asked for gzip and the exporter's own ``process_*`` and build info arrive; a wrong
password and a plain-HTTP scrape of the TLS endpoint get ``up`` 0 and no data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.procs import Prometheus, poll
from toposcope.config import ExporterConfig, HostPaths
from toposcope.errors import ConfigError
from toposcope.exporters.app import build_runner, make_wsgi_app
from toposcope.exporters.collectors import default_table
from toposcope.serving import devcerts
from toposcope.serving.httpserver import HttpServer
from toposcope.serving.livewebconfig import LiveWebConfig

pytestmark = pytest.mark.integration

PASSWORD = "scrape-pw"


def recording(app: Any, seen: list[str]) -> Callable[..., Iterable[bytes]]:
    """``app``, noting the ``Accept-Encoding`` of each request that reaches it."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        seen.append(environ.get("HTTP_ACCEPT_ENCODING", ""))
        result: Iterable[bytes] = app(environ, start_response)
        return result

    return wrapped


def test_prometheus_scrapes_over_tls_with_basic_auth(
    tmp_path: Path, hwloc_root: Callable[[str], Path]
) -> None:
    try:
        certs = devcerts.make_certificates(tmp_path / "pki", ["exporter"])
    except ConfigError as exc:
        pytest.skip(str(exc))
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(
        "tls_server_config:\n"
        f"  cert_file: {certs / 'exporter.crt'}\n"
        f"  key_file: {certs / 'exporter.key'}\n"
        f"basic_auth_users:\n  prometheus: '{digest}'\n"
    )
    config = ExporterConfig(paths=HostPaths.under(hwloc_root("16amd64-8n2c")), nvml="off")
    runner = build_runner(config, [e for e in default_table() if e.name == "topology"])
    seen: list[str] = []
    server = HttpServer(recording(make_wsgi_app(runner, "host-a"), seen), "127.0.0.1:0")
    server.use_web_config(LiveWebConfig(web))
    target = [f"127.0.0.1:{server.port}"]
    tls = {"ca_file": str(certs / "ca.crt")}
    jobs: list[dict[str, Any]] = [
        {
            "job_name": "tls",
            "scheme": "https",
            "tls_config": tls,
            "basic_auth": {"username": "prometheus", "password": PASSWORD},
            "static_configs": [{"targets": target}],
        },
        {
            "job_name": "wrong-password",
            "scheme": "https",
            "tls_config": tls,
            "basic_auth": {"username": "prometheus", "password": "wrong"},
            "static_configs": [{"targets": target}],
        },
        {"job_name": "plain-http", "static_configs": [{"targets": target}]},
    ]
    server.start()
    try:
        with Prometheus(tmp_path, jobs).run() as prom:
            up = poll(lambda: prom.query('up{job="tls"} == 1'), what="the TLS scrape")
            assert up[0]["metric"]["instance"] == target[0]
            rss = poll(lambda: prom.query('process_resident_memory_bytes{job="tls"}'))
            assert float(rss[0]["value"][1]) > 0
            info = poll(lambda: prom.query('toposcope_build_info{job="tls"}'))
            assert info[0]["metric"]["version"]
            for job in ("wrong-password", "plain-http"):
                down = poll(partial(prom.query, f'up{{job="{job}"}} == 0'), what=job)
                assert down[0]["metric"]["job"] == job
                assert (
                    prom.query(f'{{job="{job}", __name__!="up", __name__=~"toposcope_.*"}}') == []
                )
    finally:
        server.shutdown()
    assert seen and all("gzip" in accepted for accepted in seen)
