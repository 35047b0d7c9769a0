"""Fixtures: a fresh fake resource manager, the API app over it, and a Flask test client."""

from __future__ import annotations

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient

from tests.sim_api.fake_rm import FakeResourceManager
from toposcope.rmapi import make_api_app

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
