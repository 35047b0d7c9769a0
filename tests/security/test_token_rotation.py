"""A rotated token file is used from the next request on (Kubernetes projected tokens).

The kubelet rewrites a projected ServiceAccount token before it expires by swapping the file
(a new inode behind the same name); the advisor service and the API-server client run for
days, so they must send the new token, never the one they read at start-up.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.fake_tokenreview import FakeTokenReview, serving
from toposcope.advisor.rmclients import HttpResourceManager, rotating_token
from toposcope.auth.tokens import TokenFile
from toposcope.errors import ConfigError
from toposcope.kubeapi.client import in_cluster


def rotate(path: Path, token: str) -> None:
    """Replace ``path`` the way the kubelet does: a new file renamed over the old one."""
    fresh = path.with_name(f".{path.name}.new")
    fresh.write_text(token + "\n")
    fresh.chmod(0o600)
    os.replace(fresh, path)


@pytest.fixture
def token_path(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    rotate(path, "first")
    return path


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    """A resource-manager API on loopback that records each Authorization header."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            raw = json.dumps([]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_the_advisor_sends_the_rotated_token(
    token_path: Path, recorder: tuple[str, list[str]]
) -> None:
    url, seen = recorder
    client = HttpResourceManager(url, rotating_token(token_path), timeout=10)
    client.nodes()
    rotate(token_path, "second")
    client.nodes()
    client.nodes()
    assert seen == ["Bearer first", "Bearer second", "Bearer second"]


def test_a_broken_rotation_keeps_the_last_good_token(
    token_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = TokenFile(token_path)
    rotate(token_path, "")
    with caplog.at_level(logging.WARNING):
        assert token.read() == "first"
    assert "is empty" in caplog.text
    rotate(token_path, "third")
    assert token.read() == "third"  # tried again, and picked up


def test_an_unsafe_token_file_is_still_refused_at_start(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("t\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="every user"):
        TokenFile(path)


def test_the_in_cluster_client_rereads_its_own_token(tmp_path: Path) -> None:
    """The agent's own token (for its TokenReviews) rotates too."""
    rotate(tmp_path / "token", "agent-first")
    fake = FakeTokenReview("agent-first")
    fake.issue("caller", "toposcope", "toposcope-advisor", "toposcope-agent")
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "caller", "audiences": ["toposcope-agent"]},
    }
    with serving(fake) as url:
        api = in_cluster(tmp_path, api_url=url)
        assert api.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body)
        fake.reviewer = "agent-second"
        rotate(tmp_path / "token", "agent-second")
        answer = api.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body)
    assert answer["status"]["authenticated"] is True
    assert len(fake.reviews) == 2
