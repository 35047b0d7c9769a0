"""Fixtures: a fresh fake resource manager, the API app over it, a Flask test client, the
app served on a loopback port, and each resource-manager backend in turn
(:mod:`tests.sim_api.backends`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient

from tests.sim_api.backends import NAMES, Backend, backend
from tests.sim_api.fake_rm import FakeResourceManager
from toposcope.rm.api import make_api_app

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASE = "/api/v1"


@pytest.fixture
def rm() -> FakeResourceManager:
    return FakeResourceManager()


@pytest.fixture
def app(rm: FakeResourceManager) -> APIFlask:
    return make_api_app(rm, token=TOKEN)


@pytest.fixture
def client(app: APIFlask) -> FlaskClient:
    return app.test_client()


@pytest.fixture(params=NAMES)
def each_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Every backend in turn, with one running workload."""
    with backend(request.param) as started:
        yield started


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    app = make_api_app(FakeResourceManager(), token=TOKEN)
    httpd: WSGIServer = make_server("127.0.0.1", 0, app, handler_class=QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}{BASE}"
    finally:
        httpd.shutdown()
        thread.join(timeout=10)
        httpd.server_close()
