"""Placing through slurmrestd: a repeat changes Slurm once, and Slurm's refusals refuse.

One test puts a forwarding server in front of the real slurmrestd that renames the body's
``nodelist`` to ``required_nodes``, a key slurmrestd 22.05 disables: the answer, HTTP 200 with
an ``errors`` array, is the real daemon's own, as a slurmrestd that does not take the key
gives it.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.managers import blockers, job_field, rest_manager
from toposcope.rm import ActionKind, ActionRequest, ActionStatus, ResourceManagerError
from toposcope.slurm.daemons import wait_for
from toposcope.slurm.localcluster import LocalCluster


def test_a_repeated_request_changes_slurm_once(slurm: LocalCluster, tmp_path: Path) -> None:
    blockers(slurm, *slurm.node_names)
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    target = slurm.node_names[1]
    manager = rest_manager(slurm, tmp_path)
    request = ActionRequest("place-r", ActionKind.PLACE, f"slurm-job-{job}", target)

    first = manager.apply_once(request)
    assert not first.repeat and first.state.status is ActionStatus.SUCCEEDED
    assert manager.control.changes == [f"POST job/{job} {{'nodelist': '{target}'}}"]
    again = manager.apply_once(request)
    assert again.repeat and again.state == first.state
    assert len(manager.control.changes) == 1
    with pytest.raises(ResourceManagerError, match="used for a different request") as conflict:
        manager.apply(ActionRequest("place-r", ActionKind.PLACE, str(job), slurm.node_names[2]))
    assert conflict.value.status == 409 and len(manager.control.changes) == 1
    assert job_field(slurm, job, "ReqNodeList") == target


class RenamingProxy:
    """Forwards every request to slurmrestd, with ``nodelist`` renamed in POST bodies."""

    def __init__(self, upstream: str) -> None:
        self.posts: list[dict[str, Any]] = []
        posts = self.posts

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self, body: bytes | None) -> None:
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "content-length")
                }
                request = urllib.request.Request(
                    upstream + self.path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, raw = answer.status, answer.read()
                except urllib.error.HTTPError as exc:
                    status, raw = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                posts.append(body)
                renamed = {"required_nodes" if k == "nodelist" else k: v for k, v in body.items()}
                self._forward(json.dumps(renamed).encode())

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(slurm: LocalCluster) -> Iterator[RenamingProxy]:
    server = RenamingProxy(slurm.rest_url)
    yield server
    server.close()


def test_an_error_under_http_200_refuses_the_placement(
    slurm: LocalCluster, proxy: RenamingProxy, tmp_path: Path
) -> None:
    blockers(slurm, *slurm.node_names)
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    manager = rest_manager(slurm, tmp_path, url=proxy.url)
    assert f"slurm-job-{job}" in {w.name for w in manager.workloads()}  # reading works

    request = ActionRequest("place-e", ActionKind.PLACE, str(job), slurm.node_names[1])
    with pytest.raises(ResourceManagerError) as refused:
        manager.apply(request)
    message = str(refused.value)
    assert refused.value.status == 502
    assert "HTTP 200" in message and 'Disabled key: "required_nodes"' in message
    assert "refuses the JWT" not in message  # a parse error is not blamed on the token
    assert proxy.posts == [{"nodelist": slurm.node_names[1]}]
    assert manager.recorded() == []  # nothing recorded: the same request id may be tried again
    assert job_field(slurm, job, "ReqNodeList") == "(null)"


def test_an_expired_token_is_refused_before_anything_changes(
    slurm: LocalCluster, tmp_path: Path
) -> None:
    blockers(slurm, *slurm.node_names)
    job = slurm.sbatch("--gres=gpu:1", "--wrap", "sleep 600")
    manager = rest_manager(slurm, tmp_path, token=slurm.token(lifespan_s=1))
    jwt = manager.control.rest.jwt if manager.control.rest else None
    assert jwt is not None and jwt.expires_at is not None
    wait_for(lambda: time.time() > (jwt.expires_at or 0), "the token's expiry", 15)

    with pytest.raises(
        ResourceManagerError, match=r"expired at .* `scontrol token username=root"
    ) as refused:
        manager.apply(ActionRequest("place-x", ActionKind.PLACE, str(job), slurm.node_names[1]))
    assert refused.value.status == 401
    with pytest.raises(ResourceManagerError, match="expired"):
        manager.workloads()
    assert manager.control.changes == [] and manager.recorded() == []
    assert job_field(slurm, job, "ReqNodeList") == "(null)"
