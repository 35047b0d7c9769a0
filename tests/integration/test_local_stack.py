"""``make up`` / ``make down``: the local stack starts real services, reports them, stops them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.procs import http_get, poll, require_binary

pytestmark = pytest.mark.integration


def stack(action: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOPOSCOPE_RUN_DIR": str(run_dir)}
    return subprocess.run(
        [sys.executable, str(REPO / "deploy" / "stack.py"), action],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_stack_up_status_down(tmp_path: Path) -> None:
    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    run_dir = tmp_path / "run"
    try:
        started = stack("up", run_dir)
        assert started.returncode == 0, started.stdout + started.stderr
        urls = json.loads((run_dir / "urls.json").read_text())
        assert set(urls) >= {"exporter", "prometheus", "alertmanager", "sim", "advisor", "dash"}
        for name in urls:
            assert name in started.stdout
        query = urllib.parse.urlencode({"query": 'up{job="toposcope-host"} == 1'})
        poll(
            lambda: json.loads(http_get(f"{urls['prometheus']}/api/v1/query?{query}"))["data"][
                "result"
            ]
        )
        rules = json.loads(http_get(f"{urls['prometheus']}/api/v1/rules"))["data"]["groups"]
        assert {g["name"] for g in rules} >= {"toposcope-exporter", "toposcope-gpu"}
        again = stack("up", run_dir)
        assert "already running" in again.stdout
        pids = sorted(p.name for p in (run_dir / "pids").glob("*.pid"))
        assert pids == [
            "advisor.pid",
            "alertmanager.pid",
            "dash.pid",
            "exporter.pid",
            "prometheus.pid",
            "sim.pid",
        ]
        sim_up = urllib.parse.urlencode({"query": 'up{job="toposcope-sim"} == 1'})
        poll(
            lambda: (
                len(
                    json.loads(http_get(f"{urls['prometheus']}/api/v1/query?{sim_up}"))["data"][
                        "result"
                    ]
                )
                == 10
            )
        )
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            http_get(urls["dash"])
        assert anonymous.value.code == 401  # the app that can apply asks who you are
        password = (run_dir / "dash" / "password").read_text().strip()
        assert f"sign in as admin, password in {run_dir.name}/dash/password" in started.stdout
        login = base64.b64encode(f"admin:{password}".encode()).decode()

        def dash_get(path: str) -> bytes:
            request = urllib.request.Request(
                f"{urls['dash']}{path}", headers={"Authorization": f"Basic {login}"}
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                return bytes(response.read())

        assert b"<title>toposcope</title>" in dash_get("")
        layout = json.loads(dash_get("_dash-layout"))
        assert "Recommendations" in json.dumps(layout)
        secrets = [run_dir / "dash" / "password", run_dir / "dash" / "web-config.yml"]
        secrets += [p for p in run_dir.glob("*/token")]
        assert len(secrets) >= 4
        for secret in secrets:
            assert secret.stat().st_mode & 0o777 == 0o600, secret
        status = stack("status", run_dir)
        assert status.returncode == 0 and "prometheus" in status.stdout
    finally:
        stopped = stack("down", run_dir)
    assert stopped.returncode == 0
    assert list((run_dir / "pids").glob("*.pid")) == []
    assert stack("status", run_dir).returncode == 1
