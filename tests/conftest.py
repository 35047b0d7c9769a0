"""Shared pytest fixtures: unpacked hwloc snapshot roots, cached once per session; and the
guard that a test run leaves the work tree as it found it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import HWLOC_LINUX, REPO, extract_snapshot

# ``make test`` sets this: the suite then fails when it changed what ``git status`` shows.
CLEAN_TREE_CHECK = "TOPOSCOPE_CHECK_CLEAN_TREE"
_TREE_BEFORE = pytest.StashKey[str]()


def work_tree_status() -> str | None:
    """``git status --porcelain`` of the repository, or None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _is_worker(session: pytest.Session) -> bool:
    """Whether this process is one of pytest-xdist's workers (the controller checks the tree)."""
    return hasattr(session.config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Remember the work tree's status when the check is on (in the controlling process)."""
    if os.environ.get(CLEAN_TREE_CHECK) == "1" and not _is_worker(session):
        before = work_tree_status()
        if before is not None:
            session.stash[_TREE_BEFORE] = before


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test wrote into the tracked tree (or left untracked files)."""
    before = session.stash.get(_TREE_BEFORE, None)
    if before is None:
        return
    after = work_tree_status()
    if after is not None and after != before:
        changed = sorted(set(after.splitlines()) ^ set(before.splitlines()))
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = "the test run changed the work tree:\n  " + "\n  ".join(changed)
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
