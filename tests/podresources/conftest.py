"""Fixtures of the pod-resources tests: a short socket directory and a served GPU node."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.podresources.server import PodResourcesServer


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A fresh directory with a short path: unix socket paths are limited to 107 bytes."""
    directory = Path(tempfile.mkdtemp(prefix="podres-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def kubelet(socket_dir: Path) -> Iterator[PodResourcesServer]:
    """The GPU node's pod-resources answers served on ``socket_dir/kubelet.sock``."""
    with PodResourcesServer(socket_dir / "kubelet.sock") as server:
        yield server
