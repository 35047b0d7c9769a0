"""Shared pytest fixtures: unpacked hwloc snapshot roots, cached once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import HWLOC_LINUX, extract_snapshot


@pytest.fixture(scope="session")
def hwloc_root(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Return a function that unpacks ``tests/fixtures/hwloc/linux/<name>.tar.bz2`` once.

    The returned path holds ``sys/`` (and usually ``proc/``), as ``--root`` expects.
    """
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            dest = tmp_path_factory.mktemp(f"hwloc-{name[:20]}")
            cache[name] = extract_snapshot(HWLOC_LINUX / f"{name}.tar.bz2", dest)
        return cache[name]

    return get
