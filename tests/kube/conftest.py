"""The contract server, served on loopback, and a kubeconfig that points at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.cluster import cluster
from tests.kube.fake_apiserver import Running, kubeconfig, serve


@pytest.fixture
def apiserver() -> Iterator[Running]:
    running = serve(cluster())
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def config(apiserver: Running, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig(apiserver.url), encoding="utf-8")
    return path
